public import Kafka
import RelayCore

/// Creates topics: through the admin API on a real cluster, or directly on the embedded one
/// (librdkafka's mock cluster has no CreateTopics handler).
public protocol TopicCreating: Sendable {
    func partitionCount(of topic: String) async throws -> Int?
    func create(_ topic: KafkaTopicSpecification) async throws
}

/// A real cluster, through `KafkaAdmin`.
public struct AdminTopicCreator: TopicCreating {
    public let admin: KafkaAdmin

    public init(admin: KafkaAdmin) { self.admin = admin }

    public func partitionCount(of topic: String) async throws -> Int? { try await admin.partitionCount(of: topic) }

    public func create(_ topic: KafkaTopicSpecification) async throws { try await admin.createTopics([topic]) }
}

/// The in-process mock cluster (which neither compacts nor stores topic configs).
public struct EmbeddedTopicCreator: TopicCreating {
    public let cluster: EmbeddedKafka
    public let admin: KafkaAdmin

    public init(cluster: EmbeddedKafka, admin: KafkaAdmin) {
        self.cluster = cluster
        self.admin = admin
    }

    public func partitionCount(of topic: String) async throws -> Int? { try await admin.partitionCount(of: topic) }

    public func create(_ topic: KafkaTopicSpecification) async throws {
        try cluster.createTopic(topic.name, partitions: topic.partitions, replicationFactor: max(1, topic.replicationFactor))
    }
}

/// A topic layout that cannot work, naming the configuration key to fix.
public struct TopicLayoutError: Error, Equatable, CustomStringConvertible {
    public var key: String
    public var problem: String

    public var description: String { "\(key): \(problem)" }
}

/// Checks the relay's topics at start and creates the missing ones: badge-state and devices
/// compacted, badge-state with the events topic's partition count (its partitions pair up with
/// the events partitions, so a different count is a configuration error).
public enum TopicSetup {
    /// - Returns: the events topic's partition count.
    @discardableResult
    public static func ensure(
        _ configuration: RelayServiceConfiguration, creator: some TopicCreating, defaultPartitions: Int = 6
    ) async throws -> Int {
        let compacted = ["cleanup.policy": "compact"]
        let events: Int
        if let existing = try await creator.partitionCount(of: configuration.eventsTopic) {
            events = existing
        } else {
            events = defaultPartitions
            try await creator.create(KafkaTopicSpecification(name: configuration.eventsTopic, partitions: events, replicationFactor: -1))
        }
        if let badgeState = try await creator.partitionCount(of: configuration.badgeStateTopic) {
            guard badgeState == events else {
                throw TopicLayoutError(
                    key: "kafka.topics.badge_state",
                    problem: "\(configuration.badgeStateTopic) has \(badgeState) partitions but \(configuration.eventsTopic) has \(events); they must match"
                )
            }
        } else {
            try await creator.create(KafkaTopicSpecification(name: configuration.badgeStateTopic, partitions: events, replicationFactor: -1, configs: compacted))
        }
        let others: [(String, [String: String])] = [
            (configuration.devicesTopic, compacted),
            (configuration.resultsTopic, [:]),
            (configuration.failedTokensTopic, [:]),
            (configuration.deadLetterTopic, [:]),
            (configuration.wrongEnvironmentTopic, [:]),
        ]
        for (name, configs) in others where try await creator.partitionCount(of: name) == nil {
            try await creator.create(KafkaTopicSpecification(name: name, partitions: events, replicationFactor: -1, configs: configs))
        }
        return events
    }
}
