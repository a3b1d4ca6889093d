import CRdKafka

/// A consumer group as a transaction names it when it commits the group's offsets
/// (``KafkaTransactionalProducer/sendOffsetsToTransaction(_:groupMetadata:timeout:)``).
///
/// Taken from a member (``KafkaConsumer/groupMetadata()``) it carries the member's id and generation, so a
/// broker that checks them refuses the offsets of a member that lost its partitions in a rebalance. Made from the
/// group id alone (``init(groupID:)``) it carries neither, and only the producer epoch fences a stale writer.
public final class KafkaConsumerGroupMetadata: Sendable {
    /// The group's id.
    public let groupID: String
    // Owned: freed in `deinit`. Never changed after creation and only read by librdkafka (which copies it
    // into each request), so sharing it across threads is safe.
    nonisolated(unsafe) let pointer: OpaquePointer

    /// Metadata naming only the group: no member id, no generation.
    public init(groupID: String) {
        self.groupID = groupID
        pointer = rd_kafka_consumer_group_metadata_new(groupID)
    }

    /// Takes ownership of a metadata object librdkafka returned.
    init(groupID: String, taking pointer: OpaquePointer) {
        self.groupID = groupID
        self.pointer = pointer
    }

    deinit {
        rd_kafka_consumer_group_metadata_destroy(pointer)
    }
}
