import CRdKafka
#if canImport(Glibc)
import Glibc
#endif

/// An owned `rd_kafka_topic_partition_list_t`: made from Swift values, freed when it goes.
///
/// Noncopyable, so exactly one owner destroys the list; librdkafka borrows it only inside
/// ``withPointer(_:)``, during which the list is alive.
struct KafkaPartitionList: ~Copyable {
    private let pointer: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>

    /// A list of `partitions`, each with its offset and commit metadata when given.
    init(_ partitions: [TopicPartition], offsets: [TopicPartition: Int64] = [:], metadata: [TopicPartition: String] = [:]) {
        pointer = rd_kafka_topic_partition_list_new(Int32(partitions.count))!
        for partition in partitions {
            let element = rd_kafka_topic_partition_list_add(pointer, partition.topic, partition.partition)!
            if let offset = offsets[partition] { element.pointee.offset = offset }
            if let text = metadata[partition] {
                // The list owns it: rd_kafka_topic_partition_list_destroy frees it with free().
                element.pointee.metadata = UnsafeMutableRawPointer(strdup(text))
                element.pointee.metadata_size = text.utf8.count
            }
        }
    }

    deinit {
        rd_kafka_topic_partition_list_destroy(pointer)
    }

    /// Lends the C list to a librdkafka call; it must not be kept past `body`.
    func withPointer<Result, Failure: Error>(
        _ body: (UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        try body(pointer)
    }

    /// The partitions with the offsets librdkafka filled in (`nil` where it has none) and the
    /// metadata stored with them.
    var offsets: [TopicPartition: KafkaCommittedOffset] { pointer.offsets }

    /// The first per-partition error in the list, if any.
    func firstError(operation: String) -> KafkaError? { pointer.firstError(operation: operation) }
}

/// Reading a list librdkafka owns (a rebalance's, a commit result's) or one lent by ``KafkaPartitionList``.
extension UnsafeMutablePointer where Pointee == rd_kafka_topic_partition_list_t {
    private var elements: UnsafeMutableBufferPointer<rd_kafka_topic_partition_t> {
        UnsafeMutableBufferPointer(start: pointee.elems, count: Int(pointee.cnt))
    }

    var topicPartitions: [TopicPartition] {
        elements.map { TopicPartition(String(cString: $0.topic), $0.partition) }
    }

    /// Per partition, its offset (`nil` when negative: none) and the metadata string stored with it.
    var offsets: [TopicPartition: KafkaCommittedOffset] {
        var result: [TopicPartition: KafkaCommittedOffset] = [:]
        for element in elements {
            var metadata: String?
            if let bytes = element.metadata, element.metadata_size > 0 {
                metadata = String(decoding: UnsafeRawBufferPointer(start: bytes, count: element.metadata_size), as: UTF8.self)
            }
            result[TopicPartition(String(cString: element.topic), element.partition)] =
                KafkaCommittedOffset(offset: element.offset >= 0 ? element.offset : nil, metadata: metadata)
        }
        return result
    }

    /// The first per-partition error in the list, if any.
    func firstError(operation: String) -> KafkaError? {
        guard let element = elements.first(where: { $0.err != RD_KAFKA_RESP_ERR_NO_ERROR }) else { return nil }
        return KafkaError.from(element.err, operation: "\(operation) \(String(cString: element.topic))[\(element.partition)]")
    }
}

extension KafkaPartitionList {
    /// The committed offsets of `partitions` for the group of `client` (a consumer handle), asked of the coordinator.
    static func committed(_ partitions: [TopicPartition], client: OpaquePointer, milliseconds: Int32) throws -> [TopicPartition: KafkaCommittedOffset] {
        let list = KafkaPartitionList(partitions)
        let error = list.withPointer { rd_kafka_committed(client, $0, milliseconds) }
        if error != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(error, operation: "read committed offsets") }
        return list.offsets
    }
}
