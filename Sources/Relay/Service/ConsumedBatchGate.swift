import Synchronization
import RelayCore

/// Hands consumed batches from the consumer task to the loop one at a time: the consumer waits
/// until the loop has handled the previous batch, so it runs at most a batch ahead of
/// backpressure. (A revoke in a batch is the engine's to acknowledge, after its hand-over.)
/// `close()` releases a waiting consumer and every later one.
final class ConsumedBatchGate: Sendable {
    private let state = Mutex<(waiter: CheckedContinuation<Void, Never>?, closed: Bool)>((nil, false))

    /// Registers as waiting, runs `deliver`, and returns when the loop handled the batch (or closed).
    func submit(_ deliver: () -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let closed = state.withLock { state in
                if state.closed { return true }
                state.waiter = continuation
                return false
            }
            if closed {
                continuation.resume()
            } else {
                deliver()
            }
        }
    }

    /// The loop handled the batch: the consumer may hand over the next one.
    func handled() {
        state.withLock { state in
            defer { state.waiter = nil }
            return state.waiter
        }?.resume()
    }

    func close() {
        state.withLock { state in
            state.closed = true
            defer { state.waiter = nil }
            return state.waiter
        }?.resume()
    }
}
