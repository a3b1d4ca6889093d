import Foundation
import Synchronization

/// A dedicated OS thread that runs a loop until stopped or until the loop ends itself.
///
/// librdkafka's poll calls block for up to their timeout; running them here keeps them off
/// Swift's cooperative thread pool.
final class KafkaPollThread: Sendable {
    private let state = Mutex<State>(State())

    private struct State {
        var stopRequested = false
        var finished = false
        var joiners: [CheckedContinuation<Void, Never>] = []
    }

    /// What the loop does after an iteration.
    enum Next {
        case again
        /// The loop ends (then `tearDown` runs), as after ``requestStop()``.
        case finished
    }

    /// Starts a thread that makes `Local` (state only this thread touches, so it needs no lock),
    /// runs `iteration` on it until it says ``Next/finished`` or a stop is asked for, then hands it
    /// to `tearDown`.
    init<Local>(
        name: String,
        setUp: @escaping @Sendable () -> Local,
        iteration: @escaping @Sendable (inout Local) -> Next,
        tearDown: @escaping @Sendable (Local) -> Void
    ) {
        // The thread keeps this object alive until the loop ends.
        let thread = Thread { [self] in
            // Named from inside: on Linux a name set before `start()` never reaches the OS thread, which keeps
            // its creator's (an event loop's, say), and `top -H` and perf counted the poll threads' CPU as NIO's.
            Thread.current.name = name
            var local = setUp()
            while !state.withLock({ $0.stopRequested }), case .again = iteration(&local) {}
            tearDown(local)
            let joiners = state.withLock { state in
                state.finished = true
                return state.joiners
            }
            joiners.forEach { $0.resume() }
        }
        thread.start()
    }

    /// Calls `body` in a loop until stopped.
    convenience init(name: String, body: @escaping @Sendable () -> Void) {
        self.init(name: name, setUp: {}, iteration: { _ in body(); return .again }, tearDown: { _ in })
    }

    /// Asks the loop to end after its current iteration, without waiting.
    func requestStop() {
        state.withLock { $0.stopRequested = true }
    }

    /// Ends the loop and waits for the thread to leave it.
    func stop() async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state in
                state.stopRequested = true
                if state.finished { return true }
                state.joiners.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }
}
