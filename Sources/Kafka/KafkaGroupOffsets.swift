import CRdKafka
public import Logging

/// Reads a consumer group's committed offsets without joining the group (nothing is subscribed, so its members
/// see no rebalance).
public final class KafkaGroupOffsets: Sendable {
    private let handle: KafkaClientHandle

    public init(configuration: KafkaConfiguration, groupID: String, logger: Logger) throws {
        let conf = try RdKafkaConfig(
            configuration, roleDefaults: [:],
            enforced: ["group.id": groupID, "enable.auto.commit": "false", "enable.auto.offset.store": "false"]
        )
        handle = try KafkaClientHandle(kind: RD_KAFKA_CONSUMER, configuration: conf, callbacks: KafkaClientCallbacks(logger: logger))
    }

    /// The group's committed offsets for `partitions`; a partition without one is absent.
    public func committed(_ partitions: [TopicPartition], timeout: Duration = .seconds(10)) async throws -> [TopicPartition: Int64] {
        let milliseconds = timeout.milliseconds
        return try await handle.runBlocking {
            try KafkaPartitionList.committed(partitions, client: $0, milliseconds: milliseconds).compactMapValues(\.offset)
        }
    }
}
