import APNs
import Kafka
import Synchronization
import Testing

@testable import Relay

@Suite("The outbox: records on their way to their producers, and what each one's report finishes")
struct RecordOutboxTests {
    static let eventsTopic = "push.events"
    static let p0 = TopicPartition(eventsTopic, 0)
    static let p1 = TopicPartition(eventsTopic, 1)

    /// Every record handed to a producer, across producers, in the order handed.
    final class Produced: Sendable {
        struct Entry: Equatable, CustomStringConvertible {
            var producer: String
            var key: String
            var tag: UInt64
            var description: String { "\(producer):\(key)#\(tag)" }
        }

        private let entries = Mutex<[Entry]>([])
        private let begun = Mutex<[String]>([])

        func append(_ entry: Entry) { entries.withLock { $0.append(entry) } }
        func began(_ producer: String) { begun.withLock { $0.append(producer) } }
        var all: [Entry] { entries.withLock { $0 } }
        /// `producer:key` per record, in order.
        var records: [String] { all.map { "\($0.producer):\($0.key)" } }
        func tag(of key: String) -> UInt64? { all.last { $0.key == key }?.tag }
        var begins: [String] { begun.withLock { $0 } }
    }

    /// A producer that notes each record it takes, and refuses those whose key `refusing` names, with that error.
    struct NotingProducer: RelayRecordProducer {
        let name: String
        let produced: Produced
        var refusing: [String: any Error] = [:]

        func produce(_ record: KafkaRecord, tag: UInt64) async throws {
            let key = String(decoding: record.key ?? [], as: UTF8.self)
            if let error = refusing[key] { throw error }
            produced.append(.init(producer: name, key: key, tag: tag))
        }

        var deliveries: any AsyncSequence<[KafkaTaggedDeliveryReport], Never> { AsyncStream { $0.finish() } }
        func flush(timeout: Duration) async throws {}
        func close(timeout: Duration) async {}
    }

    /// The relay's transactional producer: notes its records and each transaction begun.
    struct NotingTransactionalProducer: RelayTransactionalProducer {
        let name: String
        let produced: Produced
        var refusing: [String: any Error] = [:]
        var beginError: KafkaError?

        func produce(_ record: KafkaRecord, tag: UInt64) async throws {
            let key = String(decoding: record.key ?? [], as: UTF8.self)
            if let error = refusing[key] { throw error }
            produced.append(.init(producer: name, key: key, tag: tag))
        }

        func beginTransaction() async throws {
            if let beginError { throw beginError }
            produced.began(name)
        }

        func flush(timeout: Duration) async throws {}
        func sendOffsetsToTransaction(_ offsets: [TopicPartition: Int64], groupMetadata: KafkaConsumerGroupMetadata, timeout: Duration?) async throws {}
        func commitTransaction(timeout: Duration?) async throws {}
        func abortTransaction(timeout: Duration?) async throws {}
        var deliveries: any AsyncSequence<[KafkaTaggedDeliveryReport], Never> { AsyncStream { $0.finish() } }
        func close(timeout: Duration) async {}
    }

    /// The clients the outbox does not use.
    struct UnusedConsumer: RelayEventConsumer {
        func forEachBatch(maxCount: Int, _ handle: @Sendable ([KafkaConsumerEvent]) async -> Void) async throws {}
        func pause(_ partitions: [TopicPartition]) {}
        func resume(_ partitions: [TopicPartition]) {}
        func commit(_ offsets: [TopicPartition: Int64], completion: @escaping @Sendable (Result<Void, KafkaError>) -> Void) {}
        func lag() -> [TopicPartition: Int64] { [:] }
        func rewind(_ partitions: [TopicPartition]) async throws {}
        func transactionGroupMetadata() -> KafkaConsumerGroupMetadata? { nil }
        func close(timeout: Duration) async -> Bool { true }
    }

    struct UnusedReaders: BadgeStateReading, DeviceRegistryFeed {
        func readToEnd(_ partitions: [TopicPartition], body: @escaping @Sendable (KafkaMessage) -> Void) async throws -> Int { 0 }
        func follow(reachedEnd: @escaping @Sendable () -> Void, body: @escaping @Sendable (KafkaMessage) -> Void) async throws {}
    }

    static func clients(_ produced: Produced, refusing: [String: any Error] = [:]) -> RelayKafkaClients {
        RelayKafkaClients(consumer: UnusedConsumer(), producer: NotingProducer(name: "results", produced: produced, refusing: refusing),
                          changelogProducer: NotingProducer(name: "changelog", produced: produced),
                          forwardProducer: NotingProducer(name: "forwards", produced: produced),
                          changelog: UnusedReaders(), devices: UnusedReaders())
    }

    // Effects, each named by its record's key.

    static func message(_ key: String) -> KafkaMessage {
        KafkaMessage(topic: eventsTopic, partition: 0, offset: 0, key: Array(key.utf8), value: Array("{}".utf8))
    }
    static func deadLetter(of partition: TopicPartition, offset: Int64 = 1) -> RelayEffect {
        .publishDeadLetter(message("x"), error: "bad", for: RecordReference(partition, offset))
    }
    static func failedToken(_ token: String, source: TopicPartition?) -> RelayEffect {
        .publishFailedToken(FailedTokenRecord(token: token, user: nil, topic: nil, environment: nil, reason: "Unregistered", since: 0, eventID: nil),
                            source: source)
    }
    static func wrongEnvironment(_ token: String, source: TopicPartition) -> RelayEffect {
        .publishWrongEnvironment(WrongEnvironmentRecord(token: token, user: nil, topic: nil, environment: .sandbox, wrongEnvironment: .production,
                                                        source: .event, eventID: "e", at: 0), source: source)
    }
    static func changelog(token: UInt64, partition: Int32 = 0) -> RelayEffect {
        .appendChangelog(user: "u", record: BadgeStateRecord(badge: 1, seq: 1, updatedAt: 0), partition: partition, token: token)
    }
    static func record(_ key: String) -> KafkaRecord {
        KafkaRecord(topic: "any", key: Array(key.utf8), value: [])
    }

    /// What an effect is, for comparing (effects are not Equatable).
    static func label(_ effect: RelayEffect) -> String {
        switch effect {
        case .publishDeadLetter(_, _, let source): "dead letter of \(source)"
        case .publishDeadLetterReference(let reference): "dead letter reference of \(reference.source)"
        case .publishFailedToken(let record, _): "failed token \(record.token)"
        case .publishWrongEnvironment(let record, _): "wrong environment \(record.token)"
        case .appendChangelog(_, _, _, let token): "changelog \(token)"
        case .writeProgress(_, let partition, _, _): "progress \(partition)"
        case .writeLayout(_, let partition, _): "layout \(partition)"
        case .forwardEvent(_, let user, _, _): "forward \(user)"
        default: "another effect"
        }
    }

    static func label(_ delivery: RelayService.Delivery) -> String {
        switch delivery {
        case .published(let reference, let device): "published \(reference) \(device ?? "-")"
        case .changelogged(let token): "changelogged \(token)"
        case .publishSucceeded(let destination): "succeeded \(destination)"
        case .progressStored(let handOver): "progress stored \(handOver.map { "\($0)" } ?? "-")"
        case .layoutStored(let partition, let generation): "layout stored \(partition) \(generation)"
        }
    }

    @Test("records go out in the order queued, each through its producer: badge state through the changelog's, forwards through their own, the rest through the results'")
    func producersAndOrder() async {
        let produced = Produced()
        var outbox = RecordOutbox()
        let reference = RecordReference(Self.p0, 3)
        outbox.queue(Self.record("dead-letter"), for: Self.deadLetter(of: Self.p0), onSuccess: .published(reference, device: nil))
        outbox.queue(Self.record("badge"), for: Self.changelog(token: 7), onSuccess: .changelogged(7))
        outbox.queue(Self.record("forward"), for: .forwardEvent(Self.message("f"), user: "u", home: 1, for: reference),
                     onSuccess: .published(reference, device: nil))
        outbox.queue(Self.record("failed-token"), for: Self.failedToken("t", source: nil), onSuccess: .publishSucceeded(.failedTokens))
        outbox.queue(Self.record("marker"), for: .writeProgress(ProgressMarker(through: 2, open: []), partition: 0, at: 0, handOver: nil),
                     onSuccess: .progressStored(handOver: nil))
        outbox.queue(Self.record("layout"), for: .writeLayout(PartitionLayout(partitionCount: 2), partition: Self.p0, generation: 1),
                     onSuccess: .layoutStored(Self.p0, generation: 1))
        outbox.queue(Self.record("wrong-environment"), for: Self.wrongEnvironment("w", source: Self.p0),
                     onSuccess: .publishSucceeded(.wrongEnvironment))
        outbox.queue(Self.record("reference"),
                     for: .publishDeadLetterReference(DeadLetterReference(source: reference, key: nil, size: 2_000_000, error: "big")),
                     onSuccess: .published(reference, device: nil))
        var transactions: RelayTransactions?
        var failed: [String] = []
        await outbox.produceQueued(via: Self.clients(produced), transactions: &transactions, producer: nil, eventsTopic: Self.eventsTopic) { effect, _ in
            failed.append(Self.label(effect))
        }
        #expect(failed.isEmpty)
        #expect(produced.records == ["results:dead-letter", "changelog:badge", "forwards:forward", "results:failed-token", "changelog:marker",
                                     "changelog:layout", "results:wrong-environment", "results:reference"])
        #expect(Set(produced.all.map(\.tag)).count == 8, "each record in flight has a tag of its own")

        // Produced once: the queue is empty for the next batch.
        await outbox.produceQueued(via: Self.clients(produced), transactions: &transactions, producer: nil, eventsTopic: Self.eventsTopic) { _, _ in }
        #expect(produced.all.count == 8)
    }

    @Test("a report finishes its record once, with its effect and what its delivery tells the engine; a tag repeated or never given finishes nothing")
    func reportsFinishOnce() async throws {
        let produced = Produced()
        var outbox = RecordOutbox()
        let reference = RecordReference(Self.p1, 12)
        outbox.queue(Self.record("a"), for: Self.deadLetter(of: Self.p1, offset: 12), onSuccess: .published(reference, device: "d"))
        outbox.queue(Self.record("b"), for: Self.changelog(token: 9), onSuccess: .changelogged(9))
        var transactions: RelayTransactions?
        await outbox.produceQueued(via: Self.clients(produced), transactions: &transactions, producer: nil, eventsTopic: Self.eventsTopic) { _, _ in }

        // Reports come in whatever order the partitions answer.
        let tagA = try #require(produced.tag(of: "a"))
        let tagB = try #require(produced.tag(of: "b"))
        let finishedB = outbox.reported(tagB)
        let b = try #require(finishedB)
        #expect(Self.label(b.effect) == "changelog 9" && Self.label(b.onSuccess) == "changelogged 9")
        let finishedA = outbox.reported(tagA)
        let a = try #require(finishedA)
        #expect(Self.label(a.effect) == "dead letter of \(reference)" && Self.label(a.onSuccess) == "published \(reference) d")

        let again = outbox.reported(tagA)
        #expect(again == nil, "librdkafka reports a record once; a second report finishes nothing")
        let unknown = [outbox.reported(2), outbox.reported(1_000), outbox.reported(.max)]
        #expect(unknown.allSatisfy { $0 == nil })
    }

    @Test("a slot is used again once its report is in: a new record never takes the tag of one still in flight")
    func slotsReused() async throws {
        let produced = Produced()
        var outbox = RecordOutbox()
        var transactions: RelayTransactions?
        for (index, key) in ["a", "b", "c"].enumerated() {
            outbox.queue(Self.record(key), for: Self.changelog(token: UInt64(index)), onSuccess: .changelogged(UInt64(index)))
        }
        await outbox.produceQueued(via: Self.clients(produced), transactions: &transactions, producer: nil, eventsTopic: Self.eventsTopic) { _, _ in }
        let inFlight = try #require(produced.tag(of: "b"))
        let (tagA, tagC) = (try #require(produced.tag(of: "a")), try #require(produced.tag(of: "c")))
        _ = outbox.reported(tagA)
        _ = outbox.reported(tagC)

        for (index, key) in ["d", "e", "f"].enumerated() {
            outbox.queue(Self.record(key), for: Self.changelog(token: UInt64(10 + index)), onSuccess: .changelogged(UInt64(10 + index)))
        }
        await outbox.produceQueued(via: Self.clients(produced), transactions: &transactions, producer: nil, eventsTopic: Self.eventsTopic) { _, _ in }
        let newTags = try ["d", "e", "f"].map { try #require(produced.tag(of: $0)) }
        #expect(Set(newTags).count == 3 && !newTags.contains(inFlight))
        #expect(newTags.allSatisfy { $0 < 4 }, "two slots freed, one added: \(newTags)")
        // Each tag now finishes the record that holds it.
        for (index, tag) in newTags.enumerated() {
            let finished = outbox.reported(tag).map { Self.label($0.effect) }
            #expect(finished == "changelog \(10 + index)")
        }
        let stillInFlight = outbox.reported(inFlight).map { Self.label($0.effect) }
        #expect(stillInFlight == "changelog 1")
    }

    @Test("a record its producer refuses outright fails with what its error means, awaits no report, and holds back none after it")
    func refusedOutright() async throws {
        struct NotEnqueued: Error {}
        let tooLarge = KafkaError(code: 10, name: "MSG_SIZE_TOO_LARGE", message: "Broker: Message size too large", operation: "produce")
        let fatal = KafkaError(code: 47, name: "INVALID_PRODUCER_EPOCH", message: "fenced", operation: "produce", fatal: true)
        let queueFull = KafkaError(code: -184, name: "_QUEUE_FULL", message: "Local: Queue full", operation: "produce")
        let produced = Produced()
        var outbox = RecordOutbox()
        for key in ["ok-1", "too-large", "fatal", "ok-2", "queue-full", "odd", "ok-3"] {
            outbox.queue(Self.record(key), for: Self.failedToken(key, source: nil), onSuccess: .publishSucceeded(.failedTokens))
        }
        var transactions: RelayTransactions?
        var failed: [(String, PublishFailure)] = []
        await outbox.produceQueued(via: Self.clients(produced, refusing: ["too-large": tooLarge, "fatal": fatal, "queue-full": queueFull, "odd": NotEnqueued()]),
                                   transactions: &transactions, producer: nil, eventsTopic: Self.eventsTopic) { effect, failure in
            failed.append((Self.label(effect), failure))
        }
        #expect(produced.records == ["results:ok-1", "results:ok-2", "results:ok-3"])
        #expect(failed.map { $0.0 } == ["failed token too-large", "failed token fatal", "failed token queue-full", "failed token odd"])
        #expect(failed.map { $0.1 } == [.tooLarge, .fatal("\(fatal)"), .other("\(queueFull)"), .other("\(NotEnqueued())")])

        // Only the produced records await reports; the refused ones' slots were given back.
        for key in ["ok-1", "ok-2", "ok-3"] {
            let tag = try #require(produced.tag(of: key))
            let finished = outbox.reported(tag).map { Self.label($0.effect) }
            #expect(finished == "failed token \(key)")
        }
        for tag in UInt64(0)..<8 {
            let finished = outbox.reported(tag)
            #expect(finished == nil, "tag \(tag) still awaited")
        }
    }

    /// Transactions ready, owning `owned`.
    static func transactions(owning owned: [TopicPartition]) -> RelayTransactions? {
        var transactions = RelayTransactions()
        transactions.ready()
        for partition in owned { transactions.own(partition) }
        return transactions
    }

    @Test("with transactions, a record of an owned partition goes into the relay's transaction, begun once; one of a partition not owned fails, unless it is a token's fact")
    func transactionalRouting() async throws {
        let produced = Produced()
        var outbox = RecordOutbox()
        var transactions = Self.transactions(owning: [Self.p0])
        let producer = NotingTransactionalProducer(name: "relay", produced: produced)
        outbox.queue(Self.record("result"), for: Self.deadLetter(of: Self.p0), onSuccess: .published(RecordReference(Self.p0, 1), device: nil))
        outbox.queue(Self.record("badge"), for: Self.changelog(token: 7, partition: 0), onSuccess: .changelogged(7))
        outbox.queue(Self.record("not-owned"), for: Self.deadLetter(of: Self.p1), onSuccess: .published(RecordReference(Self.p1, 1), device: nil))
        outbox.queue(Self.record("token-owned"), for: Self.failedToken("t0", source: Self.p0), onSuccess: .publishSucceeded(.failedTokens))
        outbox.queue(Self.record("token-not-owned"), for: Self.failedToken("t1", source: Self.p1), onSuccess: .publishSucceeded(.failedTokens))
        outbox.queue(Self.record("token-feedback"), for: Self.failedToken("t2", source: nil), onSuccess: .publishSucceeded(.failedTokens))
        outbox.queue(Self.record("wrong-environment"), for: Self.wrongEnvironment("w", source: Self.p1), onSuccess: .publishSucceeded(.wrongEnvironment))
        var failed: [(String, PublishFailure)] = []
        let broken = await outbox.produceQueued(via: Self.clients(produced), transactions: &transactions, producer: producer,
                                                eventsTopic: Self.eventsTopic) { effect, failure in
            failed.append((Self.label(effect), failure))
        }
        #expect(broken == nil)
        #expect(produced.records == ["relay:result", "relay:badge", "relay:token-owned", "results:token-not-owned", "results:token-feedback",
                                     "results:wrong-environment"])
        #expect(produced.begins == ["relay"], "one transaction, begun by its first record")
        #expect(failed.count == 1 && failed.first?.0 == "dead letter of \(RecordReference(Self.p1, 1))")
        if case .other(let reason)? = failed.first?.1 {
            #expect(reason.contains("not this relay's"), "\(reason)")
        } else {
            Issue.record("a record of a partition not owned fails as other: \(failed)")
        }
        // The badge change waits for its transaction's commit, which hands it on.
        #expect(transactions!.commitDue(intervalPassed: false)?.contents == .init(partitions: [Self.p0], badgeChanges: [7]))
        #expect(transactions!.committed().changelogged == [7])
    }

    @Test("records asked for while the transaction commits wait, whatever their partition; released, they go out first at the next produce, in order; forgotten, never")
    func waitWhileCommitting() async throws {
        let produced = Produced()
        var outbox = RecordOutbox()
        var transactions = Self.transactions(owning: [Self.p0, Self.p1])
        let producer = NotingTransactionalProducer(name: "relay", produced: produced)
        let clients = Self.clients(produced)
        var failed: [String] = []
        func produce() async {
            _ = await outbox.produceQueued(via: clients, transactions: &transactions, producer: producer, eventsTopic: Self.eventsTopic) { effect, _ in
                failed.append(Self.label(effect))
            }
        }

        outbox.queue(Self.record("first"), for: Self.changelog(token: 1, partition: 0), onSuccess: .changelogged(1))
        await produce()
        #expect(transactions!.commitDue(intervalPassed: false) != nil, "the badge change commits")

        outbox.queue(Self.record("wait-1"), for: Self.changelog(token: 2, partition: 0), onSuccess: .changelogged(2))
        outbox.queue(Self.record("wait-2"), for: Self.changelog(token: 3, partition: 1), onSuccess: .changelogged(3))
        outbox.queue(Self.record("wait-3"), for: Self.deadLetter(of: Self.p0), onSuccess: .published(RecordReference(Self.p0, 1), device: nil))
        outbox.queue(Self.record("feedback"), for: Self.failedToken("t", source: nil), onSuccess: .publishSucceeded(.failedTokens))
        await produce()
        #expect(produced.records == ["relay:first", "results:feedback"], "the transaction's records wait; a record of no partition goes")
        #expect(outbox.hasPending(for: [Self.p1], eventsTopic: Self.eventsTopic))

        _ = transactions!.committed()
        outbox.queue(Self.record("later"), for: Self.changelog(token: 4, partition: 0), onSuccess: .changelogged(4))
        outbox.release()
        outbox.release()  // nothing left to release: no record twice
        #expect(outbox.hasPending(for: [Self.p1], eventsTopic: Self.eventsTopic), "released, not produced yet: a revoke of p1 still waits for it")
        await produce()
        #expect(produced.records == ["relay:first", "results:feedback", "relay:wait-1", "relay:wait-2", "relay:wait-3", "relay:later"])
        #expect(produced.begins == ["relay", "relay"], "the waiting records open the next transaction")
        #expect(!outbox.hasPending(for: [Self.p1], eventsTopic: Self.eventsTopic))

        // The next commit; meanwhile p1 starts again from what was committed: its records waiting go, and its reports
        // finish nothing.
        _ = transactions!.commitDue(intervalPassed: true)
        outbox.queue(Self.record("gone"), for: Self.changelog(token: 5, partition: 1), onSuccess: .changelogged(5))
        outbox.queue(Self.record("kept"), for: Self.changelog(token: 6, partition: 0), onSuccess: .changelogged(6))
        await produce()
        let tagOfWait2 = try #require(produced.tag(of: "wait-2"))
        outbox.forget([Self.p1], eventsTopic: Self.eventsTopic)
        #expect(outbox.reported(tagOfWait2) == nil, "a forgotten record's report finishes nothing")
        _ = transactions!.committed()
        outbox.release()
        await produce()
        #expect(produced.records.suffix(1) == ["relay:kept"], "nothing forgotten is produced")
        #expect(failed.isEmpty)
    }

    @Test("a record refused because the transaction must be aborted breaks it: it and the transaction's later records wait for the next one; one refused for itself fails alone")
    func transactionalFailures() async throws {
        let produced = Produced()
        var outbox = RecordOutbox()
        var transactions = Self.transactions(owning: [Self.p0, Self.p1])
        let abortable = KafkaError(code: 22, name: "ILLEGAL_GENERATION", message: "abort", operation: "produce", transactionRequiresAbort: true)
        let refused = KafkaError(code: 10, name: "MSG_SIZE_TOO_LARGE", message: "Broker: Message size too large", operation: "produce")
        let producer = NotingTransactionalProducer(name: "relay", produced: produced, refusing: ["too-large": refused, "broke": abortable])
        outbox.queue(Self.record("ok"), for: Self.changelog(token: 10, partition: 0), onSuccess: .changelogged(10))
        outbox.queue(Self.record("too-large"), for: Self.changelog(token: 11, partition: 1), onSuccess: .changelogged(11))
        outbox.queue(Self.record("broke"), for: Self.changelog(token: 12, partition: 1), onSuccess: .changelogged(12))
        outbox.queue(Self.record("after"), for: Self.changelog(token: 13, partition: 0), onSuccess: .changelogged(13))
        outbox.queue(Self.record("feedback"), for: Self.failedToken("t", source: nil), onSuccess: .publishSucceeded(.failedTokens))
        var failed: [(String, PublishFailure)] = []
        let broken = await outbox.produceQueued(via: Self.clients(produced), transactions: &transactions, producer: producer,
                                                eventsTopic: Self.eventsTopic) { effect, failure in
            failed.append((Self.label(effect), failure))
        }
        #expect((broken as? KafkaError)?.name == "ILLEGAL_GENERATION")
        #expect(produced.records == ["relay:ok", "results:feedback"])
        #expect(failed.map { $0.0 } == ["changelog 11"] && failed.map { $0.1 } == [.tooLarge])
        #expect(outbox.hasPending(for: [Self.p1], eventsTopic: Self.eventsTopic) && outbox.hasPending(for: [Self.p0], eventsTopic: Self.eventsTopic))
    }

    @Test("an aborted transaction's records go into the next, in order, less those whose report failed; a replayed record's report tells the engine nothing twice; the aborted reports finish nothing")
    func replayAfterAbort() async throws {
        let produced = Produced()
        var outbox = RecordOutbox()
        var transactions = Self.transactions(owning: [Self.p0, Self.p1])
        let producer = NotingTransactionalProducer(name: "relay", produced: produced)
        let reference = RecordReference(Self.p0, 4)
        outbox.queue(Self.record("badge"), for: Self.changelog(token: 1, partition: 0), onSuccess: .changelogged(1))
        outbox.queue(Self.record("result"), for: Self.deadLetter(of: Self.p0, offset: 4), onSuccess: .published(reference, device: nil))
        outbox.queue(Self.record("refused"), for: Self.deadLetter(of: Self.p1, offset: 9), onSuccess: .published(RecordReference(Self.p1, 9), device: nil))
        func produce() async {
            _ = await outbox.produceQueued(via: Self.clients(produced), transactions: &transactions, producer: producer, eventsTopic: Self.eventsTopic) { _, _ in }
        }
        await produce()
        let (badgeTag, resultTag, refusedTag) = (try #require(produced.tag(of: "badge")), try #require(produced.tag(of: "result")),
                                                  try #require(produced.tag(of: "refused")))
        #expect(outbox.reported(resultTag)?.reportedBefore == false, "its report tells the engine")
        #expect(outbox.reported(refusedTag, failed: true) != nil, "its failure goes back to the engine")
        _ = transactions!.commitDue(intervalPassed: false)
        _ = transactions!.failed(restart: false)
        outbox.replayTransaction()
        #expect(outbox.reported(badgeTag) == nil, "the aborted record's report finishes nothing")
        transactions!.recovered(replaced: false)
        outbox.release()
        await produce()
        #expect(produced.records == ["relay:badge", "relay:result", "relay:refused", "relay:badge", "relay:result"])
        let replayedResult = outbox.reported(try #require(produced.tag(of: "result")))
        #expect(replayedResult?.reportedBefore == true, "told once already")
        let replayedBadge = outbox.reported(try #require(produced.tag(of: "badge")))
        #expect(replayedBadge?.reportedBefore == false && Self.label(replayedBadge!.onSuccess) == "changelogged 1")
        #expect(transactions!.commitDue(intervalPassed: false)?.contents.badgeChanges == [1], "its badge change waits for the next commit")

        // Started again instead: nothing of the transaction is produced again.
        _ = transactions!.failed(restart: true)
        outbox.dropTransaction()
        transactions!.recovered(replaced: false)
        outbox.release()
        await produce()
        #expect(produced.all.count == 5)
    }

    @Test("a transaction that could not begin leaves none open: the record fails, no commit is due, the next record begins one again")
    func failedBeginLeavesNoTransaction() async throws {
        let produced = Produced()
        var outbox = RecordOutbox()
        var transactions = Self.transactions(owning: [Self.p0])
        let stuck = KafkaError(code: -172, name: "_STATE", message: "Local: Erroneous state", operation: "begin transaction")
        let producer = NotingTransactionalProducer(name: "relay", produced: produced, beginError: stuck)
        outbox.queue(Self.record("badge-0"), for: Self.changelog(token: 10, partition: 0), onSuccess: .changelogged(10))
        var failed: [(String, PublishFailure)] = []
        _ = await outbox.produceQueued(via: Self.clients(produced), transactions: &transactions, producer: producer, eventsTopic: Self.eventsTopic) { effect, failure in
            failed.append((Self.label(effect), failure))
        }
        #expect(failed.map { $0.0 } == ["changelog 10"] && failed.map { $0.1 } == [.other("\(stuck)")])
        #expect(transactions!.commitDue(intervalPassed: true) == nil, "nothing was produced in a transaction, so none is open to commit")
        #expect(transactions!.route(Self.p0) == .produce(begin: true), "the next record begins a transaction")
        for tag in UInt64(0)..<2 {
            let finished = outbox.reported(tag)
            #expect(finished == nil)
        }
    }

    @Test("a record's transaction is that of the events partition it stems from: a forward's is where it was read, not its home")
    func transactionPartitions() {
        let reference = RecordReference(Self.p1, 5)
        let cases: [(RelayEffect, TopicPartition?)] = [
            (Self.deadLetter(of: Self.p1), Self.p1),
            (.publishDeadLetterReference(DeadLetterReference(source: RecordReference(Self.p0, 2), key: nil, size: 1, error: "e")), Self.p0),
            (.forwardEvent(Self.message("f"), user: "u", home: 7, for: reference), Self.p1),
            (Self.changelog(token: 1, partition: 4), TopicPartition(Self.eventsTopic, 4)),
            (.writeProgress(ProgressMarker(through: 0, open: []), partition: 3, at: 0, handOver: nil), TopicPartition(Self.eventsTopic, 3)),
            (.writeLayout(PartitionLayout(partitionCount: 8), partition: Self.p0, generation: 2), Self.p0),
            (Self.failedToken("t", source: Self.p1), Self.p1),
            (Self.failedToken("t", source: nil), nil),
            (Self.wrongEnvironment("w", source: Self.p0), Self.p0),
            (.commit([Self.p0: 3], request: 1), nil),
            (.loadDeviceRegistry, nil),
        ]
        for (effect, partition) in cases {
            #expect(effect.transactionPartition(eventsTopic: Self.eventsTopic) == partition, "\(Self.label(effect))")
        }
        #expect(cases.filter { $0.0.isTokenFact }.map { Self.label($0.0) } == ["failed token t", "failed token t", "wrong environment w"])
    }
}
