import CRdKafka
#if canImport(Glibc)
import Glibc
#endif
public import Logging
import Synchronization

/// Reads partitions from their beginning up to their end as it was when the read started,
/// outside any consumer group (nothing is committed). For restoring state from a changelog.
public final class KafkaPartitionReader: Sendable {
    private let handle: KafkaClientHandle
    /// The partitions this reader has read before: librdkafka may still hold an earlier read's position for them.
    private let readBefore = Mutex<Set<TopicPartition>>([])

    public init(configuration: KafkaConfiguration, logger: Logger) throws {
        let conf = try RdKafkaConfig(
            configuration,
            // A reader hands records on as fast as it gets them: a small prefetch (librdkafka's default
            // is 64 MB per client) keeps a restore of many partitions at once from holding them all twice.
            roleDefaults: ["queued.max.messages.kbytes": "4096"],
            enforced: [
                "group.id": "apns-relay.partition-reader",
                "enable.auto.commit": "false",
                "enable.auto.offset.store": "false",
                "enable.partition.eof": "false",
                "auto.offset.reset": "earliest",
                // librdkafka's default, stated so it cannot be turned off: a restore reads only committed
                // transactions, never the aborted writes of an owner fenced by a newer one. A partition's end
                // is then its last stable offset, short of a transaction still open.
                "isolation.level": "read_committed",
            ]
        )
        handle = try KafkaClientHandle(kind: RD_KAFKA_CONSUMER, configuration: conf, callbacks: KafkaClientCallbacks(logger: logger))
    }

    /// Reads every message of `partitions` present when the call starts and hands each to
    /// `body`, in offset order per partition: those of committed transactions (and of no transaction), up to
    /// the first transaction still open at the start (the end a `read_committed` reader is given). Runs off Swift's
    /// cooperative pool. Fails when nothing arrives for `timeout` (a large partition may take longer in all, as
    /// long as it moves); a cancelled call throws `CancellationError` within a second. Connections down (all
    /// brokers, for a moment) are waited out within `timeout`.
    ///
    /// `from` and `through` narrow a partition's read to the offsets from `from` (its first retained one when
    /// earlier) through `through` (inclusive; its end when later). Offsets without a record in that range
    /// (compacted away, transaction markers, aborted records) are passed over (a reader reading a partition again
    /// needs a record in its range to tell: else it waits for `timeout` and fails).
    ///
    /// - Returns: how many messages were read.
    public func readToEnd(
        _ partitions: [TopicPartition],
        from: [TopicPartition: Int64] = [:],
        through: [TopicPartition: Int64] = [:],
        timeout: Duration = .seconds(60),
        body: @escaping @Sendable (KafkaMessage) -> Void
    ) async throws -> Int {
        guard !partitions.isEmpty else { return 0 }
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await handle.runBlocking { consumer in
                let clock = ContinuousClock()
                var deadline = clock.now.advanced(by: timeout)
                // The end to read up to, per partition; empty partitions need no reading. Asked in
                // short waits, so that a cancelled read stops within a second.
                var ends: [TopicPartition: Int64] = [:]
                var starts: [TopicPartition: Int64] = [:]
                for partition in partitions {
                    var low: Int64 = -1
                    var high: Int64 = -1
                    while true {
                        let error = rd_kafka_query_watermark_offsets(consumer, partition.topic, partition.partition, &low, &high, 1_000)
                        if error == RD_KAFKA_RESP_ERR_NO_ERROR { break }
                        if cancelled.isSet { throw CancellationError() }
                        guard Self.isTransient(error), clock.now < deadline else { throw KafkaError.from(error, operation: "read \(partition) to its end") }
                        // Connections down answer at once: wait a little before asking again.
                        if error != RD_KAFKA_RESP_ERR__TIMED_OUT { usleep(100_000) }
                    }
                    let start = max(low, from[partition] ?? low)
                    let end = min(high, through[partition].map { $0 &+ 1 } ?? high)
                    if end > start {
                        ends[partition] = end
                        starts[partition] = start
                    }
                }
                guard !ends.isEmpty else { return 0 }
                var remaining = ends
                var ownPositions = self.firstRead(of: Array(ends.keys))
                var read = 0
                deadline = clock.now.advanced(by: timeout)
                try Self.consume(consumer, Array(ends.keys), from: starts, while: { !remaining.isEmpty }) { _ in
                    if cancelled.isSet { throw CancellationError() }
                    Self.removeReadToEnd(&remaining, ownPositions: ownPositions, consumer: consumer)
                    if remaining.isEmpty { return }
                    // Only records read toward the end count as progress: a batch of anything else
                    // (records past the end, events) must not keep a stuck read alive forever.
                    guard clock.now < deadline else {
                        throw KafkaError.client("_TIMED_OUT", "nothing read from \(remaining.keys.sorted()) for \(timeout)", operation: "read to end")
                    }
                } handle: { message, converted in
                    guard let converted else {
                        let error = message.pointee.err
                        // A connection lost meanwhile is librdkafka's to restore; the deadline bounds the wait.
                        if error == RD_KAFKA_RESP_ERR__PARTITION_EOF || Self.isTransient(error) { return }
                        throw KafkaError.from(error, operation: "read to end")
                    }
                    let partition = converted.topicPartition
                    guard let end = remaining[partition] else { return }
                    ownPositions.insert(partition)
                    if converted.offset < end {
                        body(converted)
                        read += 1
                        deadline = clock.now.advanced(by: timeout)
                    }
                    // A record at or past the last offset ends the partition's read, also when that offset has none.
                    if converted.offset + 1 >= end { remaining[partition] = nil }
                }
                return read
            }
        } onCancel: {
            cancelled.set()
        }
    }

    /// Waits until no transaction that was open on `partitions` when the call started is still open: until each
    /// partition's last stable offset (the end a `read_committed` reader is given) reaches the end its last write left
    /// (its high watermark, open transactions included). A read after it sees every transaction that was under way
    /// resolved, committed or aborted: what a new owner must know before it trusts the changelog it reads (a
    /// previous owner's last transaction may still commit). Polls every 50 ms.
    ///
    /// - Throws: `KafkaError` (`_TIMED_OUT`) naming the partitions still held after `timeout`; a broker's error.
    public func waitForOpenTransactions(_ partitions: [TopicPartition], configuration: KafkaConfiguration, logger: Logger,
                                        timeout: Duration) async throws {
        guard !partitions.isEmpty else { return }
        var uncommitted = configuration
        uncommitted.properties["isolation.level"] = "read_uncommitted"
        let writer = try KafkaAdmin(configuration: uncommitted, logger: logger)
        var ends: [TopicPartition: Int64] = [:]
        for partition in partitions { ends[partition] = try await writer.watermarks(of: partition).high }
        let deadline = ContinuousClock.now + timeout
        while true {
            var held: [TopicPartition] = []
            for (partition, end) in ends.sorted(by: { $0.key < $1.key }) {
                let stable = try await handle.runBlocking { consumer in
                    var low: Int64 = -1
                    var high: Int64 = -1
                    let error = rd_kafka_query_watermark_offsets(consumer, partition.topic, partition.partition, &low, &high, 5_000)
                    if error != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(error, operation: "query the last stable offset of \(partition)") }
                    return high
                }
                if stable < end { held.append(partition) } else { ends[partition] = nil }
            }
            if held.isEmpty { return }
            guard ContinuousClock.now < deadline else {
                throw KafkaError.client("_TIMED_OUT", "a transaction still open on \(held) after \(timeout)", operation: "wait for open transactions")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Reads `partitions` from their beginning and goes on following them until the calling task
    /// is cancelled, outside any consumer group (no group is joined, nothing is committed). Calls
    /// `reachedEnd` once every partition reached the end it had when the call started (at once when
    /// all are empty). Transient client errors (a broker down) are waited out; a broker's error
    /// (an unknown topic, no authorization) is thrown. Needs a reader of its own: it holds the
    /// reader's blocking queue while it runs.
    public func follow(
        _ partitions: [TopicPartition],
        reachedEnd: @escaping @Sendable () -> Void,
        body: @escaping @Sendable (KafkaMessage) -> Void
    ) async throws {
        let cancelled = CancellationFlag()
        try await withTaskCancellationHandler {
            try await handle.runBlocking { consumer in
                var remaining: [TopicPartition: Int64] = [:]
                for partition in partitions {
                    var low: Int64 = -1
                    var high: Int64 = -1
                    let error = rd_kafka_query_watermark_offsets(consumer, partition.topic, partition.partition, &low, &high, 10_000)
                    if error != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(error, operation: "follow \(partition)") }
                    if high > low { remaining[partition] = high }
                }
                if remaining.isEmpty { reachedEnd() }
                var ownPositions = self.firstRead(of: partitions)
                let beginning = Dictionary(uniqueKeysWithValues: partitions.map { ($0, Int64(RD_KAFKA_OFFSET_BEGINNING)) })
                try Self.consume(consumer, partitions, from: beginning, while: { !cancelled.isSet }) { _ in
                    guard !remaining.isEmpty else { return }
                    Self.removeReadToEnd(&remaining, ownPositions: ownPositions, consumer: consumer)
                    if remaining.isEmpty { reachedEnd() }
                } handle: { message, converted in
                    guard let converted else {
                        // librdkafka's own (negative) errors are transient: it reconnects.
                        if message.pointee.err.rawValue < 0 { return }
                        throw KafkaError.from(message.pointee.err, operation: "follow")
                    }
                    let partition = converted.topicPartition
                    body(converted)
                    ownPositions.insert(partition)
                    if let end = remaining[partition], converted.offset + 1 >= end {
                        remaining[partition] = nil
                        if remaining.isEmpty { reachedEnd() }
                    }
                }
            }
        } onCancel: {
            cancelled.set()
        }
    }
}

extension KafkaPartitionReader {
    /// librdkafka's local errors that a wait cures: no answer yet, or connections (all of them) down for now, as
    /// for a reader whose connections are not up yet or a broker restarting. Not an unknown topic or partition.
    static func isTransient(_ error: rd_kafka_resp_err_t) -> Bool {
        error == RD_KAFKA_RESP_ERR__TIMED_OUT || error == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN || error == RD_KAFKA_RESP_ERR__TRANSPORT
    }

    /// Assigns `partitions` from `offsets`, then hands every message (errors included) to
    /// `handle` (with its Swift value when it is a record), a batch at a time, while `shouldContinue`
    /// holds; then `afterBatch` gets the batch's size (0 after a 100 ms wait that brought nothing). Every
    /// message is destroyed after `handle`, also when it throws.
    fileprivate static func consume(
        _ consumer: OpaquePointer, _ partitions: [TopicPartition], from offsets: [TopicPartition: Int64],
        while shouldContinue: () -> Bool, afterBatch: (Int) throws -> Void,
        handle: (UnsafeMutablePointer<rd_kafka_message_t>, KafkaMessage?) throws -> Void
    ) throws {
        let list = KafkaPartitionList(partitions, offsets: offsets)
        let error = list.withPointer { rd_kafka_assign(consumer, $0) }
        if error != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(error, operation: "assign") }
        defer { _ = rd_kafka_assign(consumer, nil) }
        let queue = rd_kafka_queue_get_consumer(consumer)
        defer { rd_kafka_queue_destroy(queue) }
        let capacity = 1024
        let messages = UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>.allocate(capacity: capacity)
        defer { messages.deallocate() }
        while shouldContinue() {
            let count = consumeAvailable(queue, timeoutMilliseconds: 100, into: messages, limit: capacity)
            if count > 0 { try KafkaMessage.convertAndDestroy(messages, count: count, handle) }
            try afterBatch(max(0, count))
        }
    }

    /// Removes from `remaining` (partition to end offset) the partitions read to their end by position: past
    /// their last offsets even where those hold no record to hand out (a transaction's marker, an aborted
    /// transaction's records), which librdkafka passes over but counts in the position (also in a batch that
    /// brought no record). Only the partitions whose position is this read's (`ownPositions`) are asked.
    fileprivate static func removeReadToEnd(_ remaining: inout [TopicPartition: Int64], ownPositions: Set<TopicPartition>, consumer: OpaquePointer) {
        let asked = remaining.keys.filter(ownPositions.contains)
        guard !asked.isEmpty else { return }
        let list = KafkaPartitionList(asked)
        guard list.withPointer({ rd_kafka_position(consumer, $0) }) == RD_KAFKA_RESP_ERR_NO_ERROR else { return }
        for (partition, position) in list.offsets {
            if let end = remaining[partition], let offset = position.offset, offset >= end { remaining[partition] = nil }
        }
    }
}

extension KafkaPartitionReader {
    /// Of `partitions`, those this reader never read before, whose librdkafka position can only be this read's;
    /// the others' become this read's once a record of them is read. Marks them all read.
    fileprivate func firstRead(of partitions: [TopicPartition]) -> Set<TopicPartition> {
        readBefore.withLock { readBefore in
            defer { readBefore.formUnion(partitions) }
            return Set(partitions).subtracting(readBefore)
        }
    }
}

/// Set once when a task is cancelled, read by a loop on a blocking queue.
final class CancellationFlag: Sendable {
    private let flag = Mutex(false)
    var isSet: Bool { flag.withLock { $0 } }
    func set() { flag.withLock { $0 = true } }
}
