import CRdKafka
import Foundation
import Synchronization
import Testing

@testable import Kafka

/// What the relay's hand-overs and failure handling rely on from the consumer and the producer: commits
/// answered without a waiting thread, a close bounded by a timeout, a lost assignment said so, and a
/// producer's fatal error told apart from a transient one.
@Suite("Kafka commits, lost assignments and fatal errors", .serialized)
struct KafkaFailureTests {
    /// Waits for the first assignment, consuming nothing else.
    static func assignment(of consumer: KafkaConsumer) async throws -> [TopicPartition] {
        for try await event in consumer.events {
            if case .partitionsAssigned(let partitions, _) = event, !partitions.isEmpty { return partitions }
        }
        return []
    }

    @Test("a commit sent without waiting gets the coordinator's answer through its completion: accepted (read back), or refused (mid-rebalance)")
    func commitWithCompletion() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        defer { cluster.stop() }
        try cluster.createTopic("commits", partitions: 1)
        let consumer = try makeConsumer(cluster, group: "commits", topics: ["commits"])
        let partition = try #require(try await Self.assignment(of: consumer).first)

        let accepted = await withCheckedContinuation { continuation in
            consumer.commit([partition: 7], completion: { continuation.resume(returning: $0) })
        }
        #expect((try? accepted.get()) != nil, "\(accepted)")
        #expect(try await consumer.committed([partition])[partition] == 7)

        // The coordinator refuses the next commit (REBALANCE_IN_PROGRESS): the completion says so.
        try cluster.failRequests(apiKey: 8, count: 1, code: 27)
        let refused = await withCheckedContinuation { continuation in
            consumer.commit([partition: 9], completion: { continuation.resume(returning: $0) })
        }
        guard case .failure(let error) = refused else {
            Issue.record("the refused commit succeeded")
            return
        }
        #expect(error.name == "REBALANCE_IN_PROGRESS", "\(error)")
        #expect(await consumer.close(timeout: .seconds(30)))
    }

    @Test("a member that loses its session (the coordinator unreachable past session.timeout.ms) gets a revoke that says the partitions were lost")
    func lostAssignment() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        defer { cluster.stop() }
        try cluster.createTopic("lost", partitions: 2)
        let consumer = try makeConsumer(cluster, group: "lost", topics: ["lost"])
        var iterator = consumer.events.makeAsyncIterator()
        var assigned: [TopicPartition] = []
        while assigned.isEmpty, let event = try await iterator.next() {
            if case .partitionsAssigned(let partitions, _) = event { assigned = partitions }
        }
        try cluster.setBrokerDown(1)
        var revoke: KafkaRevoke?
        while revoke == nil, let event = try await iterator.next() {
            if case .partitionsRevoked(let revoked) = event { revoke = revoked }
        }
        try cluster.setBrokerUp(1)
        #expect(revoke?.partitions == assigned.sorted())
        #expect(revoke?.lost == true)
        await consumer.close(timeout: .seconds(10))
    }

    @Test("a read to the end waits out a moment with every broker connection down (a reader whose connections are not up yet) instead of failing")
    func readToEndWaitsForBrokers() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        defer { cluster.stop() }
        try cluster.createTopic("down", partitions: 1)
        let producer = try makeProducer(cluster)
        for value in ["a", "b", "c"] { _ = try await producer.send(topic: "down", key: nil, value: Array(value.utf8)) }
        await producer.close(timeout: .seconds(1))
        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger("reader"))
        try cluster.setBrokerDown(1)
        async let read = reader.readToEnd([TopicPartition("down", 0)], timeout: .seconds(30)) { _ in }
        try await Task.sleep(for: .seconds(2))
        try cluster.setBrokerUp(1)
        #expect(try await read == 3)
    }

    @Test("after a producer's fatal error (an idempotent producer's lost sequence) what it is given fails as fatal, so the relay stops retrying it")
    func fatalProducer() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        defer { cluster.stop() }
        try cluster.createTopic("fatal", partitions: 1)
        let producer = try makeProducer(cluster)
        _ = try await producer.send(topic: "fatal", key: nil, value: Array("before".utf8))
        // librdkafka's own hook for raising the fatal error an out-of-order sequence would.
        _ = rd_kafka_test_fatal_error(producer.handleForTesting.pointer, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, "test: broker lost acknowledged writes")
        do {
            _ = try await producer.send(topic: "fatal", key: nil, value: Array("after".utf8))
            Issue.record("a record was produced after the fatal error")
        } catch let error as KafkaError {
            #expect(error.isFatal, "\(error)")
            #expect(!KafkaError(code: RD_KAFKA_RESP_ERR__MSG_TIMED_OUT.rawValue, name: "_MSG_TIMED_OUT", message: "", operation: "").isFatal)
        }
        await producer.close(timeout: .seconds(1))
    }
}
