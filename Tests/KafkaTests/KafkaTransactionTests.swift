import CRdKafka
import Foundation
import Testing
import TestSupport

@testable import Kafka

/// What the relay's fencing of stale owners rests on, on a broker that keeps transactions (noida-db writes their
/// markers and bumps producer epochs): a `read_committed` reader sees committed transactions only; a producer's
/// `initTransactions` fences the earlier producer of its transactional id, whose acknowledged records then never
/// become visible; offsets sent to a transaction move the group's committed offset only with its commit.
@Suite("Kafka transactions on noida-db", .serialized)
struct KafkaTransactionBrokerTests {
    @Test("a read_committed reader sees a committed transaction's records, never an aborted one's, and the committed ones after it")
    func committedVisibleAbortedNot() async throws {
        let broker = try NoidaBroker()
        defer { withExtendedLifetime(broker) {} }
        let partition = try await createTopic("tx.visibility", on: broker)
        let producer = try makeTransactionalProducer(broker.bootstrapServers, id: "visibility")
        try await producer.initTransactions()

        try await producer.beginTransaction()
        try await sendValues(["committed-1", "committed-2"], to: partition, with: producer)
        try await producer.commitTransaction()

        try await producer.beginTransaction()
        let aborted = try await sendValues(["aborted-1", "aborted-2", "aborted-3"], to: partition, with: producer)
        try await producer.abortTransaction()

        try await producer.beginTransaction()
        try await sendValues(["committed-3"], to: partition, with: producer)
        try await producer.commitTransaction()

        #expect(try await committedValues(of: partition, on: broker) == ["committed-1", "committed-2", "committed-3"])
        // A group member reads the same: its first three records are the committed ones, in order.
        let consumer = try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                kafka: KafkaConfiguration(bootstrapServers: broker.bootstrapServers, properties: fastGroupProperties),
                groupID: "visibility-reader", topics: [partition.topic]),
            logger: testLogger("consumer"))
        let consumed = try await collectMessages(consumer, count: 3, seconds: 30).map(\.key)
        #expect(consumed == ["committed-1", "committed-2", "committed-3"])
        await consumer.close(timeout: .seconds(10))
        // The aborted records were stored (acknowledged at offsets below the end) and are only hidden.
        let uncommitted = try await watermarks(of: partition, on: broker, isolation: "read_uncommitted")
        #expect(aborted.allSatisfy { $0.offset < uncommitted.high })
        print("noida visibility: aborted records at offsets \(aborted.map(\.offset)), partition end \(uncommitted.high) (6 records, 3 markers)")
        await producer.close()
    }

    @Test("a reader that follows a partition ending in a transaction's marker says it reached the end")
    func followReachesEndAtMarker() async throws {
        let broker = try NoidaBroker()
        defer { withExtendedLifetime(broker) {} }
        let partition = try await createTopic("tx.follow", on: broker)
        let producer = try makeTransactionalProducer(broker.bootstrapServers, id: "follow")
        try await producer.initTransactions()
        try await producer.beginTransaction()
        try await sendValues(["followed"], to: partition, with: producer)
        try await producer.commitTransaction()
        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: broker.bootstrapServers), logger: testLogger("reader"))
        let seen = Locked<(values: [String], reachedEnd: Bool)>(([], false))
        try await withThrowingTaskGroup { group in
            group.addTask {
                try await reader.follow([partition], reachedEnd: { seen.withLock { $0.reachedEnd = true } }) { message in
                    seen.withLock { $0.values.append(String(decoding: message.value ?? [], as: UTF8.self)) }
                }
            }
            #expect(await waitUntil(timeout: .seconds(20)) { seen.withLock { $0.reachedEnd } })
            group.cancelAll()
            try await group.waitForAll()
        }
        #expect(seen.withLock { $0.values } == ["followed"])
        await producer.close()
    }

    @Test("a second producer of the same transactional id fences the first: its acknowledged records and those it produces later are never visible, its commit fails as fenced")
    func newOwnerFencesOldOne() async throws {
        let broker = try NoidaBroker()
        defer { withExtendedLifetime(broker) {} }
        let partition = try await createTopic("tx.fencing", on: broker)
        let stale = try makeTransactionalProducer(broker.bootstrapServers, id: "events-0")
        try await stale.initTransactions()
        try await stale.beginTransaction()
        let acknowledged = try await sendValues(["stale-1", "stale-2", "stale-3"], to: partition, with: stale)
        #expect(acknowledged.count == 3)

        let owner = try makeTransactionalProducer(broker.bootstrapServers, id: "events-0")
        let initStart = ContinuousClock.now
        try await owner.initTransactions()
        print("noida fencing: the new owner's initTransactions took \(ContinuousClock.now - initStart)")
        // The stale producer's open transaction is over (aborted, its marker written): nothing of it is readable,
        // and nothing holds readers back (the last stable offset is the partition's end).
        #expect(try await committedValues(of: partition, on: broker) == [])
        let stable = try await watermarks(of: partition, on: broker, isolation: "read_committed")
        let written = try await watermarks(of: partition, on: broker, isolation: "read_uncommitted")
        #expect(stable.high == written.high && written.high > acknowledged.map(\.offset).max()! + 1, "stable \(stable), written \(written)")
        print("noida fencing: after the new owner's init the partition ends at \(written.high) (stable \(stable.high)) after \(acknowledged.count) acknowledged records")

        // Produced after the fence: refused, or at least never visible.
        let lateError = await kafkaError { _ = try await stale.send(KafkaRecord(topic: partition.topic, partition: partition.partition, key: Array("stale-late".utf8), value: Array("stale-late".utf8))) }
        print("noida fencing: the stale producer's later record: \(lateError.map { "\($0)" } ?? "acknowledged")")
        let commitError = await kafkaError { try await stale.commitTransaction() }
        let fenced = try #require(commitError, "the fenced producer's commit succeeded")
        print("noida fencing: the stale producer's commit: \(fenced) fenced=\(fenced.isFenced) fatal=\(fenced.isFatal)")
        #expect(fenced.isFenced && fenced.isFatal, "\(fenced)")
        await #expect(throws: KafkaError.self) { try await stale.beginTransaction() }

        try await owner.beginTransaction()
        try await sendValues(["owner-1", "owner-2"], to: partition, with: owner)
        let commitStart = ContinuousClock.now
        try await owner.commitTransaction()
        print("noida fencing: the owner's commit took \(ContinuousClock.now - commitStart)")
        #expect(try await committedValues(of: partition, on: broker) == ["owner-1", "owner-2"])
        await stale.close(timeout: .seconds(1))
        await owner.close()
    }

    @Test("offsets sent to a transaction are the group's committed offsets once it commits, and not when it aborts")
    func offsetsMoveWithCommitOnly() async throws {
        let broker = try NoidaBroker()
        defer { withExtendedLifetime(broker) {} }
        let input = try await createTopic("tx.input", on: broker)
        let output = try await createTopic("tx.output", on: broker)
        let group = "tx-relay"
        let offsets = try KafkaGroupOffsets(configuration: KafkaConfiguration(bootstrapServers: broker.bootstrapServers), groupID: group, logger: testLogger("offsets"))
        let producer = try makeTransactionalProducer(broker.bootstrapServers, id: "\(group).\(input.partition)")
        try await producer.initTransactions()
        let metadata = KafkaConsumerGroupMetadata(groupID: group)

        try await producer.beginTransaction()
        try await sendValues(["out-1"], to: output, with: producer)
        try await producer.sendOffsetsToTransaction([input: 5], groupMetadata: metadata)
        // Sent, not committed: not the group's offset yet (a broker may also refuse to answer until the
        // transaction ends; either way it is not 5).
        let pending = await outcome { try await offsets.committed([input], timeout: .seconds(2)) }
        #expect((try? pending.get())?[input] == nil, "\(pending)")
        print("noida offsets: the group's offset read while the transaction is open: \(pending)")
        try await producer.commitTransaction()
        #expect(try await offsets.committed([input])[input] == 5)

        try await producer.beginTransaction()
        try await sendValues(["out-2"], to: output, with: producer)
        try await producer.sendOffsetsToTransaction([input: 9], groupMetadata: metadata)
        try await producer.abortTransaction()
        #expect(try await offsets.committed([input])[input] == 5)
        #expect(try await committedValues(of: output, on: broker) == ["out-1"])
        await producer.close()
    }

    @Test("a group member's own metadata (member id, generation) commits its offsets in a transaction")
    func consumerGroupMetadata() async throws {
        let broker = try NoidaBroker()
        defer { withExtendedLifetime(broker) {} }
        let input = try await createTopic("tx.member-input", on: broker)
        let output = try await createTopic("tx.member-output", on: broker)
        let consumer = try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                kafka: KafkaConfiguration(bootstrapServers: broker.bootstrapServers, properties: fastGroupProperties),
                groupID: "tx-member", topics: [input.topic]),
            logger: testLogger("consumer"))
        #expect(try await KafkaFailureTests.assignment(of: consumer) == [input])
        let metadata = try #require(consumer.groupMetadata())
        #expect(metadata.groupID == "tx-member")
        let producer = try makeTransactionalProducer(broker.bootstrapServers, id: "tx-member.0")
        try await producer.initTransactions()
        try await producer.beginTransaction()
        try await sendValues(["out"], to: output, with: producer)
        try await producer.sendOffsetsToTransaction([input: 3], groupMetadata: metadata)
        try await producer.commitTransaction()
        #expect(try await consumer.committed([input])[input] == 3)
        await consumer.close(timeout: .seconds(10))
        await producer.close()
    }

    @Test("one producer's transactions back to back (begin, 100 records, send offsets, commit; 20 times): every record visible once, in order, and the group's offset the last commit's")
    func repeatedCycles() async throws {
        let broker = try NoidaBroker()
        defer { withExtendedLifetime(broker) {} }
        let output = try await createTopic("tx.cycle-output", on: broker)
        let input = try await createTopic("cycle-input", on: broker)
        let reports = try await transactionCycles(20, bootstrapServers: broker.bootstrapServers, output: output, input: input)
        #expect(reports.map(\.offset) == reports.map(\.offset).sorted())
        let expected = (0..<20).flatMap { cycle in (0..<100).map { "\(cycle)-\($0)" } }
        #expect(try await committedValues(of: output, on: broker) == expected)
        let offsets = try KafkaGroupOffsets(configuration: KafkaConfiguration(bootstrapServers: broker.bootstrapServers), groupID: "cycle", logger: testLogger("offsets"))
        #expect(try await offsets.committed([input])[input] == 2_000)
    }
}

/// Transactions against librdkafka's mock cluster, whose coordinator answers can be scripted: what the producer
/// makes of a retriable, a fencing and an abortable answer. (The mock writes no transaction markers and does not
/// fence a producer when another initialises the same id: visibility and fencing are tested on noida-db.)
@Suite("Kafka transactions on the mock cluster", .serialized)
struct KafkaTransactionMockTests {
    /// Kafka protocol request types (API keys).
    enum Request {
        static let produce: Int16 = 0
        static let addPartitionsToTxn: Int16 = 24
        static let endTxn: Int16 = 26
    }

    @Test("a coordinator still loading (COORDINATOR_LOAD_IN_PROGRESS), or not the coordinator, on EndTxn: librdkafka retries and the commit succeeds",
          arguments: [RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS, RD_KAFKA_RESP_ERR_NOT_COORDINATOR])
    func retriableEndTxn(code: rd_kafka_resp_err_t) async throws {
        let (cluster, producer, partition) = try await mockProducerInTransaction("retry")
        defer { cluster.stop() }
        try await sendValues(["retried"], to: partition, with: producer)
        try cluster.failRequests(apiKey: Request.endTxn, count: 3, code: code.rawValue)
        try await producer.commitTransaction()
        // And the next transaction goes on as usual.
        try await producer.beginTransaction()
        try await sendValues(["next"], to: partition, with: producer)
        try await producer.commitTransaction()
        await producer.close()
    }

    @Test("a commit that runs out of time while the coordinator keeps answering COORDINATOR_LOAD_IN_PROGRESS is retriable, and called again it completes")
    func commitTimeoutIsRetriable() async throws {
        let (cluster, producer, partition) = try await mockProducerInTransaction("resume")
        defer { cluster.stop() }
        try await sendValues(["resumed"], to: partition, with: producer)
        // librdkafka retries EndTxn about every 100 ms (retry.backoff.ms): 30 refusals outlast a 1 s commit.
        try cluster.failRequests(apiKey: Request.endTxn, count: 30, code: RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS.rawValue)
        let timedOut = await kafkaError { try await producer.commitTransaction(timeout: .seconds(1)) }
        let error = try #require(timedOut, "the commit finished within 1 s despite 30 refusals")
        #expect(error.isRetriable && !error.isFatal && !error.transactionRequiresAbort, "\(error)")
        try await producer.commitTransaction()
        await producer.close()
    }

    @Test("PRODUCER_FENCED or INVALID_PRODUCER_EPOCH from the coordinator or a partition leader: the producer is fenced, fatally",
          arguments: [
              FencingAnswer(request: Request.addPartitionsToTxn, code: RD_KAFKA_RESP_ERR_PRODUCER_FENCED),
              FencingAnswer(request: Request.endTxn, code: RD_KAFKA_RESP_ERR_PRODUCER_FENCED),
              FencingAnswer(request: Request.endTxn, code: RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH),
              FencingAnswer(request: Request.produce, code: RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH),
          ])
    func fencedAnswer(_ answer: FencingAnswer) async throws {
        let (cluster, producer, partition) = try await mockProducerInTransaction("fenced")
        defer { cluster.stop() }
        try cluster.failRequests(apiKey: answer.request, count: 1, code: answer.code.rawValue)
        // The record fails too when its partition or its batch was refused.
        let delivery = try await producer.enqueue(KafkaRecord(topic: partition.topic, partition: partition.partition, key: nil, value: Array("fenced".utf8)))
        let commitError = await kafkaError { try await producer.commitTransaction() }
        let error = try #require(commitError, "the commit succeeded")
        #expect(error.isFenced && error.isFatal, "\(error)")
        let report = await outcome { try await delivery.report() }
        print("mock \(answer): commit \(error); the record's report \(report)")
        await #expect(throws: KafkaError.self) { try await producer.beginTransaction() }
        await producer.close(timeout: .seconds(1))
    }

    @Test("a record the broker refuses within a transaction (INVALID_RECORD) fails the transaction, not the producer: the commit asks for an abort, which succeeds, and the work redone in new transactions commits")
    func abortableProduceError() async throws {
        let (cluster, producer, partition) = try await mockProducerInTransaction("abortable")
        defer { cluster.stop() }
        try cluster.failRequests(apiKey: Request.produce, count: 1, code: RD_KAFKA_RESP_ERR_INVALID_RECORD.rawValue)
        await #expect(throws: KafkaError.self) { _ = try await sendValues(["refused"], to: partition, with: producer) }
        let commitError = await kafkaError { try await producer.commitTransaction() }
        let error = try #require(commitError, "the commit succeeded after a refused record")
        #expect(error.transactionRequiresAbort && !error.isFatal && !error.isFenced, "\(error)")
        let offsets = await outcome { try await producer.sendOffsetsToTransaction([partition: 1], groupMetadata: KafkaConsumerGroupMetadata(groupID: "g")) }
        #expect((try? offsets.get()) == nil, "offsets sent to a failed transaction")
        try await producer.abortTransaction()

        // The caller's loop: abort and redo while a transaction asks for it. librdkafka (2.8 as 2.0.2) reuses the refused
        // record's sequence number in the next transaction, which the broker refuses as out of order; that
        // failure is abortable too, and its abort bumps the producer epoch, after which the work commits.
        var failures: [KafkaError] = []
        while failures.count < 3 {
            try await producer.beginTransaction()
            // A failed record fails the commit, which says what to do (its delivery report only why).
            let failure = await kafkaError {
                let delivery = try await producer.enqueue(KafkaRecord(topic: partition.topic, partition: partition.partition, key: nil, value: Array("accepted".utf8)))
                try await producer.commitTransaction()
                _ = try await delivery.report()
            }
            guard let failure else { break }
            failures.append(failure)
            #expect(failure.transactionRequiresAbort && !failure.isFatal, "\(failure)")
            try await producer.abortTransaction()
        }
        #expect(failures.count < 3, "\(failures)")
        print("mock abortable error: the work redone committed after \(failures.count) more aborted transaction(s): \(failures)")
        await producer.close()
    }

    @Test("transactional calls before initTransactions, or a second begin, fail without harm to the producer")
    func stateErrors() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        defer { cluster.stop() }
        try cluster.createTopic("state", partitions: 1)
        let producer = try makeTransactionalProducer(cluster.bootstrapServers, id: "state")
        await #expect(throws: KafkaError.self) { try await producer.beginTransaction() }
        try await producer.initTransactions()
        try await producer.beginTransaction()
        await #expect(throws: KafkaError.self) { try await producer.beginTransaction() }
        try await sendValues(["fine"], to: TopicPartition("state", 0), with: producer)
        try await producer.commitTransaction()
        await producer.close()
    }

    @Test("one producer's transactions back to back (begin, 100 records, send offsets, commit; 20 times): every record stored once, in order")
    func repeatedCycles() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        defer { cluster.stop() }
        try cluster.createTopic("cycle-output", partitions: 1)
        try cluster.createTopic("cycle-input", partitions: 1)
        let output = TopicPartition("cycle-output", 0)
        let reports = try await transactionCycles(20, bootstrapServers: cluster.bootstrapServers, output: output, input: TopicPartition("cycle-input", 0))
        // The mock writes no transaction markers: the records are at 0..<2000, and nothing else is.
        #expect(reports.map(\.offset) == (0..<2_000).map(Int64.init))
        #expect(try await watermarks(of: output, on: cluster.bootstrapServers, isolation: "read_committed").high == 2_000)
    }
}

/// A mock cluster with a one-partition topic `name`, and a producer (transactional id `name`) in a transaction.
func mockProducerInTransaction(_ name: String) async throws -> (EmbeddedKafka, KafkaTransactionalProducer, TopicPartition) {
    let cluster = try EmbeddedKafka(brokers: 1)
    try cluster.createTopic(name, partitions: 1)
    let producer = try makeTransactionalProducer(cluster.bootstrapServers, id: name)
    try await producer.initTransactions()
    try await producer.beginTransaction()
    return (cluster, producer, TopicPartition(name, 0))
}

/// A refusal scripted into the mock cluster: request type and error.
struct FencingAnswer: Sendable, CustomStringConvertible {
    var request: Int16
    var code: rd_kafka_resp_err_t
    var description: String { "\(String(cString: rd_kafka_err2name(code))) on request \(request)" }
}

/// The `KafkaError` `body` threw; `nil` when it returned (another error fails the test).
func kafkaError(_ body: () async throws -> Void) async -> KafkaError? {
    do {
        try await body()
        return nil
    } catch let error as KafkaError {
        return error
    } catch {
        Issue.record("not a KafkaError: \(error)")
        return nil
    }
}

/// What `body` returned or threw.
func outcome<T>(_ body: () async throws -> T) async -> Result<T, any Error> {
    do {
        return .success(try await body())
    } catch {
        return .failure(error)
    }
}

func makeTransactionalProducer(_ bootstrapServers: String, id: String) throws -> KafkaTransactionalProducer {
    var logger = testLogger("producer-\(id)")
    // librdkafka's debug contexts (`eos,msg`, say) and its debug logs, to follow a transaction's states.
    let debug = ProcessInfo.processInfo.environment["KAFKA_TEST_DEBUG"]
    if debug != nil { logger.logLevel = .debug }
    return try KafkaTransactionalProducer(
        configuration: KafkaConfiguration(bootstrapServers: bootstrapServers, properties: debug.map { ["debug": $0] } ?? [:]),
        logger: logger, transactionalID: id, transactionTimeout: .seconds(30))
}

/// Creates a one-partition topic through the admin API (noida-db does not create topics on first use).
func createTopic(_ name: String, on broker: NoidaBroker) async throws -> TopicPartition {
    let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: broker.bootstrapServers), logger: testLogger("admin"))
    try await admin.createTopics([KafkaTopicSpecification(name: name, partitions: 1)])
    return TopicPartition(name, 0)
}

/// Produces one record per value (key and value the same) in the producer's current transaction and waits
/// for each one's acknowledgement; returns their reports.
@discardableResult
func sendValues(_ values: [String], to partition: TopicPartition, with producer: KafkaTransactionalProducer) async throws -> [KafkaDeliveryReport] {
    var pending: [KafkaPendingDelivery] = []
    for value in values {
        pending.append(try await producer.enqueue(KafkaRecord(topic: partition.topic, partition: partition.partition, key: Array(value.utf8), value: Array(value.utf8))))
    }
    var reports: [KafkaDeliveryReport] = []
    for delivery in pending { reports.append(try await delivery.report()) }
    return reports
}

/// The partition's watermarks as a reader of that isolation level sees them: under `read_committed` the end is
/// the last stable offset (the first offset of a transaction still open).
func watermarks(of partition: TopicPartition, on broker: NoidaBroker, isolation: String) async throws -> KafkaWatermarks {
    try await watermarks(of: partition, on: broker.bootstrapServers, isolation: isolation)
}

func watermarks(of partition: TopicPartition, on bootstrapServers: String, isolation: String) async throws -> KafkaWatermarks {
    let configuration = KafkaConfiguration(bootstrapServers: bootstrapServers, properties: ["isolation.level": isolation])
    return try await KafkaAdmin(configuration: configuration, logger: testLogger("admin")).watermarks(of: partition)
}

/// The values a `read_committed` ``KafkaPartitionReader`` reads of `partition`, in order.
func committedValues(of partition: TopicPartition, on broker: NoidaBroker) async throws -> [String] {
    try await committedValues(of: partition, on: broker.bootstrapServers)
}

/// The values a `read_committed` ``KafkaPartitionReader`` reads of `partition` through `bootstrapServers`, in order.
func committedValues(of partition: TopicPartition, on bootstrapServers: String) async throws -> [String] {
    let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: bootstrapServers), logger: testLogger("reader"))
    let values = Locked<[String]>([])
    _ = try await reader.readToEnd([partition], timeout: .seconds(20)) { message in
        values.withLock { $0.append(String(decoding: message.value ?? [], as: UTF8.self)) }
    }
    return values.withLock { $0 }
}

/// `count` transactions of one producer (transactional id `cycle`, group `cycle`), each 100 records to `output` and
/// the input offset after them; the delivery reports, in the order produced.
func transactionCycles(_ count: Int, bootstrapServers: String, output: TopicPartition, input: TopicPartition) async throws -> [KafkaDeliveryReport] {
    let producer = try makeTransactionalProducer(bootstrapServers, id: "cycle")
    try await producer.initTransactions()
    let metadata = KafkaConsumerGroupMetadata(groupID: "cycle")
    var reports: [KafkaDeliveryReport] = []
    for cycle in 0..<count {
        try await producer.beginTransaction()
        var pending: [KafkaPendingDelivery] = []
        for index in 0..<100 {
            pending.append(try await producer.enqueue(KafkaRecord(topic: output.topic, partition: output.partition, key: nil, value: Array("\(cycle)-\(index)".utf8))))
        }
        try await producer.sendOffsetsToTransaction([input: Int64(cycle + 1) * 100], groupMetadata: metadata)
        try await producer.commitTransaction()
        for delivery in pending { reports.append(try await delivery.report()) }
    }
    await producer.close()
    return reports
}
