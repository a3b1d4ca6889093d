import CRdKafka
import Foundation
import Logging
import TestSupport
import Testing

@testable import Kafka
@testable import Relay

/// A producer that failed for good (librdkafka's fatal error: an idempotent producer whose broker lost
/// acknowledged writes) ends the relay at once, with exit 1 for a restart, and a bounded log.
@Suite("A fatal producer error", .serialized)
struct FatalProducerTests {
    @Test("the results producer turns fatal mid-run: the relay gives up at once naming it (not after retrying the dead producer until the failure bound), and logs a bounded number of lines")
    func fatalResultsProducer() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        defer { cluster.stop() }
        for (topic, partitions) in [("push.events", 3), ("push.badge-state", 3), ("push.devices", 1), ("push.results", 1), ("push.failed-tokens", 1), ("push.dlq", 1)] {
            try cluster.createTopic(topic, partitions: partitions)
        }
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)
        let log = CapturedLog()
        let configuration = RelayServiceConfiguration(kafka: kafka, engine: .init(defaultTopic: "com.example.app", failureTimeout: .seconds(60)))
        let results = try KafkaProducer(configuration: kafka, logger: quietLogger("results"))
        var clients = try RelayKafkaClients.kafka(configuration, logger: quietLogger("relay"))
        clients.producer = results
        let service = RelayService(configuration: configuration, sender: RecordingSender(), clients: clients, logger: log.logger(label: "relay"))
        let producer = try KafkaProducer(configuration: kafka, logger: quietLogger("test-producer"))
        func produce(_ range: Range<Int>) async throws {
            for user in range {
                _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8),
                                                           value: eventJSON(id: "u\(user)-e1", user: "u-\(user)", seq: 1, tokens: [token(user + 1)])))
            }
            try await producer.flush()
        }
        try await produce(0..<20)
        let started = ContinuousClock.now
        var failure: (any Error)?
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await service.run() }
                #expect(await waitUntil(timeout: .seconds(60)) { service.status.snapshot.counters.eventsApplied == 20 && service.status.snapshot.pendingRecords == 0 })
                _ = rd_kafka_test_fatal_error(results.handleForTesting.pointer, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, "test: the broker lost acknowledged writes")
                try await produce(20..<2_000)
                try await group.waitForAll()
            }
        } catch {
            failure = error
        }
        await producer.close()
        let reason = "\(failure.map { "\($0)" } ?? "no failure")"
        #expect(reason.contains("failed for good"), "\(reason)")
        #expect(ContinuousClock.now - started < configuration.engine.failureTimeout, "gave up before the failure bound, not at it")
        let publishLines = log.all.filter { $0.contains("publishing failed") || $0.contains("publishing kept failing") }
        #expect(publishLines.count <= 3, "\(publishLines.count) lines about failed publishes: \(publishLines.prefix(3))")
        #expect(service.status.snapshot.failure != nil, "/healthz says unhealthy")
    }

    @Test("repeated publish failures are logged at a bounded rate: the first at once, then one summary per destination every 10 s with the count")
    func repeatedFailureLog() {
        var failures = RepeatedFailureLog()
        let start = ContinuousClock.now
        var lines = 0
        for step in 0..<6_000 {
            let now = start + .milliseconds(step * 5)  // 30 s of a failure every 5 ms
            if failures.failed(.records, .other("timed out"), at: now) != nil { lines += 1 }
            if step % 20 == 0, failures.summary(at: now) != nil { lines += 1 }
        }
        #expect(lines >= 3 && lines <= 4, "\(lines) lines for 6,000 failures over 30 s")
        #expect(failures.failed(.changelog, .other("x"), at: start) != nil, "another destination's first failure is logged at once")
    }
}
