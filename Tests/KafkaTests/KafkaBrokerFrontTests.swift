import CRdKafka
import Foundation
@testable import Kafka
import KafkaBrokerFront
import Testing
import TestSupport

/// The front in front of noida-db, with librdkafka's own clients: what it adds (session expiry, the generation check
/// of transactional offset commits) and what it leaves alone (everything else reaches the broker and back).
@Suite("KafkaBrokerFront in front of noida-db", .serialized)
struct KafkaBrokerFrontTests {
    /// A group member of `group` through `bootstrap` that consumes `topic` in a task of its own: records its
    /// assignments, acknowledges every revoke.
    final class Member: Sendable {
        let consumer: KafkaConsumer
        let assigned = Locked<[TopicPartition]>([])
        let task: Task<Void, any Error>

        init(bootstrap: String, group: String, topic: String) throws {
            consumer = try KafkaConsumer(
                configuration: KafkaConsumerConfiguration(
                    kafka: KafkaConfiguration(bootstrapServers: bootstrap, properties: fastGroupProperties), groupID: group, topics: [topic]),
                logger: testLogger("member-\(group)"))
            task = Task { [consumer, assigned] in
                for try await event in consumer.events {
                    switch event {
                    case .partitionsAssigned(let partitions, _): assigned.withLock { $0 = partitions }
                    case .partitionsRevoked(let revoke):
                        assigned.withLock { $0.removeAll { revoke.partitions.contains($0) } }
                        revoke.acknowledge()
                    case .message, .partitionsRewound: break
                    }
                }
            }
        }

        func waitForAssignment(_ count: Int, seconds: Int = 60) async -> Bool {
            await waitUntil(timeout: .seconds(seconds)) { self.assigned.withLock { $0.count } == count }
        }

        func close() async {
            _ = await consumer.close(timeout: .seconds(10))
            task.cancel()
        }
    }

    /// A topic of `partitions` partitions on the broker.
    static func topic(_ name: String, partitions: Int, on bootstrap: String) async throws {
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: bootstrap), logger: testLogger("admin"))
        try await admin.createTopics([KafkaTopicSpecification(name: name, partitions: partitions)])
    }

    @Test("a member that vanishes without leaving is taken out after its session timeout, so the next member gets every partition")
    func sessionExpiry() async throws {
        let broker = try NoidaBroker()
        let front = try await KafkaBrokerFront(upstreams: broker.bootstrapServers)
        defer { withExtendedLifetime(broker) {} }
        try await Self.topic("front.expiry", partitions: 4, on: front.bootstrapServers)

        // A member in librdkafka's own terms, destroyed without its consumer close: no LeaveGroup, as a killed process.
        var errorText = [CChar](repeating: 0, count: 256)
        let configuration = rd_kafka_conf_new()
        for (key, value) in ["bootstrap.servers": front.bootstrapServers, "group.id": "expiry", "session.timeout.ms": "6000",
                             "heartbeat.interval.ms": "500"] {
            #expect(rd_kafka_conf_set(configuration, key, value, &errorText, errorText.count) == RD_KAFKA_CONF_OK)
        }
        let vanishing = try #require(rd_kafka_new(RD_KAFKA_CONSUMER, configuration, &errorText, errorText.count))
        rd_kafka_poll_set_consumer(vanishing)
        let topics = rd_kafka_topic_partition_list_new(1)
        rd_kafka_topic_partition_list_add(topics, "front.expiry", RD_KAFKA_PARTITION_UA)
        #expect(rd_kafka_subscribe(vanishing, topics) == RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_topic_partition_list_destroy(topics)
        var assignedCount: Int32 = 0
        let joinedBy = ContinuousClock.now + .seconds(30)
        while assignedCount == 0 && ContinuousClock.now < joinedBy {
            if let message = rd_kafka_consumer_poll(vanishing, 100) { rd_kafka_message_destroy(message) }
            var assignment: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
            if rd_kafka_assignment(vanishing, &assignment) == RD_KAFKA_RESP_ERR_NO_ERROR, let assignment {
                assignedCount = assignment.pointee.cnt
                rd_kafka_topic_partition_list_destroy(assignment)
            }
        }
        #expect(assignedCount == 4, "the first member holds every partition")
        rd_kafka_destroy_flags(vanishing, Int32(RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE))
        let vanishedAt = ContinuousClock.now

        let next = try Member(bootstrap: front.bootstrapServers, group: "expiry", topic: "front.expiry")
        #expect(await next.waitForAssignment(4), "the next member gets every partition once the first expired")
        let waited = ContinuousClock.now - vanishedAt
        #expect(waited >= .seconds(6), "not before the session timeout: \(waited)")
        #expect(front.events.contains { if case .expired(group: "expiry", _) = $0 { true } else { false } }, "\(front.events)")
        await next.close()
        await front.close()
    }

    @Test("offsets sent to a transaction with a member's current metadata commit; with the metadata of a generation the group moved on from, ILLEGAL_GENERATION: the transaction must abort")
    func staleGenerationRefused() async throws {
        let broker = try NoidaBroker()
        let front = try await KafkaBrokerFront(upstreams: broker.bootstrapServers)
        defer { withExtendedLifetime(broker) {} }
        try await Self.topic("front.input", partitions: 2, on: front.bootstrapServers)
        try await Self.topic("front.output", partitions: 1, on: front.bootstrapServers)
        let output = TopicPartition("front.output", 0)
        let input = TopicPartition("front.input", 0)

        let first = try Member(bootstrap: front.bootstrapServers, group: "fenced", topic: "front.input")
        #expect(await first.waitForAssignment(2))
        let firstGeneration = try #require(first.consumer.groupMetadata())
        let producer = try makeTransactionalProducer(front.bootstrapServers, id: "front-fencing")
        try await producer.initTransactions()
        try await producer.beginTransaction()
        try await sendValues(["current"], to: output, with: producer)
        try await producer.sendOffsetsToTransaction([input: 5], groupMetadata: firstGeneration)
        try await producer.commitTransaction()
        #expect(try await first.consumer.committed([input])[input] == 5, "committed with the transaction")

        // A second member joins: the group moves to its next generation, and the first member's metadata is stale.
        let second = try Member(bootstrap: front.bootstrapServers, group: "fenced", topic: "front.input")
        #expect(await second.waitForAssignment(1))
        #expect(await first.waitForAssignment(1))
        try await producer.beginTransaction()
        try await sendValues(["stale"], to: output, with: producer)
        let refused = await kafkaError { try await producer.sendOffsetsToTransaction([input: 9], groupMetadata: firstGeneration) }
        #expect(refused?.transactionRequiresAbort == true, "\(refused.map { "\($0)" } ?? "accepted")")
        #expect(refused.map { "\($0)" }?.contains("ILLEGAL_GENERATION") == true, "\(refused.map { "\($0)" } ?? "accepted")")
        try await producer.abortTransaction()
        #expect(front.events.contains { if case .refused(group: "fenced", _, _, errorCode: 22) = $0 { true } else { false } }, "\(front.events)")
        // noida-db alone takes the same stale metadata: the check is the front's.
        let direct = try makeTransactionalProducer(broker.bootstrapServers, id: "front-fencing-direct")
        try await direct.initTransactions()
        try await direct.beginTransaction()
        try await direct.sendOffsetsToTransaction([input: 5], groupMetadata: firstGeneration)
        try await direct.abortTransaction()
        await direct.close()

        // With the current generation's metadata the next transaction commits.
        try await producer.beginTransaction()
        try await sendValues(["current-again"], to: output, with: producer)
        try await producer.sendOffsetsToTransaction([input: 9], groupMetadata: try #require(first.consumer.groupMetadata()))
        try await producer.commitTransaction()
        #expect(try await first.consumer.committed([input])[input] == 9)
        #expect(try await committedValues(of: output, on: front.bootstrapServers) == ["current", "current-again"])
        await producer.close()
        await second.close()
        await first.close()
        await front.close()
    }

    @Test("a transaction whose producer went silent is aborted once its transaction.timeout.ms passed: read_committed readers go on past it")
    func transactionTimeout() async throws {
        let broker = try NoidaBroker()
        let front = try await KafkaBrokerFront(upstreams: broker.bootstrapServers)
        defer { withExtendedLifetime(broker) {} }
        try await Self.topic("front.timeout", partitions: 1, on: front.bootstrapServers)
        let partition = TopicPartition("front.timeout", 0)
        let silent = try KafkaTransactionalProducer(configuration: KafkaConfiguration(bootstrapServers: front.bootstrapServers),
                                                    logger: testLogger("silent"), transactionalID: "front-silent", transactionTimeout: .seconds(2))
        try await silent.initTransactions()
        try await silent.beginTransaction()
        try await sendValues(["left-open"], to: partition, with: silent)
        let openedAt = ContinuousClock.now
        let plain = try KafkaProducer(configuration: KafkaConfiguration(bootstrapServers: front.bootstrapServers), logger: testLogger("plain"))
        _ = try await plain.send(KafkaRecord(topic: partition.topic, partition: 0, key: nil, value: Array("after".utf8)))
        #expect(try await watermarks(of: partition, on: front.bootstrapServers, isolation: "read_committed").high == 0, "held by the open transaction")
        var released = false
        let deadline = ContinuousClock.now + .seconds(20)
        while !released && ContinuousClock.now < deadline {
            released = ((try? await watermarks(of: partition, on: front.bootstrapServers, isolation: "read_committed"))?.high ?? 0) > 0
            if !released { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(released, "the front aborted it")
        #expect(ContinuousClock.now - openedAt >= .seconds(2), "not before its timeout")
        #expect(try await committedValues(of: partition, on: front.bootstrapServers) == ["after"])
        #expect(front.events.contains(.transactionTimedOut(transactionalID: "front-silent")), "\(front.events)")
        await plain.close()
        await silent.close(timeout: .zero)
        await front.close()
    }

    @Test("noida-db answers an empty Fetch at once, so an idle consumer asks again at once; holding empty answers for their MaxWaitMs, as Kafka does, cuts the requests a reader sends and still hands a record on as it comes")
    func emptyFetchesHeld() async throws {
        let broker = try NoidaBroker()
        let plain = try await KafkaBrokerFront(upstreams: broker.bootstrapServers)
        let holding = try await KafkaBrokerFront(upstreams: broker.bootstrapServers, holdingEmptyFetches: true)
        try await Self.topic("idle", partitions: 1, on: broker.bootstrapServers)
        let partition = TopicPartition("idle", 0)
        let received = Locked<[String: Int]>([:])
        var readers: [Task<Void, any Error>] = []
        for (name, front) in [("plain", plain), ("holding", holding)] {
            let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: front.bootstrapServers), logger: testLogger(name))
            readers.append(Task {
                try await reader.follow([partition], reachedEnd: {}) { _ in received.withLock { $0[name, default: 0] += 1 } }
            })
        }
        // Both readers idle on the empty partition for the same while.
        try await Task.sleep(for: .seconds(2))
        let (idlePlain, idleHolding) = (plain.fetchesSent, holding.fetchesSent)
        #expect(idleHolding > 0 && idleHolding * 5 < idlePlain, "fetches sent while idle: plain \(idlePlain), holding \(idleHolding)")

        let producer = try KafkaProducer(configuration: KafkaConfiguration(bootstrapServers: broker.bootstrapServers), logger: testLogger("producer"))
        _ = try await producer.enqueue(KafkaRecord(topic: "idle", partition: 0, key: nil, value: Array("one".utf8)))
        try await producer.flush()
        await producer.close()
        #expect(await waitUntil(timeout: .seconds(30)) { received.withLock { $0["holding"] == 1 && $0["plain"] == 1 } },
                "records read: \(received.withLock { $0 })")
        for reader in readers { reader.cancel() }
        await plain.close()
        await holding.close()
    }
}
