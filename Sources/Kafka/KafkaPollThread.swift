import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

#if canImport(Glibc)
/// glibc's `pthread_setname_np`, which the Glibc module does not export (it is a GNU extension).
@_silgen_name("pthread_setname_np")
private func linuxSetThreadName(_ thread: pthread_t, _ name: UnsafePointer<CChar>) -> Int32
#endif

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
            // Named from inside, through pthreads: Foundation's `Thread.name` reaches the OS thread only when the
            // thread already knows its own pthread, which on Linux races with `start()` (set before `start()` it
            // never does). An unnamed poll thread keeps its creator's name, and `top -H` and perf count its CPU
            // as that thread's (an event loop's, say).
            Self.nameCurrentThread(name)
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

    /// Gives the calling OS thread `name` (at most 15 bytes are kept by Linux).
    private static func nameCurrentThread(_ name: String) {
        #if canImport(Glibc)
        _ = linuxSetThreadName(pthread_self(), String(name.utf8.prefix(15)) ?? name)
        #else
        Thread.current.name = name
        #endif
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
