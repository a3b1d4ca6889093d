import CRdKafka

/// librdkafka's own partitioners, as a producer configured with `partitioner` runs them on a keyed record:
/// for checking where a producer's records land (tests, operations tooling).
public enum KafkaPartitioner {
    /// `murmur2_random` on a key: Kafka's Java client's default (murmur2 of the key, positive, modulo the count).
    public static func murmur2(key: [UInt8], partitionCount: Int32) -> Int32 {
        key.withUnsafeBytes { rd_kafka_msg_partitioner_murmur2(nil, $0.baseAddress, $0.count, partitionCount, nil, nil) }
    }

    /// `consistent_random` on a key: librdkafka's default (CRC32 of the key, modulo the count).
    public static func crc32(key: [UInt8], partitionCount: Int32) -> Int32 {
        key.withUnsafeBytes { rd_kafka_msg_partitioner_consistent(nil, $0.baseAddress, $0.count, partitionCount, nil, nil) }
    }
}
