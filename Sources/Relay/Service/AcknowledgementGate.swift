import Synchronization

/// Hands events from the consumer task to the loop one at a time: the consumer waits until the
/// loop has handled the previous one. `close()` releases a waiting consumer and every later one.
final class AcknowledgementGate: Sendable {
    private let state = Mutex<(waiter: CheckedContinuation<Void, Never>?, closed: Bool)>((nil, false))

    /// Registers as waiting, runs `deliver`, and returns when the loop acknowledged (or closed).
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

    func acknowledge() {
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
