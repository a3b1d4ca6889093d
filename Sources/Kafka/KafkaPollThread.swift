import Foundation
import Synchronization

/// A dedicated OS thread that calls `body` in a loop until stopped.
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

    init(name: String, body: @escaping @Sendable () -> Void) {
        // The thread keeps this object alive until the loop ends.
        let thread = Thread { [self] in
            while !state.withLock({ $0.stopRequested }) {
                body()
            }
            let joiners = state.withLock { state in
                state.finished = true
                return state.joiners
            }
            joiners.forEach { $0.resume() }
        }
        thread.name = name
        thread.start()
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
