import Kafka
import Relay
import Testing

/// What the relay asks of its Kafka clients: the consumer's assignor and static membership, the transactional id.
@Suite("the relay's Kafka client settings")
struct RelayKafkaClientsTests {
    private let kafka = KafkaConfiguration(bootstrapServers: "127.0.0.1:9092")

    @Test("the events consumer rebalances incrementally (cooperative-sticky) unless kafka.properties names an assignor, which it keeps")
    func assignor() {
        let byDefault = RelayServiceConfiguration(kafka: kafka).consumer
        #expect(byDefault.kafka.properties["partition.assignment.strategy"] == "cooperative-sticky")
        var eagerKafka = kafka
        eagerKafka.properties["partition.assignment.strategy"] = "range,roundrobin"
        let eager = RelayServiceConfiguration(kafka: eagerKafka).consumer
        #expect(eager.kafka.properties["partition.assignment.strategy"] == "range,roundrobin")
        // The producers and readers get no consumer setting they would only warn about.
        #expect(RelayServiceConfiguration(kafka: kafka).kafka.properties["partition.assignment.strategy"] == nil)
    }

    @Test("kafka.group_instance_id becomes the consumer's group.instance.id, and nothing without it")
    func staticMembership() {
        let anonymous = RelayServiceConfiguration(kafka: kafka).consumer
        #expect(anonymous.kafka.properties["group.instance.id"] == nil)
        let member = RelayServiceConfiguration(kafka: kafka, groupInstanceID: "apns-relay-1").consumer
        #expect(member.kafka.properties["group.instance.id"] == "apns-relay-1")
        #expect(RelayServiceConfiguration(kafka: kafka, groupInstanceID: "apns-relay-1").staticMemberID == "apns-relay-1")
        var viaProperties = kafka
        viaProperties.properties["group.instance.id"] = "apns-relay-2"
        #expect(RelayServiceConfiguration(kafka: viaProperties).staticMemberID == "apns-relay-2")
    }

    @Test("a static member's transactional id is its instance's, the same on any host and after any restart: the next process fences the one before")
    func transactionalID() {
        #expect(RelayKafkaClients.transactionalID(group: "push", instance: "apns-relay-1") == "apns-relay:push:apns-relay-1")
        let processID = RelayKafkaClients.transactionalID(group: "push")
        #expect(processID.hasPrefix("apns-relay:push:") && processID != "apns-relay:push:apns-relay-1")
    }
}
