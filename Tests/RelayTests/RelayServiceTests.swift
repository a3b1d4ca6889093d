import Foundation
import APNs
import Kafka
import Logging
import Synchronization
import Testing

@testable import Relay

/// Records, per token, the badges sent, in call order; answers every send as delivered.
final class RecordingSender: NotificationSending {
    private let sent = Mutex<[String: [Int64?]]>([:])

    func submit(_ sends: [RelaySend]) {
        for send in sends {
            sent.withLock { $0[send.notification.token, default: []].append(send.notification.badge) }
            send.complete(.delivered())
        }
    }

    var byToken: [String: [Int64?]] { sent.withLock { $0 } }
}

func quietLogger(_ label: String) -> Logger {
    var logger = Logger(label: label)
    logger.logLevel = ProcessInfo.processInfo.environment["RELAY_TEST_LOG"] != nil ? .info : .warning
    return logger
}

/// Reads every record of `topic` currently in it.
func readAll(_ cluster: EmbeddedKafka, topic: String, partitions: Int) async throws -> [KafkaMessage] {
    let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: quietLogger("reader"))
    let collected = LockedBox<[KafkaMessage]>([])
    _ = try await reader.readToEnd((0..<partitions).map { TopicPartition(topic, Int32($0)) }) { message in
        collected.withLock { $0.append(message) }
    }
    return collected.withLock { $0 }
}

@Suite("Relay service on the embedded cluster", .serialized)
struct RelayServiceTests {
    @Test("events through Kafka: badges in order per device, every (event, device) has a result, dead letters, commits")
    func endToEnd() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        for (topic, partitions) in [("push.events", 3), ("push.badge-state", 3), ("push.devices", 1), ("push.results", 1), ("push.failed-tokens", 1), ("push.dlq", 1)] {
            try cluster.createTopic(topic, partitions: partitions)
        }
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers, properties: ["session.timeout.ms": "6000", "heartbeat.interval.ms": "500"])
        let producer = try KafkaProducer(configuration: kafka, logger: quietLogger("test-producer"))
        let users = 20
        let eventsPerUser = 10
        for user in 0..<users {
            for device in 0..<2 {
                let deviceToken = token(user * 2 + device + 1)
                try await producer.send(topic: "push.devices", key: Array(deviceToken.utf8),
                                        value: Array("{\"user\":\"u-\(user)\",\"topic\":\"com.example.app\",\"environment\":\"production\",\"registered_at\":1}".utf8))
            }
        }
        var generator = SeededGenerator(seed: 7)
        var expectedMessages = 0
        for user in 0..<users {
            // Shuffled inside small windows: out of order, but every seq arrives.
            var seqs = Array(1...eventsPerUser)
            for start in stride(from: 0, to: seqs.count, by: 3) {
                let end = min(seqs.count, start + 3)
                seqs[start..<end].shuffle(using: &generator)
            }
            for seq in seqs {
                _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8),
                                                           value: eventJSON(id: "u\(user)-e\(seq)", user: "u-\(user)", seq: seq)))
                expectedMessages += 1
            }
        }
        _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("broken".utf8), value: Array("{\"id\":".utf8)))
        try await producer.flush()

        let sender = RecordingSender()
        let service = RelayService(
            configuration: RelayServiceConfiguration(kafka: kafka, engine: .init(reorderWindow: .seconds(2), defaultTopic: "com.example.app"), commitInterval: .milliseconds(200)),
            sender: sender, logger: quietLogger("relay")
        )
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await service.run() }
            // Wait until every (event, device) has a result and the malformed one is dead-lettered.
            let deadline = ContinuousClock.now.advanced(by: .seconds(90))
            while ContinuousClock.now < deadline {
                let counters = service.status.snapshot.counters
                if ProcessInfo.processInfo.environment["RELAY_TEST_TRACE"] != nil {
                    print("trace: applied \(counters.eventsApplied) invalid \(counters.eventsInvalid) pending \(service.status.snapshot.pendingRecords) devices \(service.status.snapshot.devicesLoaded) sent \(counters.notificationsByStatus)")
                }
                if counters.eventsApplied == expectedMessages && counters.eventsInvalid == 1 && service.status.snapshot.pendingRecords == 0 { break }
                try await Task.sleep(for: .milliseconds(200))
            }
            try await Task.sleep(for: .milliseconds(500))  // one more commit interval
            service.stop()
            try await group.waitForAll()
        }

        // Per device: badges strictly in seq order, ending at eventsPerUser.
        for user in 0..<users {
            for device in 0..<2 {
                let badges = sender.byToken[token(user * 2 + device + 1), default: []].compactMap { $0 }
                #expect(badges == badges.sorted(), "device \(device) of u-\(user): \(badges)")
                #expect(badges.last == Int64(eventsPerUser), "device \(device) of u-\(user)")
            }
        }
        let results = try await readAll(cluster, topic: "push.results", partitions: 1)
        let resultKeys = Set(results.compactMap { record -> String? in
            guard let value = record.value, let text = String(bytes: value, encoding: .utf8) else { return nil }
            return text
        })
        #expect(results.count >= users * eventsPerUser * 2 + 1, "one result per (event, device) plus the invalid one")
        #expect(resultKeys.contains { $0.contains("\"status\":\"invalid\"") })
        let deadLetters = try await readAll(cluster, topic: "push.dlq", partitions: 1)
        #expect(deadLetters.count == 1)
        #expect(deadLetters.first?.value.map(Array.init) == Array("{\"id\":".utf8))
        #expect(deadLetters.first?.header("x-source-topic")?.value == Array("push.events".utf8))
        #expect(deadLetters.first?.header("x-error") != nil)

        // Everything consumed was committed.
        let check = try KafkaConsumer(configuration: KafkaConsumerConfiguration(kafka: kafka, groupID: "apns-relay", topics: ["push.events"]), logger: quietLogger("check"))
        let committed = try await check.committed((0..<3).map { TopicPartition("push.events", Int32($0)) })
        let admin = try KafkaAdmin(configuration: kafka, logger: quietLogger("admin"))
        for partition in 0..<3 {
            let marks = try await admin.watermarks(of: TopicPartition("push.events", Int32(partition)))
            #expect(committed[TopicPartition("push.events", Int32(partition))] ?? nil == marks.high, "partition \(partition) committed to its end")
        }
        await check.close()
        await producer.close()
    }
}
