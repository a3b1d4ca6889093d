import CRdKafka
import Logging
import Testing

@testable import Kafka

@Suite("A client's librdkafka configuration: every client's defaults, its role's, the user's, the enforced")
struct RdKafkaConfigTests {
    @Test("every client disables Nagle's algorithm by default; a role's default, then the user's property, then an enforced setting win in turn")
    func layering() throws {
        let plain = try RdKafkaConfig(KafkaConfiguration(bootstrapServers: "127.0.0.1:9"), roleDefaults: [:], enforced: [:])
        defer { plain.destroy() }
        #expect(plain.value(of: "socket.nagle.disable") == "true")

        let userSaysNo = try RdKafkaConfig(KafkaConfiguration(bootstrapServers: "127.0.0.1:9", properties: ["socket.nagle.disable": "false"]),
                                           roleDefaults: [:], enforced: [:])
        defer { userSaysNo.destroy() }
        #expect(userSaysNo.value(of: "socket.nagle.disable") == "false")

        let layered = try RdKafkaConfig(KafkaConfiguration(bootstrapServers: "127.0.0.1:9", properties: ["linger.ms": "7", "acks": "1"]),
                                        roleDefaults: ["linger.ms": "50", "batch.num.messages": "100"], enforced: ["acks": "all"])
        defer { layered.destroy() }
        #expect(layered.value(of: "batch.num.messages") == "100")
        #expect(layered.value(of: "linger.ms") == "7")
        #expect(layered.value(of: "acks") == "-1")
        #expect(layered.value(of: "no.such.property") == nil)
    }

    @Test("a transactional producer cuts a longer message.timeout.ms in the properties to its transaction timeout (librdkafka refuses a delivery that outlasts its transaction)")
    func transactionalMessageTimeout() async throws {
        let producer = try KafkaTransactionalProducer(
            configuration: KafkaConfiguration(bootstrapServers: "127.0.0.1:9", properties: ["message.timeout.ms": "600000"]),
            logger: Logger(label: "rdkafka-config-tests"), transactionalID: "config-test", transactionTimeout: .seconds(10))
        let conf = rd_kafka_conf(producer.handleForTesting.pointer)
        var buffer = [CChar](repeating: 0, count: 32)
        var size = buffer.count
        #expect(rd_kafka_conf_get(conf, "message.timeout.ms", &buffer, &size) == RD_KAFKA_CONF_OK)
        #expect(String(cStringBuffer: buffer) == "10000")
        await producer.close(timeout: .zero)
    }
}
