import CRdKafka
import Foundation
import Logging
import Synchronization

/// The consumer's poll thread and the buffer it shares with the application.
///
/// Ordering rules this type keeps:
/// - a rebalance event goes into the buffer at the moment librdkafka reports it, so an
///   `assigned` event precedes every message of those partitions;
/// - messages of a partition that is not (or no longer) assigned are never handed out;
/// - messages of a paused partition are parked, in order, and handed out again after resume;
/// - librdkafka's own pause, resume and seek run on the poll thread between two batch reads, never
///   during one (see `flowChanges`), and each partition's offsets are checked for gaps and repeats.
final class ConsumerCore: KafkaCallbackContext, @unchecked Sendable {
    // @unchecked: every stored `var` below is guarded by `condition` (an NSCondition, because the
    // poll thread must also wait on it, which Mutex cannot do). The `let`s are immutable.
    private let condition = NSCondition()
    private let configuration: KafkaConsumerConfiguration

    private var buffer: [KafkaConsumerEvent] = []
    private var head = 0
    private var assignment: Set<TopicPartition> = []
    private var paused: Set<TopicPartition> = []
    private var parked: [TopicPartition: [KafkaMessage]] = [:]
    private var pendingSeeks: [PendingSeek] = []
    /// librdkafka pause/resume calls for the poll thread to make, in the order asked, of assigned partitions only
    /// (filtered when asked, pruned at revoke: librdkafka 2.0.2 keeps a pause across revoke and assign, so a stale
    /// one would leave a partition that comes back unfetched). librdkafka 2.0.2's batch
    /// read (`rd_kafka_consume_batch_queue`, fixed in 2.1.0) drops the messages of a partition it has already
    /// taken when a pause of that partition lands during the read, after moving the partition's position past
    /// them: those offsets are never read. Made between reads, a pause only finds messages still queued inside
    /// librdkafka, which it discards without moving the position.
    private var flowChanges: [FlowChange] = []
    /// The consumer queue, while the poll thread runs: a resume wakes a read that waits on it.
    private var consumerQueue: OpaquePointer?
    private var iteratorWaiter: CheckedContinuation<Void, Never>?
    private var closeWaiters: [CheckedContinuation<Void, Never>] = []
    private var closeRequested = false
    /// The poll thread is inside `rd_kafka_consumer_close`: revokes must not wait for the app.
    private var leavingGroup = false
    private var finished = false
    private var failure: KafkaError?
    /// Revokes put into the buffer, and how many of those the application has finished with (it
    /// asked for the next event after one). A revoke waits until its own is finished with.
    private var revokesIssued: UInt64 = 0
    private var revokesAcknowledged: UInt64 = 0
    private var pollerWaitsForRoom = false
    private var pollerWaitsForAcknowledgement = false
    /// Bumped (under the lock) whenever what may be handed out changes: pause, resume, seek,
    /// revoke. The iterator takes events in chunks and, when this moved, gives back what it has
    /// not handed out yet so the new rules apply to it. Read without the lock on the hot path.
    let generation = Atomic<UInt64>(0)

    /// Poll-thread-only: topic names by topic handle, cleared at every rebalance because librdkafka
    /// may free a topic handle once none of its partitions is assigned.
    private var topicNames: [OpaquePointer: String] = [:]

    private struct FlowChange {
        var pause: Bool
        var partitions: [TopicPartition]
    }

    /// Poll-thread-only: the check of each batch's offsets (repeats dropped, a gap read again once).
    private var offsetGuard = KafkaOffsetGuard()

    private struct PendingSeek {
        var partition: TopicPartition
        var offset: Int64
        var continuation: CheckedContinuation<Void, any Error>
    }

    init(configuration: KafkaConsumerConfiguration, logger: Logger) {
        self.configuration = configuration
        super.init(logger: logger)
    }

    override func configure(_ conf: OpaquePointer?) {
        rd_kafka_conf_set_rebalance_cb(conf, consumerRebalanceCallback)
        rd_kafka_conf_set_offset_commit_cb(conf, consumerCommitCallback)
    }

    func start(handle: KafkaClientHandle) {
        condition.lock()
        consumerQueue = rd_kafka_queue_get_consumer(handle.pointer)
        condition.unlock()
        let thread = Thread { [self] in run(handle) }
        thread.name = "kafka-consumer-poll"
        thread.start()
    }

    var currentAssignment: [TopicPartition] {
        condition.lock()
        defer { condition.unlock() }
        return assignment.sorted()
    }

    // MARK: Application side

    enum Take {
        case events([KafkaConsumerEvent], generation: UInt64)
        case finished(KafkaError?)
        case empty
    }

    /// Takes every buffered event (up to `limit`) in one lock acquisition.
    func takeChunk(limit: Int) -> Take {
        condition.lock()
        defer { condition.unlock() }
        guard head < buffer.count else { return finished ? .finished(failure) : .empty }
        let end = min(buffer.count, head + limit)
        let chunk = Array(buffer[head..<end])
        head = end
        if head == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            head = 0
        }
        if pollerWaitsForRoom && buffer.count - head < configuration.bufferLimit / 2 {
            condition.broadcast()
        }
        return .events(chunk, generation: generation.load(ordering: .relaxed))
    }

    /// Puts back events the iterator took but did not hand out, applying the current rules:
    /// messages of unassigned partitions are dropped, those of paused partitions parked.
    func giveBack(_ events: ArraySlice<KafkaConsumerEvent>) {
        guard !events.isEmpty else { return }
        condition.lock()
        var kept: [KafkaConsumerEvent] = []
        kept.reserveCapacity(events.count)
        // Given-back messages are older than anything parked for their partition since they were
        // taken (the pause parked the buffer behind them): they go in front of it.
        var parkedFirst: [TopicPartition: [KafkaMessage]] = [:]
        for event in events {
            if case .message(let message) = event {
                let partition = message.topicPartition
                guard assignment.contains(partition) else { continue }
                if paused.contains(partition) {
                    parkedFirst[partition, default: []].append(message)
                    continue
                }
            }
            kept.append(event)
        }
        for (partition, messages) in parkedFirst { parked[partition] = messages + (parked[partition] ?? []) }
        buffer.insert(contentsOf: kept, at: head)
        condition.unlock()
    }

    /// The application asked for the event after a revoke: it is done with the revoked partitions.
    func acknowledgeRevoke() {
        condition.lock()
        revokesAcknowledged += 1
        if pollerWaitsForAcknowledgement { condition.broadcast() }
        condition.unlock()
    }

    /// Suspends until there is something to take (or the consumer finished, or the task is cancelled).
    func waitForEvents(isolation actor: isolated (any Actor)?) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation(isolation: actor) { (continuation: CheckedContinuation<Void, Never>) in
                parkIterator(continuation)
            }
        } onCancel: {
            wakeIterator()
        }
    }

    private func parkIterator(_ continuation: CheckedContinuation<Void, Never>) {
        condition.lock()
        if head < buffer.count || finished || Task.isCancelled {
            condition.unlock()
            continuation.resume()
            return
        }
        iteratorWaiter = continuation
        condition.unlock()
    }

    private func wakeIterator() {
        condition.lock()
        let waiter = iteratorWaiter
        iteratorWaiter = nil
        condition.unlock()
        waiter?.resume()
    }

    func markPaused(_ partitions: [TopicPartition]) {
        condition.lock()
        paused.formUnion(partitions)
        let pausedNow = Set(partitions)
        var kept: [KafkaConsumerEvent] = []
        kept.reserveCapacity(buffer.count - head)
        for event in buffer[head...] {
            if case .message(let message) = event, pausedNow.contains(message.topicPartition) {
                parked[message.topicPartition, default: []].append(message)
            } else {
                kept.append(event)
            }
        }
        buffer = kept
        head = 0
        enqueueFlowChange(pause: true, partitions)
        generation.add(1, ordering: .releasing)
        if pollerWaitsForRoom { condition.broadcast() }
        condition.unlock()
    }

    /// Under the lock.
    private func enqueueFlowChange(pause: Bool, _ partitions: [TopicPartition]) {
        let assigned = partitions.filter(assignment.contains)
        if !assigned.isEmpty { flowChanges.append(FlowChange(pause: pause, partitions: assigned)) }
    }

    func markResumed(_ partitions: [TopicPartition]) {
        condition.lock()
        enqueueFlowChange(pause: false, partitions)
        // A read waiting on an empty queue would otherwise make the resume wait for its timeout.
        if let consumerQueue { rd_kafka_queue_yield(consumerQueue) }
        if pollerWaitsForRoom { condition.broadcast() }
        var returning: [KafkaConsumerEvent] = []
        for partition in partitions {
            paused.remove(partition)
            if let messages = parked.removeValue(forKey: partition) {
                returning.append(contentsOf: messages.map(KafkaConsumerEvent.message))
            }
        }
        buffer.insert(contentsOf: returning, at: head)
        generation.add(1, ordering: .releasing)
        let waiter = takeWaiterIfReady()
        condition.unlock()
        waiter?.resume()
    }

    func seek(_ partition: TopicPartition, to offset: Int64) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            condition.lock()
            if finished || closeRequested {
                condition.unlock()
                continuation.resume(throwing: KafkaError.closed(operation: "seek"))
                return
            }
            pendingSeeks.append(PendingSeek(partition: partition, offset: offset, continuation: continuation))
            if pollerWaitsForRoom { condition.broadcast() }
            condition.unlock()
        }
    }

    func close() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            condition.lock()
            closeRequested = true
            if finished {
                condition.unlock()
                continuation.resume()
                return
            }
            closeWaiters.append(continuation)
            condition.broadcast()
            condition.unlock()
        }
    }

    func requestClose() {
        condition.lock()
        closeRequested = true
        condition.broadcast()
        condition.unlock()
    }

    // MARK: Poll thread

    private func run(_ handle: KafkaClientHandle) {
        let consumer = handle.pointer
        condition.lock()
        let queue = consumerQueue
        condition.unlock()
        let capacity = max(1, configuration.batchSize)
        let messages = UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>.allocate(capacity: capacity)
        defer { messages.deallocate() }
        var fatal: KafkaError?

        // librdkafka leaves the group when it is not polled for max.poll.interval.ms; a full buffer
        // (the application is slow) waits at most a fraction of that, then takes one message to
        // keep the membership, so the buffer can exceed its limit by one message per wait.
        let longestWait = Double(configuration.longestPollPause.milliseconds) / 1000
        pollLoop: while true {
            var batchLimit = capacity
            condition.lock()
            if !closeRequested && pendingSeeks.isEmpty && flowChanges.isEmpty && buffer.count - head >= configuration.bufferLimit {
                let deadline = Date(timeIntervalSinceNow: longestWait)
                pollerWaitsForRoom = true
                while !closeRequested && pendingSeeks.isEmpty && flowChanges.isEmpty && buffer.count - head >= configuration.bufferLimit {
                    if !condition.wait(until: deadline) {
                        batchLimit = 1
                        break
                    }
                }
            }
            pollerWaitsForRoom = false
            let seeks = pendingSeeks
            pendingSeeks.removeAll()
            let changes = flowChanges
            flowChanges.removeAll()
            let stop = closeRequested
            condition.unlock()

            for seek in seeks { perform(seek, consumer: consumer) }
            for change in changes { apply(change, consumer: consumer) }
            if stop { break }

            // A batch read: librdkafka's skipping of offsets in it is kept away by making pause and resume
            // only between reads (`flowChanges`) and caught by `guardOffsets` (its own pauses in a rebalance).
            let count = rd_kafka_consume_batch_queue(queue, 100, messages, batchLimit)
            guard count > 0 else { continue }
            var batch: [KafkaMessage] = []
            batch.reserveCapacity(count)
            for index in 0..<count {
                guard let message = messages[index] else { continue }
                defer { rd_kafka_message_destroy(message) }
                let error = message.pointee.err
                if error == RD_KAFKA_RESP_ERR_NO_ERROR {
                    batch.append(convert(message))
                } else if error == RD_KAFKA_RESP_ERR__FATAL {
                    fatal = fatalError(of: consumer)
                } else if error != RD_KAFKA_RESP_ERR__PARTITION_EOF {
                    logger.warning("consumer error", metadata: ["error": "\(KafkaError.from(error, operation: "consume"))"])
                }
            }
            guardOffsets(&batch, consumer: consumer)
            deliver(batch)
            if fatal != nil { break pollLoop }
        }

        condition.lock()
        leavingGroup = true
        consumerQueue = nil
        condition.unlock()
        rd_kafka_queue_destroy(queue)
        let closeError = rd_kafka_consumer_close(consumer)
        if closeError != RD_KAFKA_RESP_ERR_NO_ERROR {
            logger.warning("leaving the consumer group failed", metadata: ["error": "\(KafkaError.from(closeError, operation: "close"))"])
        }
        finish(failure: fatal)
    }

    private func fatalError(of consumer: OpaquePointer) -> KafkaError {
        var text = [CChar](repeating: 0, count: 512)
        let code = rd_kafka_fatal_error(consumer, &text, text.count)
        return KafkaError(code: code.rawValue, name: String(cString: rd_kafka_err2name(code)), message: String(cStringBuffer: text), operation: "consume")
    }

    private func convert(_ message: UnsafeMutablePointer<rd_kafka_message_t>) -> KafkaMessage {
        let raw = message.pointee
        var topic = ""
        if let topicHandle = raw.rkt {
            if let cached = topicNames[topicHandle] {
                topic = cached
            } else {
                topic = String(cString: rd_kafka_topic_name(topicHandle))
                topicNames[topicHandle] = topic
            }
        }
        return KafkaMessage(consuming: message, topic: topic)
    }

    private func deliver(_ batch: [KafkaMessage]) {
        guard !batch.isEmpty else { return }
        condition.lock()
        if head > 4096 && head > buffer.count / 2 {
            buffer.removeFirst(head)
            head = 0
        }
        // Consecutive messages usually share a partition: decide once per run.
        var lastPartition: TopicPartition?
        var lastAccepted = false
        var lastParked = false
        for message in batch {
            let partition = message.topicPartition
            if partition != lastPartition {
                lastPartition = partition
                lastAccepted = assignment.contains(partition)
                lastParked = paused.contains(partition)
            }
            // Not assigned: revoked while this batch was being polled; its next owner reads it.
            guard lastAccepted else { continue }
            if lastParked {
                parked[partition, default: []].append(message)
            } else {
                buffer.append(.message(message))
            }
        }
        let waiter = takeWaiterIfReady()
        condition.unlock()
        waiter?.resume()
    }

    private func perform(_ seek: PendingSeek, consumer: OpaquePointer) {
        offsetGuard.forget([seek.partition])
        condition.lock()
        dropBuffered(of: [seek.partition])
        parked[seek.partition] = nil
        generation.add(1, ordering: .releasing)
        condition.unlock()
        let list = [seek.partition].makeRdKafkaList(offsets: [seek.partition: seek.offset])
        defer { rd_kafka_topic_partition_list_destroy(list) }
        if let error = rd_kafka_seek_partitions(consumer, list, 10_000) {
            seek.continuation.resume(throwing: KafkaError.consuming(error, operation: "seek \(seek.partition)"))
        } else if let error = list.firstError(operation: "seek") {
            seek.continuation.resume(throwing: error)
        } else {
            seek.continuation.resume()
        }
    }

    /// Makes a librdkafka pause or resume asked for by the application.
    private func apply(_ change: FlowChange, consumer: OpaquePointer) {
        let list = change.partitions.makeRdKafkaList()
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let error = change.pause ? rd_kafka_pause_partitions(consumer, list) : rd_kafka_resume_partitions(consumer, list)
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            logger.warning("librdkafka \(change.pause ? "pause" : "resume") failed", metadata: ["error": "\(KafkaError.from(error, operation: change.pause ? "pause" : "resume"))"])
        }
    }

    /// Filters a batch through the offset check and seeks each partition with a gap back to its expected offset.
    private func guardOffsets(_ batch: inout [KafkaMessage], consumer: OpaquePointer) {
        for gap in offsetGuard.filter(&batch) {
            logger.info("offsets missing from a read; reading the partition again from the first one", metadata: [
                "partition": "\(gap.partition)", "expected": "\(gap.expected)", "received": "\(gap.found)",
            ])
            let list = [gap.partition].makeRdKafkaList(offsets: [gap.partition: gap.expected])
            defer { rd_kafka_topic_partition_list_destroy(list) }
            if let error = rd_kafka_seek_partitions(consumer, list, 10_000) {
                logger.warning("re-reading after a gap failed", metadata: ["partition": "\(gap.partition)", "error": "\(KafkaError.consuming(error, operation: "seek"))"])
                continue
            }
            offsetGuard.rereadStarted(gap.partition)
        }
    }

    /// Called on the poll thread, inside librdkafka's poll, when the group rebalances.
    fileprivate func rebalance(
        _ consumer: OpaquePointer,
        _ reason: rd_kafka_resp_err_t,
        _ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>
    ) {
        let partitions = list.topicPartitions.sorted()
        let cooperative = String(cString: rd_kafka_rebalance_protocol(consumer)) == "COOPERATIVE"
        topicNames.removeAll()
        switch reason {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            logger.info("partitions assigned", metadata: ["partitions": "\(partitions)"])
            applyAssignment(consumer, list, cooperative: cooperative, assign: true)
            // librdkafka 2.0.2 keeps an application pause across revoke and assign; a partition starts unpaused.
            rd_kafka_resume_partitions(consumer, list)
            offsetGuard.forget(partitions)
            condition.lock()
            assignment.formUnion(partitions)
            buffer.append(.partitionsAssigned(partitions))
            let waiter = takeWaiterIfReady()
            condition.unlock()
            waiter?.resume()

        default:
            if reason != RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS {
                logger.warning("rebalance error; giving up the assignment", metadata: ["error": "\(KafkaError.from(reason, operation: "rebalance"))"])
            }
            let lost = rd_kafka_assignment_lost(consumer) != 0
            logger.info("partitions revoked", metadata: ["partitions": "\(partitions)", "lost": "\(lost)"])
            condition.lock()
            let revoked = Set(partitions)
            assignment.subtract(revoked)
            paused.subtract(revoked)
            for partition in revoked { parked[partition] = nil }
            offsetGuard.forget(revoked)
            for index in flowChanges.indices { flowChanges[index].partitions.removeAll(where: revoked.contains) }
            flowChanges.removeAll { $0.partitions.isEmpty }
            dropBuffered(of: revoked)
            generation.add(1, ordering: .releasing)
            buffer.append(.partitionsRevoked(partitions))
            revokesIssued += 1
            let revokeOrdinal = revokesIssued
            let waiter = takeWaiterIfReady()
            condition.unlock()
            waiter?.resume()

            // Give the application its chance to commit what it finished before the partitions go.
            condition.lock()
            if !leavingGroup && !lost {
                let deadline = Date(timeIntervalSinceNow: Double(configuration.effectiveRevokeTimeout.milliseconds) / 1000)
                pollerWaitsForAcknowledgement = true
                while revokesAcknowledged < revokeOrdinal && !closeRequested {
                    if !condition.wait(until: deadline) {
                        logger.warning("revoke not acknowledged in time; giving the partitions up", metadata: ["partitions": "\(partitions)"])
                        break
                    }
                }
                pollerWaitsForAcknowledgement = false
            }
            condition.unlock()
            applyAssignment(consumer, list, cooperative: cooperative, assign: false)
        }
    }

    private func applyAssignment(
        _ consumer: OpaquePointer,
        _ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>,
        cooperative: Bool,
        assign: Bool
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

    /// Removes buffered messages of these partitions. Caller holds the lock.
    private func dropBuffered(of partitions: Set<TopicPartition>) {
        guard !partitions.isEmpty else { return }
        var kept: [KafkaConsumerEvent] = []
        kept.reserveCapacity(buffer.count - head)
        for event in buffer[head...] {
            if case .message(let message) = event, partitions.contains(message.topicPartition) { continue }
            kept.append(event)
        }
        buffer = kept
        head = 0
    }

    /// The waiting iterator, if there is something for it. Caller holds the lock and resumes the
    /// continuation after unlocking.
    private func takeWaiterIfReady() -> CheckedContinuation<Void, Never>? {
        guard head < buffer.count || finished else { return nil }
        defer { iteratorWaiter = nil }
        return iteratorWaiter
    }

    private func finish(failure: KafkaError?) {
        condition.lock()
        finished = true
        self.failure = failure
        let waiter = iteratorWaiter
        iteratorWaiter = nil
        let closers = closeWaiters
        closeWaiters.removeAll()
        condition.unlock()
        waiter?.resume()
        closers.forEach { $0.resume() }
    }
}

extension KafkaMessage {
    /// Copies a librdkafka message (key, value, headers, timestamp) into Swift values.
    /// The caller still destroys `message`.
    init(consuming message: UnsafeMutablePointer<rd_kafka_message_t>, topic: String) {
        let raw = message.pointee
        var headers: [KafkaHeader] = []
        var headerList: OpaquePointer?
        if rd_kafka_message_headers(message, &headerList) == RD_KAFKA_RESP_ERR_NO_ERROR, let headerList {
            let count = rd_kafka_header_cnt(headerList)
            headers.reserveCapacity(count)
            for index in 0..<count {
                var name: UnsafePointer<CChar>?
                var value: UnsafeRawPointer?
                var size = 0
                guard rd_kafka_header_get_all(headerList, index, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR, let name else { continue }
                headers.append(KafkaHeader(key: String(cString: name), value: copyBytes(value, size)))
            }
        }
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(message, &timestampType)
        self.init(
            topic: topic,
            partition: raw.partition,
            offset: raw.offset,
            key: copyBytes(raw.key, raw.key_len),
            value: copyBytes(raw.payload, raw.len),
            headers: headers,
            timestamp: timestampType == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? nil : timestamp
        )
    }
}

/// Copies `count` bytes into a new array; `nil` when librdkafka has no bytes (a null key or value).
@inline(__always)
func copyBytes(_ source: UnsafeRawPointer?, _ count: Int) -> [UInt8]? {
    guard let source else { return nil }
    return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
        if count > 0 { buffer.baseAddress!.initialize(from: source.assumingMemoryBound(to: UInt8.self), count: count) }
        initialized = count
    }
}

private let consumerRebalanceCallback: @convention(c) (
    OpaquePointer?, rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, UnsafeMutableRawPointer?
) -> Void = { consumer, reason, list, opaque in
    guard let consumer, let list, let core = KafkaCallbackContext.from(opaque) as? ConsumerCore else { return }
    core.rebalance(consumer, reason, list)
}

private let consumerCommitCallback: @convention(c) (
    OpaquePointer?, rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, UnsafeMutableRawPointer?
) -> Void = { _, error, list, opaque in
    guard let context = KafkaCallbackContext.from(opaque) else { return }
    if error != RD_KAFKA_RESP_ERR_NO_ERROR && error != RD_KAFKA_RESP_ERR__NO_OFFSET {
        context.logger.warning("commit failed", metadata: ["error": "\(KafkaError.from(error, operation: "commit"))"])
    } else if let list, let partitionError = list.firstError(operation: "commit") {
        context.logger.warning("commit failed", metadata: ["error": "\(partitionError)"])
    }
}
