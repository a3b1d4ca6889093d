import DequeModule
import Synchronization

/// The driver's inputs on their way to its loop. Senders append under a lock; the loop takes
/// everything waiting at once, so a busy loop pays one lock and at most one wake-up per batch
/// instead of per input (each notification brings several inputs: sent, changelogged, published).
final class RelayInbox: Sendable {
    /// Inputs taken together. A deque: the loop moves each out from the front (`popFirst`), in order, with
    /// no copy and no reversal of the batch first: the loop touches each input once.
    typealias Batch = Deque<RelayService.Input>

    private struct State {
        var buffer: Batch = []
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    /// Queues `input` for the loop (from any thread).
    func yield(_ input: consuming RelayService.Input) {
        // Moved into the buffer, not copied: a copy retains everything the input carries, and on another
        // thread than the one that made it those are cache misses.
        var moving = Optional(input)
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.buffer.append(moving.take()!)
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Replaces `batch` with every input waiting, in the order they came, waiting while there is
    /// none. `batch`'s storage is reused for the next inputs. Returns `false` (and an empty
    /// `batch`) once the calling task is cancelled. One caller at a time.
    func take(into batch: inout Batch) async -> Bool {
        batch.removeAll(keepingCapacity: true)
        while true {
            if Task.isCancelled { return false }
            let taken = state.withLock { state -> Bool in
                guard !state.buffer.isEmpty else { return false }
                swap(&state.buffer, &batch)
                return true
            }
            if taken { return true }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    // Checked under the lock: an input or a cancellation that came meanwhile wakes at once.
                    let wake = state.withLock { state -> Bool in
                        if !state.buffer.isEmpty || Task.isCancelled { return true }
                        state.waiter = continuation
                        return false
                    }
                    if wake { continuation.resume() }
                }
            } onCancel: {
                state.withLock { state in
                    defer { state.waiter = nil }
                    return state.waiter
                }?.resume()
            }
        }
    }
}
