import APNs
import DequeModule
import Kafka
import Synchronization
import RelayCore

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

/// The loop's vocabulary: what reaches it through the inbox.
extension RelayService {
    /// The loop's inputs: what the consumer, the producers, APNs and the clock report.
    enum Input: Sendable {
        /// Events in the consumer's order; a revoke is always the last of its batch.
        case consumed([KafkaConsumerEvent])
        case consumerFailed(String, exitCode: Int32)
        /// The events topic's partition count, as the cluster answered it (asked every `layoutCheckInterval`).
        case partitionCountObserved(Int)
        case restored(TopicPartition, generation: UInt64, RestoredChangelog)
        case restoreFailed(TopicPartition, generation: UInt64, String)
        /// Partition 0 of the changelog, read for the layout of the empty `TopicPartition`.
        case layoutProbed(TopicPartition, generation: UInt64, RestoredChangelog)
        case sent(DeviceDispatch<PendingNotification>, APNsOutcome)
        /// Delivery reports of produced records (tagged by ``RecordOutbox``), as one poll of their producer served them.
        case deliveries([KafkaTaggedDeliveryReport])
        /// A producer refused a record outright (it gets no report).
        case publishFailed(RelayEffect, PublishFailure)
        /// Commit `request` was answered: its offsets when it succeeded, `nil` when it failed.
        case committed(UInt64, [TopicPartition: Int64]?)
        /// The relay's transactional producer is initialised (``RelayTransactions``).
        case transactionsReady(any RelayTransactionalProducer)
        /// The relay's transaction committed, or failed (`failure`).
        case transactionCommitted(failure: TransactionFailure?, took: Duration)
        /// A failed transaction is over: aborted, or its producer replaced by `replacement` (initialised).
        case transactionRecovered(replacement: (any RelayTransactionalProducer)?)
        /// The transactions cannot go on (a producer that could not be made, partitions that could not be read
        /// again) within the failure bound: the relay exits 1.
        case transactionsFailed(String)
        /// A `push.devices` record; `window` is released once it is applied.
        case device(key: ArraySlice<UInt8>?, value: ArraySlice<UInt8>?, window: DeviceRecordWindow)
        case devicesLoaded
        case devicesFailed(String)
        case deadTokens([DeadTokenReport])
        case tick
        /// A graceful stop, asked for at `askedAt` (its budget counts from then).
        case stop(askedAt: ContinuousClock.Instant)
        case abandon
    }
}

extension RelayService {
    /// What a produced record's delivery tells the engine (``RecordOutbox``). A record waiting for its report
    /// holds this, a few words, rather than an input, which is as wide as its widest case.
    enum Delivery: Sendable {
        /// A result (of `device`, when it has a token) or a dead letter of the record was published.
        case published(RecordReference, device: String?)
        /// The changelog append with this token was stored.
        case changelogged(UInt64)
        case publishSucceeded(PublishDestination)
        /// A progress marker was stored (`handOver`: the hand-over that wrote it).
        case progressStored(handOver: UInt64?)
        /// The layout record of the partition's assignment `generation` was stored.
        case layoutStored(TopicPartition, generation: UInt64)
    }
}
