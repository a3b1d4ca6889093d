import CRdKafka
public import Logging
import Synchronization

/// Reads partitions from their beginning up to their end as it was when the read started,
/// outside any consumer group (nothing is committed). For restoring state from a changelog.
public final class KafkaPartitionReader: Sendable {
    private let handle: KafkaClientHandle

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
                // The end of what is readable now: past a partition's last record when its last offsets hold
                // no record (a transaction's marker, an aborted transaction's records). librdkafka 2.0.2 says so
                // once per end offset and client: a reader that reads a partition again to the same end relies
                // on a record there, so a read has a reader of its own where that matters.
                "enable.partition.eof": "true",
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
    /// long as it moves); a cancelled call throws `CancellationError` within a second.
    ///
    /// `from` and `through` narrow a partition's read to the offsets from `from` (its first retained one when
    /// earlier) through `through` (inclusive; its end when later). Offsets without a record in that range
    /// (compacted away, transaction markers) are passed over.
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
                        if error != RD_KAFKA_RESP_ERR__TIMED_OUT || clock.now >= deadline { throw KafkaError.from(error, operation: "read \(partition) to its end") }
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
                var read = 0
                deadline = clock.now.advanced(by: timeout)
                try Self.consume(consumer, Array(ends.keys), from: starts, while: { !remaining.isEmpty }) { _ in
                    if cancelled.isSet { throw CancellationError() }
                    // Only records read toward the end count as progress: a batch of anything else
                    // (records past the end, events) must not keep a stuck read alive forever.
                    guard clock.now < deadline else {
                        throw KafkaError.client("_TIMED_OUT", "nothing read from \(remaining.keys.sorted()) for \(timeout)", operation: "read to end")
                    }
                } handle: { message, converted in
                    guard let converted else {
                        let error = message.pointee.err
                        // Nothing more is readable now, at or past the end: the partition is read (its last
                        // offsets held no record to see).
                        if error == RD_KAFKA_RESP_ERR__PARTITION_EOF {
                            let partition = message.topicPartition
                            if let end = remaining[partition], message.pointee.offset >= end { remaining[partition] = nil }
                            return
                        }
                        throw KafkaError.from(error, operation: "read to end")
                    }
                    let partition = converted.topicPartition
                    guard let end = remaining[partition] else { return }
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
                let beginning = Dictionary(uniqueKeysWithValues: partitions.map { ($0, Int64(RD_KAFKA_OFFSET_BEGINNING)) })
                try Self.consume(consumer, partitions, from: beginning, while: { !cancelled.isSet }) { _ in } handle: { message, converted in
                    guard let converted else {
                        // At or past the end (its last offsets may hold no record to see).
                        let partition = message.topicPartition
                        if message.pointee.err == RD_KAFKA_RESP_ERR__PARTITION_EOF, let end = remaining[partition], message.pointee.offset >= end {
                            remaining[partition] = nil
                            if remaining.isEmpty { reachedEnd() }
                            return
                        }
                        // librdkafka's own (negative) errors are transient: it reconnects.
                        if message.pointee.err.rawValue < 0 { return }
                        throw KafkaError.from(message.pointee.err, operation: "follow")
                    }
                    let partition = converted.topicPartition
                    body(converted)
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
    /// Assigns `partitions` from `offsets`, then hands every message (errors included) to
    /// `handle` (with its Swift value when it is a record), a batch at a time, while `shouldContinue`
    /// holds; `afterBatch` gets each batch's size (0 after a 100 ms wait that brought nothing). Every
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
            try afterBatch(max(0, count))
            guard count > 0 else { continue }
            try KafkaMessage.convertAndDestroy(messages, count: count, handle)
        }
    }
}

extension UnsafeMutablePointer where Pointee == rd_kafka_message_t {
    /// The partition of a message or of a partition's event (end of partition, fetch error).
    fileprivate var topicPartition: TopicPartition {
        TopicPartition(pointee.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? "", pointee.partition)
    }
}

/// Set once when a task is cancelled, read by a loop on a blocking queue.
private final class CancellationFlag: Sendable {
    private let flag = Mutex(false)
    var isSet: Bool { flag.withLock { $0 } }
    func set() { flag.withLock { $0 = true } }
}
