import Foundation
import APNs
import Kafka
import Logging
import Synchronization
import Testing
@testable import Relay

@Suite("Topic setup")
struct TopicSetupTests {
    @Test("missing topics are created, badge-state with the events' partition count; a mismatch names the key")
    func ensure() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)
        let admin = try KafkaAdmin(configuration: kafka, logger: quietLogger("admin"))
        let creator = EmbeddedTopicCreator(cluster: cluster, admin: admin)
        try cluster.createTopic("push.events", partitions: 4)
        let configuration = RelayServiceConfiguration(kafka: kafka, engine: .init(defaultTopic: "com.example.app"))
        #expect(try await TopicSetup.ensure(configuration, creator: creator) == 4)
        for topic in ["push.badge-state", "push.devices", "push.results", "push.failed-tokens", "push.dlq"] {
            #expect(try await admin.partitionCount(of: topic) == 4, "\(topic)")
        }
        // Running again changes nothing.
        #expect(try await TopicSetup.ensure(configuration, creator: creator) == 4)

        var mismatched = configuration
        mismatched.badgeStateTopic = "other.badge-state"
        try cluster.createTopic("other.badge-state", partitions: 2)
        let error = await #expect(throws: TopicLayoutError.self) { try await TopicSetup.ensure(mismatched, creator: creator) }
        #expect(error?.key == "kafka.topics.badge_state")
        #expect(error?.problem.contains("2 partitions") == true)
    }
}
