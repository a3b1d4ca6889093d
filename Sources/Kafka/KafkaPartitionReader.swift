import CRdKafka
public import Logging

/// Reads partitions from their beginning up to their end as it was when the read started,
/// outside any consumer group (nothing is committed). For restoring state from a changelog.
public final class KafkaPartitionReader: Sendable {
    private let handle: KafkaClientHandle

    public init(configuration: KafkaConfiguration, logger: Logger) throws {
        let conf = try RdKafkaConfig(
            configuration,
            roleDefaults: [:],
            enforced: [
                "group.id": "apns-relay.partition-reader",
                "enable.auto.commit": "false",
                "enable.auto.offset.store": "false",
                "enable.partition.eof": "false",
                "auto.offset.reset": "earliest",
            ]
        )
        handle = try KafkaClientHandle(kind: RD_KAFKA_CONSUMER, configuration: conf, context: KafkaCallbackContext(logger: logger), logger: logger)
    }

    /// Reads every message of `partitions` present when the call starts and hands each to
    /// `body`, in offset order per partition. Runs off Swift's cooperative pool.
    ///
    /// - Returns: how many messages were read.
    public func readToEnd(
        _ partitions: [TopicPartition],
        timeout: Duration = .seconds(60),
        body: @escaping @Sendable (KafkaMessage) -> Void
    ) async throws -> Int {
        guard !partitions.isEmpty else { return 0 }
        let milliseconds = timeout.milliseconds
        return try await handle.runBlocking { consumer in
            // The end to read up to, per partition; empty partitions need no reading.
            var ends: [TopicPartition: Int64] = [:]
            var starts: [TopicPartition: Int64] = [:]
            for partition in partitions {
                var low: Int64 = -1
                var high: Int64 = -1
                let error = rd_kafka_query_watermark_offsets(consumer, partition.topic, partition.partition, &low, &high, milliseconds)
                if error != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(error, operation: "read \(partition) to its end") }
                if high > low {
                    ends[partition] = high
                    starts[partition] = low
                }
            }
            guard !ends.isEmpty else { return 0 }
            let list = Array(ends.keys).makeRdKafkaList(offsets: starts)
            defer { rd_kafka_topic_partition_list_destroy(list) }
            var error = rd_kafka_assign(consumer, list)
            if error != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(error, operation: "assign") }
            defer { _ = rd_kafka_assign(consumer, nil) }

            let queue = rd_kafka_queue_get_consumer(consumer)
            defer { rd_kafka_queue_destroy(queue) }
            let capacity = 1024
            let messages = UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>.allocate(capacity: capacity)
            defer { messages.deallocate() }
            var remaining = ends
            var read = 0
            let clock = ContinuousClock()
            let deadline = clock.now.advanced(by: timeout)
            while !remaining.isEmpty {
                guard clock.now < deadline else {
                    throw KafkaError.client("_TIMED_OUT", "did not reach the end of \(remaining.keys.sorted()) in time", operation: "read to end")
                }
                let count = rd_kafka_consume_batch_queue(queue, 100, messages, capacity)
                guard count > 0 else { continue }
                for index in 0..<count {
                    guard let message = messages[index] else { continue }
                    defer { rd_kafka_message_destroy(message) }
                    error = message.pointee.err
                    if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                        if error == RD_KAFKA_RESP_ERR__PARTITION_EOF { continue }
                        throw KafkaError.from(error, operation: "read to end")
                    }
                    let topic = message.pointee.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
                    let partition = TopicPartition(topic, message.pointee.partition)
                    guard let end = remaining[partition], message.pointee.offset < end else { continue }
                    body(KafkaMessage(consuming: message, topic: topic))
                    read += 1
                    if message.pointee.offset + 1 >= end { remaining[partition] = nil }
                }
            }
            return read
        }
    }
}
