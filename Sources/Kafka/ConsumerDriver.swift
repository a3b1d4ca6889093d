import CRdKafka
import Dispatch
import Logging
import Synchronization

/// Runs a ``ConsumerStateMachine`` for a ``KafkaConsumer``: the application's calls and the poll
/// thread's reads and rebalances go into the machine under one lock; what it answers (librdkafka
/// calls, resuming a waiting task, waking the poll thread) is done after the lock is released.
final class ConsumerDriver: KafkaRevokeAcknowledging, Sendable {
    private typealias Wakes = ConsumerStateMachine.Wakes

    /// The machine and the waiters its answers name, kept together so one lock covers both.
    private struct State {
        var machine: ConsumerStateMachine
        var iteratorWaiter: CheckedContinuation<Void, Never>?
        var closeWaiters: [@Sendable () -> Void] = []
        var seekWaiters: [UInt64: CheckedContinuation<Void, any Error>] = [:]
        /// The consumer queue while the poll thread reads it: a resume interrupts a read that waits on it.
        var queue: ConsumerQueue?
    }

    private let state: Mutex<State>
    /// The poll thread's waits (for room, for a revoke's acknowledgement). A semaphore, so a wake
    /// given between the machine's decision to wait and the wait itself is not lost; a stale one
    /// only makes the poll thread ask the machine once more.
    private let pollerWake = DispatchSemaphore(value: 0)
    /// The machine's ``ConsumerStateMachine/generation``, for the iterator to read without the lock.
    let generation = Atomic<UInt64>(0)
    /// Assignments lost so far (``KafkaConsumer/membershipLosses``): counted before the lost revoke is handed out, and so
    /// before the consumer joins the group again.
    let membershipLosses = Atomic<Int>(0)
    private let logger: Logger
    private let readsHeaders: Bool

    init(configuration: KafkaConsumerConfiguration, logger: Logger) {
        state = Mutex(State(machine: ConsumerStateMachine(configuration: .init(configuration))))
        self.logger = logger
        readsHeaders = configuration.readsHeaders
    }

    /// What librdkafka calls back for this consumer: rebalances into the machine, commit failures logged.
    var callbacks: KafkaClientCallbacks {
        var callbacks = KafkaClientCallbacks(logger: logger)
        // The handle keeps the driver through this; the driver keeps the handle only through the
        // queue, which it lets go when the poll thread ends.
        callbacks.rebalance = { [self] consumer, reason, list in rebalance(consumer, reason, list) }
        callbacks.servesBackgroundEvents = true
        callbacks.offsetCommit = { [logger] error, list in
            if error != RD_KAFKA_RESP_ERR_NO_ERROR && error != RD_KAFKA_RESP_ERR__NO_OFFSET {
                logger.warning("commit failed", metadata: ["error": "\(KafkaError.from(error, operation: "commit"))"])
            } else if let list, let partitionError = list.firstError(operation: "commit") {
                logger.warning("commit failed", metadata: ["error": "\(partitionError)"])
            }
        }
        return callbacks
    }

    /// Starts the poll thread, which reads until the consumer is closed or fails.
    func start(handle: KafkaClientHandle, batchSize: Int) {
        state.withLock { $0.queue = ConsumerQueue(handle: handle) }
        // The thread keeps itself and this driver alive until it has left the group.
        _ = KafkaPollThread(
            name: "kafka-consumer",
            setUp: { ReadBuffer(capacity: max(1, batchSize)) },
            iteration: { [self] buffer in pollOnce(handle.pointer, &buffer) },
            tearDown: { [self] buffer in
                buffer.messages.deallocate()
                leaveGroup(handle.pointer, failure: buffer.fatal)
            }
        )
    }

    var currentAssignment: [TopicPartition] {
        state.withLock { $0.machine.assignment.sorted() }
    }

    /// Runs an input under the lock, then wakes whom the machine named, outside the lock.
    @discardableResult
    private func input<Result: Sendable>(_ body: (inout State) -> (Result, Wakes)) -> Result {
        let (result, iterator, queue, poller) = state.withLock { state in
            let (result, wakes) = body(&state)
            generation.store(state.machine.generation, ordering: .releasing)
            let iterator = wakes.iterator ? state.iteratorWaiter.take() : nil
            return (result, iterator, wakes.read ? state.queue : nil, wakes.poller)
        }
        iterator?.resume()
        if poller { pollerWake.signal() }
        queue?.interruptRead()
        return result
    }

    // MARK: Application side

    /// Takes every buffered event (up to `limit`) in one lock acquisition.
    func takeChunk(limit: Int) -> ConsumerStateMachine.Take {
        input { $0.machine.take(limit: limit) }
    }

    /// Puts back events the iterator took but did not hand out, under the current rules.
    func giveBack(_ events: ArraySlice<KafkaConsumerEvent>) {
        guard !events.isEmpty else { return }
        state.withLock { $0.machine.giveBack(events) }
    }

    /// Suspends until there is something to take (or the consumer finished, or the task is cancelled).
    func waitForEvents(isolation actor: isolated (any Actor)?) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation(isolation: actor) { (continuation: CheckedContinuation<Void, Never>) in
                let waits = state.withLock { state in
                    guard !Task.isCancelled, state.machine.iteratorWillWait() else { return false }
                    state.iteratorWaiter = continuation
                    return true
                }
                if !waits { continuation.resume() }
            }
        } onCancel: {
            state.withLock { state in
                state.machine.iteratorCancelled()
                return state.iteratorWaiter.take()
            }?.resume()
        }
    }

    func pause(_ partitions: [TopicPartition]) {
        input { ((), $0.machine.pauseRequested(partitions)) }
    }

    func resume(_ partitions: [TopicPartition]) {
        input { ((), $0.machine.resumeRequested(partitions)) }
    }

    func acknowledge(revoke id: UInt64) {
        input { ((), $0.machine.acknowledged(revoke: id)) }
    }

    func seek(_ partition: TopicPartition, to offset: Int64) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let admitted = input { state in
                guard let (id, wakes) = state.machine.seekRequested(partition, to: offset) else { return (false, Wakes()) }
                state.seekWaiters[id] = continuation
                return (true, wakes)
            }
            if !admitted { continuation.resume(throwing: KafkaError.closed(operation: "seek")) }
        }
    }

    /// Asks the poll thread to read these partitions again from these offsets, announcing each with a
    /// ``KafkaConsumerEvent/partitionsRewound(_:)`` event before its first message from there.
    func rewind(_ offsets: [TopicPartition: Int64]) throws {
        let admitted = input { state in
            guard let wakes = state.machine.rewindRequested(offsets) else { return (false, Wakes()) }
            return (true, wakes)
        }
        if !admitted { throw KafkaError.closed(operation: "rewind") }
    }

    /// Asks the poll thread to leave the group and waits until it has.
    func close() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let finished = input { state in
                let (finished, wakes) = state.machine.closeRequested()
                if !finished { state.closeWaiters.append { continuation.resume() } }
                return (finished, wakes)
            }
            if finished { continuation.resume() }
        }
    }

    /// ``close()``, waiting at most `timeout`; whether the poll thread left in time.
    func close(timeout: Duration) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let once = ResumeOnce(continuation)
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout.dispatchInterval) { once.resume(false) }
            let finished = input { state in
                let (finished, wakes) = state.machine.closeRequested()
                if !finished { state.closeWaiters.append { once.resume(true) } }
                return (finished, wakes)
            }
            if finished { once.resume(true) }
        }
    }

    /// Asks the poll thread to leave the group, without waiting.
    func requestClose() {
        input { $0.machine.closeRequested() }
    }

    // MARK: Poll thread

    /// What only the poll thread touches.
    struct ReadBuffer {
        let messages: UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>
        let capacity: Int
        /// A fatal consumer error read: the loop ends and the application's iteration throws it.
        var fatal: KafkaError?

        init(capacity: Int) {
            self.capacity = capacity
            messages = .allocate(capacity: capacity)
        }
    }

    /// One step of the poll loop: waits for room, or makes the pending seeks, pauses and resumes,
    /// then reads a batch.
    private func pollOnce(_ consumer: OpaquePointer, _ buffer: inout ReadBuffer) -> KafkaPollThread.Next {
        var roomDeadline: DispatchTime?
        while true {
            let (step, seekWaiters, queue) = input { state in
                let step = state.machine.nextPollStep()
                var waiters: [CheckedContinuation<Void, any Error>?] = []
                if case .perform(let seeks, _, _) = step { waiters = seeks.map { state.seekWaiters.removeValue(forKey: $0.id) } }
                return ((step, waiters, state.queue), Wakes())
            }
            switch step {
            case .waitForRoom(let timeout):
                let deadline = roomDeadline ?? .now() + .milliseconds(Int(timeout.milliseconds))
                roomDeadline = deadline
                if pollerWake.wait(timeout: deadline) == .timedOut {
                    state.withLock { $0.machine.roomWaitExpired() }
                }
            case .perform(let seeks, let flowChanges, let then):
                for (seek, waiter) in zip(seeks, seekWaiters) {
                    if let error = Self.seek(consumer, seek.partition, to: seek.offset) {
                        // A rewind's seek of a partition not fetching yet fails: it starts from its committed offset anyway.
                        if waiter == nil { logger.info("a rewind's seek was not made", metadata: ["partition": "\(seek.partition)", "error": "\(error)"]) }
                        waiter?.resume(throwing: error)
                    } else {
                        waiter?.resume()
                    }
                }
                // The rewinds' events, once their seeks are made: what is read from now on comes after them.
                input { ((), $0.machine.rewindsMade()) }
                for change in flowChanges { apply(change, consumer) }
                guard case .read(let limit) = then, let queue else { return .finished }
                read(consumer, queue, limit: limit, into: &buffer)
                return buffer.fatal == nil ? .again : .finished
            }
        }
    }

    /// A batch read, its messages into the machine.
    private func read(_ consumer: OpaquePointer, _ queue: ConsumerQueue, limit: Int, into buffer: inout ReadBuffer) {
        let count = queue.read(into: buffer.messages, limit: min(limit, buffer.capacity))
        let returned = ContinuousClock.now
        guard count > 0 else {
            state.withLock { $0.machine.readReturned(at: returned) }
            return
        }
        var batch: [KafkaMessage] = []
        batch.reserveCapacity(count)
        KafkaMessage.convertAndDestroy(buffer.messages, count: count, headers: readsHeaders) { message, converted in
            // `switch consume`, not `if let`: the record moves into the batch instead of being copied.
            switch consume converted {
            case .some(let record):
                batch.append(record)
            case .none:
                let error = message.pointee.err
                if error == RD_KAFKA_RESP_ERR__FATAL {
                    buffer.fatal = Self.fatalError(of: consumer)
                } else if case let refusal = KafkaError.from(error, operation: "join the consumer group"), refusal.isGroupProtocolMismatch {
                    // The group's members use another assignor kind: librdkafka would retry the join forever, a
                    // member in name only. The consumer stops instead, naming the setting.
                    buffer.fatal = KafkaError(
                        code: refusal.code, name: refusal.name,
                        message: "the group's members use another kind of partition.assignment.strategy (eager and cooperative do not mix; \(refusal.message))",
                        operation: refusal.operation, fatal: true)
                } else if error != RD_KAFKA_RESP_ERR__PARTITION_EOF {
                    logger.warning("consumer error", metadata: ["error": "\(KafkaError.from(error, operation: "consume"))"])
                }
            }
        }
        // Handed over, not shared: the machine then owns the only reference and changes it in place.
        input { state in
            var owned: [KafkaMessage] = []
            swap(&owned, &batch)
            state.machine.readReturned(at: returned)
            return ((), state.machine.batchRead(owned))
        }
    }

    /// After the loop: leaves the group (its revoke does not wait), then ends the application's events.
    private func leaveGroup(_ consumer: OpaquePointer, failure: KafkaError?) {
        // Returned and dropped here, so the queue is destroyed outside the lock (unless a resume
        // still holds it for a moment).
        _ = state.withLock { state in
            state.machine.leavingGroup()
            return state.queue.take()
        }
        let closeError = rd_kafka_consumer_close(consumer)
        if closeError != RD_KAFKA_RESP_ERR_NO_ERROR {
            logger.warning("leaving the consumer group failed", metadata: ["error": "\(KafkaError.from(closeError, operation: "close"))"])
        }
        let (seekWaiters, closeWaiters) = input { state in
            let (unmade, wakes) = state.machine.finished(failure: failure)
            let seekWaiters = unmade.compactMap { state.seekWaiters.removeValue(forKey: $0) }
            defer { state.closeWaiters.removeAll() }
            return ((seekWaiters, state.closeWaiters), wakes)
        }
        seekWaiters.forEach { $0.resume(throwing: KafkaError.closed(operation: "seek")) }
        closeWaiters.forEach { $0() }
    }

    /// Called on the poll thread, inside librdkafka's poll, when the group rebalances.
    private func rebalance(_ consumer: OpaquePointer, _ reason: rd_kafka_resp_err_t, _ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) {
        let partitions = list.topicPartitions.sorted()
        let cooperative = String(cString: rd_kafka_rebalance_protocol(consumer)) == "COOPERATIVE"
        if reason == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS {
            logger.info("partitions assigned", metadata: ["partitions": "\(partitions)"])
            applyAssignment(consumer, list, cooperative: cooperative, assign: true)
            // librdkafka (2.8 as 2.0.2) keeps an application pause across revoke and assign; a partition starts unpaused.
            rd_kafka_resume_partitions(consumer, list)
            if cooperative { wakeFetchers(consumer) }
            let now = ContinuousClock.now
            input { ((), $0.machine.assigned(partitions, at: now)) }
            return
        }
        if reason != RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS {
            logger.warning("rebalance error; giving up the assignment", metadata: ["error": "\(KafkaError.from(reason, operation: "rebalance"))"])
        }
        let lost = rd_kafka_assignment_lost(consumer) != 0
        logger.info("partitions revoked", metadata: ["partitions": "\(partitions)", "lost": "\(lost)"])
        if lost { membershipLosses.add(1, ordering: .sequentiallyConsistent) }
        let handshake = input { $0.machine.revokeRequested(partitions, lost: lost, acknowledger: self) }
        // The application's chance to finish and commit what it has of them before they go.
        if case .waitForAcknowledgement(let id, let timeout) = handshake {
            let deadline = DispatchTime.now() + .milliseconds(Int(timeout.milliseconds))
            while !state.withLock({ $0.machine.revokeWait(id) }) {
                guard pollerWake.wait(timeout: deadline) == .timedOut else { continue }
                let acknowledged = input { state in
                    let (acknowledged, wakes) = state.machine.revokeWaitExpired(id, partitions: partitions)
                    // Counted before the lost revoke can be taken (under the same lock), as for a lost assignment.
                    if !acknowledged { membershipLosses.add(1, ordering: .sequentiallyConsistent) }
                    return (acknowledged, wakes)
                }
                if !acknowledged {
                    logger.warning("revoke not acknowledged in time; giving the partitions up, told as lost", metadata: ["partitions": "\(partitions)"])
                }
                break
            }
        }
        applyAssignment(consumer, list, cooperative: cooperative, assign: false)
        if cooperative { wakeFetchers(consumer) }
    }

    /// The longest the poll thread waits in ``wakeFetchers(_:)``: past it the broker threads wake on their own.
    static let fetcherWakeTimeoutMilliseconds: Int32 = 500

    /// Wakes the broker threads that fetch the partitions the consumer keeps through an incremental rebalance.
    ///
    /// librdkafka (2.8) pauses every assigned partition while the application handles an incremental rebalance and
    /// resumes them at its (un)assign call, but a resume does not wake a broker thread: one with no other partition to
    /// fetch sleeps up to a second (its longest block) before it fetches the partitions that stayed, so a rebalance
    /// that moves none of them would hold their events back that long. A request to each of their leaders (ListOffsets,
    /// through `rd_kafka_offsets_for_times`, one round trip to all leaders at once) wakes their threads.
    private func wakeFetchers(_ consumer: OpaquePointer) {
        var assigned: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
        guard rd_kafka_assignment(consumer, &assigned) == RD_KAFKA_RESP_ERR_NO_ERROR, let assigned else { return }
        let partitions = assigned.topicPartitions
        rd_kafka_topic_partition_list_destroy(assigned)
        guard !partitions.isEmpty else { return }
        let latest = KafkaPartitionList(partitions, offsets: Dictionary(uniqueKeysWithValues: partitions.map { ($0, Int64(RD_KAFKA_OFFSET_END)) }))
        let error = latest.withPointer { rd_kafka_offsets_for_times(consumer, $0, Self.fetcherWakeTimeoutMilliseconds) }
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            logger.debug("waking the fetchers after a rebalance took longer than its bound", metadata: ["error": "\(KafkaError.from(error, operation: "list offsets"))"])
        }
    }

    private func applyAssignment(
        _ consumer: OpaquePointer, _ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>, cooperative: Bool, assign: Bool
    ) {
        if cooperative {
            let error = assign ? rd_kafka_incremental_assign(consumer, list) : rd_kafka_incremental_unassign(consumer, list)
            if let error {
                logger.error("incremental (un)assign failed", metadata: ["error": "\(KafkaError.consuming(error, operation: "assign"))"])
            }
        } else {
            let error = rd_kafka_assign(consumer, assign ? list : nil)
            if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                logger.error("assign failed", metadata: ["error": "\(KafkaError.from(error, operation: "assign"))"])
            }
        }
    }

    /// Makes a librdkafka pause or resume asked for by the application.
    private func apply(_ change: ConsumerStateMachine.FlowChange, _ consumer: OpaquePointer) {
        let operation = change.pause ? "pause" : "resume"
        let error = KafkaPartitionList(change.partitions).withPointer { list in
            change.pause ? rd_kafka_pause_partitions(consumer, list) : rd_kafka_resume_partitions(consumer, list)
        }
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            logger.warning("librdkafka \(operation) failed", metadata: ["error": "\(KafkaError.from(error, operation: operation))"])
        }
    }

    /// Moves `partition`'s read position; the error, if librdkafka refused.
    private static func seek(_ consumer: OpaquePointer, _ partition: TopicPartition, to offset: Int64) -> KafkaError? {
        KafkaPartitionList([partition], offsets: [partition: offset]).withPointer { list in
            if let error = rd_kafka_seek_partitions(consumer, list, 10_000) {
                return KafkaError.consuming(error, operation: "seek \(partition)")
            }
            return list.firstError(operation: "seek")
        }
    }

    private static func fatalError(of consumer: OpaquePointer) -> KafkaError {
        var text = [CChar](repeating: 0, count: 512)
        let code = rd_kafka_fatal_error(consumer, &text, text.count)
        return KafkaError(code: code.rawValue, name: String(cString: rd_kafka_err2name(code)), message: String(cStringBuffer: text), operation: "consume")
    }
}

/// The consumer's queue (`rd_kafka_queue_get_consumer`), destroyed when the last holder lets go:
/// the poll thread reads it while the application may interrupt that read from another thread.
final class ConsumerQueue: Sendable {
    // librdkafka's queue calls are thread-safe; the pointer never changes.
    nonisolated(unsafe) private let pointer: OpaquePointer
    /// Kept so the client is destroyed after its queue.
    private let handle: KafkaClientHandle

    init(handle: KafkaClientHandle) {
        self.handle = handle
        pointer = rd_kafka_queue_get_consumer(handle.pointer)!
    }

    deinit {
        rd_kafka_queue_destroy(pointer)
    }

    /// The messages queued now (at most `limit`), waiting up to `timeoutMilliseconds` for the
    /// first one only (see ``consumeAvailable(_:timeoutMilliseconds:into:limit:)``); the number of messages.
    func read(into messages: UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>, limit: Int, timeoutMilliseconds: Int32 = 100) -> Int {
        consumeAvailable(pointer, timeoutMilliseconds: timeoutMilliseconds, into: messages, limit: limit)
    }

    /// Ends a read waiting on an empty queue now.
    func interruptRead() {
        rd_kafka_queue_yield(pointer)
    }
}
