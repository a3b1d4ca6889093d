import APNs
import Foundation
import Kafka
import KafkaBrokerFront
import Logging
import NIOCore
import Synchronization
import TestSupport
import Testing

@testable import Relay

/// Fails its first `failures` reads, then reads through `reader`.
final class FlakyChangelogReader: BadgeStateReading {
    private let reader: any BadgeStateReading
    private let state: Mutex<(failuresLeft: Int, calls: Int)>

    init(_ reader: any BadgeStateReading, failures: Int) {
        self.reader = reader
        self.state = Mutex((failures, 0))
    }

    var calls: Int { state.withLock { $0.calls } }

    func readToEnd(_ partitions: [TopicPartition], body: @escaping @Sendable (KafkaMessage) -> Void) async throws -> Int {
        let fail = state.withLock { state -> Bool in
            state.calls += 1
            guard state.failuresLeft > 0 else { return false }
            state.failuresLeft -= 1
            return true
        }
        if fail {
            // Half a partition read, then the error: nothing of it may be used.
            _ = try? await reader.readToEnd(partitions) { message in if message.offset % 2 == 0 { body(message) } }
            throw KafkaError(code: -185, name: "_TIMED_OUT", message: "nothing read for 60 s", operation: "read to end")
        }
        return try await reader.readToEnd(partitions, body: body)
    }
}

/// Refuses dead letters that carry their input (as a broker refuses a record over
/// `message.max.bytes`); publishes everything else through `producer`.
struct OversizedDeadLetterProducer: RelayRecordProducer {
    let producer: KafkaProducer

    func produce(_ record: KafkaRecord, tag: UInt64) async throws {
        if record.topic == "push.dlq" && !record.headers.contains(where: { $0.key == "x-dead-letter" }) {
            throw KafkaError(code: 10, name: "MSG_SIZE_TOO_LARGE", message: "Broker: Message size too large", operation: "produce")
        }
        try await producer.produce(record, tag: tag)
    }

    var deliveries: any AsyncSequence<[KafkaTaggedDeliveryReport], Never> { producer.deliveries }

    func flush(timeout: Duration) async throws { try await producer.flush(timeout: timeout) }
    func close(timeout: Duration) async { await producer.close(timeout: timeout) }
}

/// Passes records to a producer and notes each record's topic and each flush. With an `order` log, also
/// writes the progress markers it is handed, and their acknowledgements, into it.
final class RecordingProducer: RelayRecordProducer {
    let producer: KafkaProducer
    let order: HandOverOrderLog?
    private let log = Mutex<(topics: [String], flushes: Int, markerTags: Set<UInt64>)>(([], 0, []))

    init(_ producer: KafkaProducer, order: HandOverOrderLog? = nil) {
        self.producer = producer
        self.order = order
    }

    func produce(_ record: KafkaRecord, tag: UInt64) async throws {
        let isMarker = record.key == ProgressMarker.key && order != nil
        log.withLock {
            $0.topics.append(record.topic)
            if isMarker { $0.markerTags.insert(tag) }
        }
        if isMarker { order?.append(.marker) }
        try await producer.produce(record, tag: tag)
    }

    /// The producer's reports, each stored marker noted in the order log as its report passes.
    var deliveries: any AsyncSequence<[KafkaTaggedDeliveryReport], Never> {
        producer.deliveryReports.map { [self] reports in
            for report in reports where report.error == nil && log.withLock({ $0.markerTags.remove(report.tag) != nil }) {
                order?.append(.markerStored)
            }
            return reports
        }
    }

    func flush(timeout: Duration) async throws {
        log.withLock { $0.flushes += 1 }
        try await producer.flush(timeout: timeout)
    }

    func close(timeout: Duration) async { await producer.close(timeout: timeout) }

    var topics: [String] { log.withLock { $0.topics } }
    var flushes: Int { log.withLock { $0.flushes } }
}

/// One log of what reaches Kafka, in order, across the changelog producer and the consumer:
/// progress markers handed over, their acknowledgements, and commits asked for.
final class HandOverOrderLog: Sendable {
    enum Entry: Equatable { case marker, markerStored, commit }
    private let entries = Mutex<[Entry]>([])
    func append(_ entry: Entry) { entries.withLock { $0.append(entry) } }
    var all: [Entry] { entries.withLock { $0 } }
}

/// The group consumer, writing each commit it is asked for into a ``HandOverOrderLog``.
final class CommitOrderConsumer: RelayEventConsumer {
    let consumer: any RelayEventConsumer
    let log: HandOverOrderLog

    init(_ consumer: any RelayEventConsumer, log: HandOverOrderLog) {
        self.consumer = consumer
        self.log = log
    }

    func forEachBatch(maxCount: Int, _ handle: @Sendable ([KafkaConsumerEvent]) async -> Void) async throws {
        try await consumer.forEachBatch(maxCount: maxCount, handle)
    }
    func pause(_ partitions: [TopicPartition]) { consumer.pause(partitions) }
    func resume(_ partitions: [TopicPartition]) { consumer.resume(partitions) }
    func commit(_ offsets: [TopicPartition: Int64], completion: @escaping @Sendable (Result<Void, KafkaError>) -> Void) {
        log.append(.commit)
        consumer.commit(offsets, completion: completion)
    }
    func lag() -> [TopicPartition: Int64] { consumer.lag() }
    func rewind(_ partitions: [TopicPartition]) async throws { try await consumer.rewind(partitions) }
    func transactionGroupMetadata() -> KafkaConsumerGroupMetadata? { consumer.transactionGroupMetadata() }
    var membershipLosses: Int { consumer.membershipLosses }
    func close(timeout: Duration) async -> Bool { await consumer.close(timeout: timeout) }
}

/// An APNs that never gives a stream: each send waits in its queue until the relay ends its partition's waiting sends
/// (`cancelQueued`, at a hand-over). Records when each token's send started and when it was ended so.
final class SilentSender: NotificationSending {
    private let log = Mutex<(started: [String: ContinuousClock.Instant], cancelled: [String: ContinuousClock.Instant], sends: Int, waiting: [RelaySend])>(([:], [:], 0, []))

    func submit(_ sends: [RelaySend]) {
        log.withLock { log in
            for send in sends {
                log.sends += 1
                _ = log.started.updateValue(log.started[send.notification.token] ?? .now, forKey: send.notification.token)
                log.waiting.append(send)
            }
        }
    }

    func cancelQueued(_ cancellation: APNsSendCancellation) {
        let ended = log.withLock { log -> [RelaySend] in
            let ended = log.waiting.filter { $0.cancellation === cancellation }
            log.waiting.removeAll { $0.cancellation === cancellation }
            for send in ended { log.cancelled[send.notification.token] = .now }
            return ended
        }
        for send in ended { send.complete(.abandoned()) }
    }

    var started: [String: ContinuousClock.Instant] { log.withLock { $0.started } }
    var cancelled: [String: ContinuousClock.Instant] { log.withLock { $0.cancelled } }
    /// Sends started, counting a device's send again after a revoke gave its partition back.
    var sends: Int { log.withLock { $0.sends } }
}

/// Records each token's sends with the time; answers delivered.
final class TimedSender: NotificationSending {
    private let log = Mutex<[String: [(badge: Int64?, at: ContinuousClock.Instant)]]>([:])

    func submit(_ sends: [RelaySend]) {
        for send in sends {
            log.withLock { $0[send.notification.token, default: []].append((send.notification.badge, .now)) }
            send.complete(.delivered())
        }
    }

    var byToken: [String: [(badge: Int64?, at: ContinuousClock.Instant)]] { log.withLock { $0 } }
}

/// An APNs that cannot be reached until `open()`; then it answers every notification 200 and counts them.
final class GatedAPNs: APNsConnectionFactory {
    struct Connection: APNsConnection {
        let id: APNsConnectionID
        let apns: GatedAPNs
        func send(_ notification: APNsNotification, deadline: NIODeadline, completion: @escaping @Sendable (APNsAttemptResult) -> Void) {
            apns.state.withLock { $0.written += 1 }
            completion(.response(APNsResponse(status: 200)))
        }
        func close(graceful: Bool) async {}
    }

    fileprivate let state = Mutex<(open: Bool, written: Int)>((false, 0))

    func open() { state.withLock { $0.open = true } }
    /// Notifications written to it.
    var written: Int { state.withLock { $0.written } }

    func makeConnection(id: APNsConnectionID, delegate: any APNsConnectionDelegate) async throws -> APNsEstablishedConnection {
        while !state.withLock({ $0.open }) { try await Task.sleep(for: .milliseconds(20)) }
        return APNsEstablishedConnection(connection: Connection(id: id, apns: self), maxConcurrentStreams: 100)
    }
}

@Suite("Relay service under failures, on the embedded cluster", .serialized)
struct ServiceFailureTests {
    func makeCluster() throws -> (EmbeddedKafka, KafkaConfiguration) {
        let cluster = try EmbeddedKafka(brokers: 1)
        for (topic, partitions) in [("push.events", 3), ("push.badge-state", 3), ("push.devices", 1), ("push.results", 1), ("push.failed-tokens", 1), ("push.dlq", 1)] {
            try cluster.createTopic(topic, partitions: partitions)
        }
        return (cluster, KafkaConfiguration(bootstrapServers: cluster.bootstrapServers, properties: ["session.timeout.ms": "6000", "heartbeat.interval.ms": "500"]))
    }

    /// The topics of ``makeCluster()`` on noida-db, created through the admin API.
    /// `configs`: topic configs by topic (e.g. a `max.message.bytes`).
    func makeBroker(configs: [String: [String: String]] = [:]) async throws -> (NoidaBroker, KafkaConfiguration) {
        let broker = try NoidaBroker()
        let kafka = KafkaConfiguration(bootstrapServers: broker.bootstrapServers, properties: ["session.timeout.ms": "6000", "heartbeat.interval.ms": "500"])
        let admin = try KafkaAdmin(configuration: kafka, logger: quietLogger("admin"))
        try await admin.createTopics([("push.events", 3), ("push.badge-state", 3), ("push.devices", 1), ("push.results", 1), ("push.failed-tokens", 1),
                                      ("push.dlq", 1), ("push.wrong-environment", 1)].map {
            KafkaTopicSpecification(name: $0.0, partitions: $0.1, configs: configs[$0.0] ?? [:])
        })
        return (broker, kafka)
    }

    /// An abortable error the front injects, and whether every (event, device) must have exactly one visible result
    /// after it.
    struct AbortableCase: Sendable, CustomTestStringConvertible {
        var errorCode: Int16
        var exactlyOnceResults: Bool
        var testDescription: String { "error \(errorCode)" }
    }

    @Test("a transaction the broker refuses mid-stream is aborted, never the relay: OFFSET_METADATA_TOO_LARGE (12): its records go into the next one, every result once; ILLEGAL_GENERATION (22): its partitions start again from what was committed, every result at least once; every badge exact and never backwards",
          arguments: [AbortableCase(errorCode: 12, exactlyOnceResults: true), AbortableCase(errorCode: 22, exactlyOnceResults: false)])
    func abortableErrorMidStream(_ scenario: AbortableCase) async throws {
        let (broker, direct) = try await makeBroker()
        defer { withExtendedLifetime(broker) {} }
        let front = try await KafkaBrokerFront(upstreams: broker.bootstrapServers)
        var kafka = direct
        kafka.bootstrapServers = front.bootstrapServers
        let producer = try KafkaProducer(configuration: kafka, logger: quietLogger("test-producer"))
        let users = 12
        func produce(seqs: ClosedRange<Int>) async throws {
            for seq in seqs {
                for user in 0..<users {
                    _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8),
                                                               value: eventJSON(id: "u\(user)-e\(seq)", user: "u-\(user)", seq: seq, tokens: [token(user + 1)])))
                }
            }
            try await producer.flush()
        }
        try await produce(seqs: 1...3)
        let sender = RecordingSender()
        let configuration = RelayServiceConfiguration(kafka: kafka, engine: .init(defaultTopic: "com.example.app"), commitInterval: .milliseconds(200),
                                                      transactions: .init())
        let service = RelayService(configuration: configuration, sender: sender, logger: quietLogger("relay"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await service.run() }
            _ = await waitUntil(timeout: .seconds(60)) { service.status.snapshot.counters.eventsApplied >= users }
            front.refuseTxnOffsetCommits(errorCode: scenario.errorCode)
            try await produce(seqs: 4...6)
            _ = await waitUntil(timeout: .seconds(60)) {
                let snapshot = service.status.snapshot
                return (0..<users).allSatisfy { sender.byToken[token($0 + 1)]?.last == 6 } && snapshot.pendingRecords == 0 || snapshot.failure != nil
            }
            #expect(service.status.snapshot.failure == nil, "the relay gave up: \(service.status.snapshot.failure ?? "")")
            service.stop()
            _ = try? await group.waitForAll()
        }
        await producer.close()
        #expect(front.events.contains { if case .refused(_, _, _, errorCode: scenario.errorCode) = $0 { true } else { false } },
                "the refusal was made: \(front.events)")
        for user in 0..<users {
            let badges = sender.byToken[token(user + 1)]?.compactMap { $0 } ?? []
            #expect(badges == badges.sorted() && badges.last == 6, "u-\(user): \(badges)")
        }
        let reader = try KafkaPartitionReader(configuration: kafka, logger: quietLogger("reader"))
        let results = LockedBox<[String: Int]>([:])
        _ = try await reader.readToEnd([TopicPartition("push.results", 0)]) { message in
            results.withLock { $0[String(decoding: message.key ?? [], as: UTF8.self), default: 0] += 1 }
        }
        let counts = results.withLock { $0 }
        #expect(counts.count == users * 6, "every (event, device) has a result: \(counts.count) of \(users * 6)")
        if scenario.exactlyOnceResults {
            #expect(counts.values.allSatisfy { $0 == 1 }, "results twice: \(counts.filter { $0.value != 1 })")
        }
        await front.close()
    }

    @Test("a dead letter the broker refuses (push.dlq's max.message.bytes below the record, above librdkafka's own check) becomes a dead-letter reference; the relay goes on, every other event delivered once")
    func deadLetterRefusedByTheBroker() async throws {
        let (broker, kafka) = try await makeBroker(configs: ["push.dlq": ["max.message.bytes": "4096"]])
        defer { withExtendedLifetime(broker) {} }
        let producer = try KafkaProducer(configuration: kafka, logger: quietLogger("test-producer"))
        let users = 12
        for user in 0..<users {
            _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8),
                                                       value: eventJSON(id: "u\(user)-e1", user: "u-\(user)", seq: 1, tokens: [token(user + 1)])))
        }
        // Not JSON, 20 KB: a dead letter carrying it is over push.dlq's 4 KB.
        _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-0".utf8), value: Array(repeating: UInt8(ascii: "x"), count: 20_000)))
        for user in 0..<users {
            _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8),
                                                       value: eventJSON(id: "u\(user)-e2", user: "u-\(user)", seq: 2, tokens: [token(user + 1)])))
        }
        try await producer.flush()
        await producer.close()

        let sender = RecordingSender()
        let configuration = RelayServiceConfiguration(kafka: kafka, engine: .init(defaultTopic: "com.example.app"), commitInterval: .milliseconds(200),
                                                      transactions: .init())
        let service = RelayService(configuration: configuration, sender: sender, logger: quietLogger("relay"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await service.run() }
            _ = await waitUntil(timeout: .seconds(60)) {
                let snapshot = service.status.snapshot
                return snapshot.counters.eventsApplied == 2 * users && snapshot.pendingRecords == 0 || snapshot.failure != nil
            }
            #expect(service.status.snapshot.failure == nil, "the relay gave up: \(service.status.snapshot.failure ?? "")")
            service.stop()
            _ = try? await group.waitForAll()
        }
        for user in 0..<users {
            #expect(sender.byToken[token(user + 1)] == [1, 2], "u-\(user): \(sender.byToken[token(user + 1)] ?? [])")
        }
        let reader = try KafkaPartitionReader(configuration: kafka, logger: quietLogger("reader"))
        let deadLetters = LockedBox<[KafkaMessage]>([])
        _ = try await reader.readToEnd([TopicPartition("push.dlq", 0)]) { message in deadLetters.withLock { $0.append(message) } }
        let letters = deadLetters.withLock { $0 }
        #expect(letters.count == 1 && letters.first?.headers.contains { $0.key == "x-dead-letter" && $0.value == Array("reference".utf8) } == true,
                "one dead letter, a reference: \(letters.map { ($0.headers.map(\.key), $0.value?.count ?? 0) })")
    }

    /// Each user's first event (seq 1) to its device token.
    func produceFirstEvents(users: Int, kafka: KafkaConfiguration) async throws {
        let producer = try KafkaProducer(configuration: kafka, logger: quietLogger("test-producer"))
        for user in 0..<users {
            _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8),
                                                       value: eventJSON(id: "u\(user)-e1", user: "u-\(user)", seq: 1, tokens: [token(user + 1)])))
        }
        try await producer.flush()
        await producer.close()
    }

    @Test("a restore that fails twice is read again; the partitions continue from the stored badges, never from a partial read; with transactions, the relay goes on (its producer is not fenced by its own retry)",
          arguments: [false, true])
    func restoreFailsTwice(transactions: Bool) async throws {
        // With transactions on noida-db, which fences a producer whose transactional id another initialised since
        // (the mock cluster does not).
        let broker = transactions ? try await makeBroker() : nil
        let cluster = transactions ? nil : try makeCluster()
        let kafka = broker?.1 ?? cluster!.1
        defer { cluster?.0.stop() }
        defer { withExtendedLifetime(broker) {} }
        let producer = try KafkaProducer(configuration: kafka, logger: quietLogger("test-producer"))
        let users = 12
        // Every user at badge 5, seq 5, in every changelog partition (whichever holds the user's events).
        for partition in 0..<3 {
            for user in 0..<users {
                _ = try await producer.enqueue(KafkaRecord(topic: "push.badge-state", partition: Int32(partition), key: Array("u-\(user)".utf8),
                                                           value: BadgeStateRecord(badge: 5, seq: 5, updatedAt: 1).encoded()))
            }
        }
        for user in 0..<users {
            _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8),
                                                       value: eventJSON(id: "u\(user)-e6", user: "u-\(user)", seq: 6, tokens: [token(user + 1)])))
        }
        try await producer.flush()
        await producer.close()

        let reader = FlakyChangelogReader(KafkaChangelogReader(kafka: kafka, logger: quietLogger("reader")), failures: 2)
        let sender = RecordingSender()
        let configuration = RelayServiceConfiguration(kafka: kafka, engine: .init(defaultTopic: "com.example.app"), commitInterval: .milliseconds(200),
                                                      transactions: transactions ? .init() : nil)
        var clients = try RelayKafkaClients.kafka(configuration, logger: quietLogger("relay"))
        clients.changelog = reader
        let service = RelayService(configuration: configuration, sender: sender, clients: clients, logger: quietLogger("relay"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await service.run() }
            _ = await waitUntil(timeout: .seconds(60)) {
                let snapshot = service.status.snapshot
                return snapshot.counters.eventsApplied == users && snapshot.pendingRecords == 0 || snapshot.failure != nil
            }
            #expect(service.status.snapshot.failure == nil, "the relay gave up: \(service.status.snapshot.failure ?? "")")
            service.stop()
            _ = try? await group.waitForAll()
        }
        #expect(reader.calls >= 5, "three partitions, two reads failed and read again: \(reader.calls)")
        for user in 0..<users {
            #expect(sender.byToken[token(user + 1)] == [6], "u-\(user) continues from 5: \(sender.byToken[token(user + 1)] ?? [])")
        }
    }

    @Test("a rebalance while APNs answers nothing: the old owner cancels its sends for the moved partitions before the new owner sends to those devices")
    func rebalanceWithSilentAPNs() async throws {
        let (cluster, kafka) = try makeCluster()
        defer { cluster.stop() }
        let users = 30
        try await produceFirstEvents(users: users, kafka: kafka)

        let silent = SilentSender()
        let answering = TimedSender()
        let configuration = RelayServiceConfiguration(kafka: kafka, engine: .init(defaultTopic: "com.example.app"), shutdownTimeout: .seconds(3), commitInterval: .milliseconds(200))
        let first = RelayService(configuration: configuration, sender: silent, logger: quietLogger("relay-1"))
        let second = RelayService(configuration: configuration, sender: answering, logger: quietLogger("relay-2"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await first.run() }
            // The first owns every partition; each device's send hangs.
            _ = await waitUntil(timeout: .seconds(60)) { silent.started.count == users }
            #expect(silent.started.count == users)
            group.addTask { try await second.run() }
            // The rebalance takes every partition from the first (eager assignment), which gives
            // some back: every user is then either the second's (delivered) or the first's again
            // (sent again, hanging). A first rebalance may end before the second's join is in (the
            // first then takes everything back and sends it all again): wait for the second's share.
            _ = await waitUntil(timeout: .seconds(60)) {
                !answering.byToken.isEmpty && answering.byToken.count + (silent.sends - users) >= users
            }
            second.stop()
            first.stop()
            try await group.waitForAll()
        }
        let moved = answering.byToken
        #expect(!moved.isEmpty, "the second relay took partitions over")
        let cancelled = silent.cancelled
        for (deviceToken, sends) in moved {
            guard let cancelledAt = cancelled[deviceToken], let firstSend = sends.first?.at else {
                Issue.record("\(deviceToken.prefix(8)): sent by the new owner but never cancelled by the old")
                continue
            }
            #expect(cancelledAt < firstSend, "\(deviceToken.prefix(8)): the old owner abandoned it before the new owner sent it")
            #expect(sends.map(\.badge) == [1])
        }
    }

    @Test("a stop while APNs is unreachable: the sends waiting in the pool's queue leave it at the hand-over, and none is written once APNs comes back")
    func stopWithSendsQueued() async throws {
        let (cluster, kafka) = try makeCluster()
        defer { cluster.stop() }
        let users = 12
        try await produceFirstEvents(users: users, kafka: kafka)

        let apns = GatedAPNs()
        let supervisor = APNsSupervisor(configuration: APNsSupervisorConfiguration(pool: .init(connections: 1)), factory: apns)
        let configuration = RelayServiceConfiguration(kafka: kafka, engine: .init(defaultTopic: "com.example.app"), shutdownTimeout: .seconds(2), commitInterval: .milliseconds(200))
        let service = RelayService(configuration: configuration, sender: APNsSupervisorSender(supervisor: supervisor), logger: quietLogger("relay"))
        try await withThrowingTaskGroup(of: Void.self) { pool in
            pool.addTask { await supervisor.run() }
            try await withThrowingTaskGroup(of: Void.self) { relay in
                relay.addTask { try await service.run() }
                _ = await waitUntil(timeout: .seconds(60), every: .milliseconds(50)) { supervisor.queuedCount >= users }
                #expect(supervisor.queuedCount == users, "every device's send waits for a stream, with no task of its own")
                service.stop()
                try await relay.waitForAll()
            }
            #expect(supervisor.queuedCount == 0, "the hand-over took the relay's queued sends out of the pool")
            apns.open()
            _ = await waitUntil(timeout: .seconds(30), every: .milliseconds(20)) { supervisor.readyConnectionCount > 0 }
            #expect(supervisor.readyConnectionCount == 1)
            await supervisor.shutdown(gracePeriod: .seconds(1))
            try await pool.waitForAll()
        }
        #expect(apns.written == 0, "nothing of the handed-over partitions was sent after the hand-over")
    }

    @Test("badge changes and progress markers go through the changelog's producer, results through the other; a stop leaves nothing of either unacknowledged")
    func changelogHasItsOwnProducer() async throws {
        let (cluster, kafka) = try makeCluster()
        defer { cluster.stop() }
        let results = RecordingProducer(try KafkaProducer(configuration: kafka, logger: quietLogger("relay-results")))
        let changelog = RecordingProducer(try changelogProducer(kafka))
        try await runSixEvents(kafka: kafka, commitInterval: .milliseconds(200)) { clients in
            clients.producer = results
            clients.changelogProducer = changelog
        }
        #expect(Set(results.topics) == ["push.results"])
        #expect(results.topics.count == 6)
        #expect(Set(changelog.topics) == ["push.badge-state"])
        // Six badge changes, then the stop's progress markers: every record handed over is stored.
        #expect(changelog.topics.count > 6)
        #expect(try await readAll(cluster, topic: "push.badge-state", partitions: 3).count == changelog.topics.count)
        #expect(try await readAll(cluster, topic: "push.results", partitions: 1).count == 6)
    }

    @Test("a stop stores its progress markers before its commit: every marker of the hand-over is acknowledged before the hand-over's commit")
    func markersStoredBeforeHandOverCommit() async throws {
        let (cluster, kafka) = try makeCluster()
        defer { cluster.stop() }
        let log = HandOverOrderLog()
        let changelog = RecordingProducer(try changelogProducer(kafka), order: log)
        // A commit interval longer than the test: the only commit is the hand-over's.
        try await runSixEvents(kafka: kafka, commitInterval: .seconds(600)) { clients in
            clients.changelogProducer = changelog
            clients.consumer = CommitOrderConsumer(clients.consumer, log: log)
        }
        let entries = log.all
        let lastMarker = try #require(entries.lastIndex(of: .marker), "the stop wrote progress markers: \(entries)")
        let commit = try #require(entries.lastIndex(of: .commit), "the stop committed: \(entries)")
        #expect(lastMarker < commit, "\(entries)")
        // Each marker handed over before the hand-over's commit was acknowledged before it.
        let beforeCommit = entries[..<commit]
        #expect(beforeCommit.filter { $0 == .markerStored }.count == beforeCommit.filter { $0 == .marker }.count, "\(entries)")
        #expect(!entries[commit...].contains(.marker), "no marker after the hand-over's commit: \(entries)")
        // And they are in the changelog for the next owner.
        let stored = try await readAll(cluster, topic: "push.badge-state", partitions: 3)
        #expect(stored.contains { $0.key.map { $0.elementsEqual(ProgressMarker.key) } == true })
    }

    @Test("a dead letter too large to publish: push.dlq gets a reference record with the contract's headers, and the record's offset is committed")
    func oversizedDeadLetter() async throws {
        let (cluster, kafka) = try makeCluster()
        defer { cluster.stop() }
        let producer = try KafkaProducer(configuration: kafka, logger: quietLogger("test-producer"))
        try await producer.send(topic: "push.events", partition: 0, key: Array("big".utf8), value: Array(#"{"id":"big","user":"#.utf8))
        await producer.close()

        let configuration = RelayServiceConfiguration(kafka: kafka, engine: .init(defaultTopic: "com.example.app"), commitInterval: .milliseconds(200))
        var clients = try RelayKafkaClients.kafka(configuration, logger: quietLogger("relay"))
        clients.producer = OversizedDeadLetterProducer(producer: try KafkaProducer(configuration: kafka, logger: quietLogger("relay-producer")))
        let service = RelayService(configuration: configuration, sender: RecordingSender(), clients: clients, logger: quietLogger("relay"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await service.run() }
            _ = await waitUntil(timeout: .seconds(60)) {
                let snapshot = service.status.snapshot
                return snapshot.counters.eventsInvalid == 1 && snapshot.pendingRecords == 0
            }
            try await Task.sleep(for: .milliseconds(500))  // one more commit interval
            service.stop()
            try await group.waitForAll()
        }
        let deadLetters = try await readAll(cluster, topic: "push.dlq", partitions: 1)
        #expect(deadLetters.count == 1)
        let reference = try #require(deadLetters.first)
        #expect(reference.key.map(Array.init) == Array("big".utf8))
        #expect(reference.header("x-dead-letter")?.value == Array("reference".utf8))
        #expect(reference.header("x-source-topic")?.value == Array("push.events".utf8))
        #expect(reference.header("x-source-partition")?.value == Array("0".utf8))
        #expect(reference.header("x-source-offset")?.value == Array("0".utf8))
        #expect(reference.header("x-error") != nil)
        let value = String(decoding: reference.value ?? [], as: UTF8.self)
        #expect(value.hasPrefix(#"{"source_topic":"push.events","source_partition":0,"source_offset":0,"size":19,"error":"#), "\(value)")
        let check = try KafkaConsumer(configuration: KafkaConsumerConfiguration(kafka: kafka, groupID: "apns-relay", topics: ["push.events"]), logger: quietLogger("check"))
        let committed = try await check.committed([TopicPartition("push.events", 0)])
        #expect(committed[TopicPartition("push.events", 0)] ?? nil == 1, "the reference finished the record")
        await check.close()
    }
}

/// The relay's changelog producer, as `RelayKafkaClients.kafka` makes it.
private func changelogProducer(_ kafka: KafkaConfiguration) throws -> KafkaProducer {
    try KafkaProducer(configuration: kafka, logger: quietLogger("relay-changelog"), lingerMilliseconds: RelayKafkaClients.changelogLingerMilliseconds)
}

extension ServiceFailureTests {
    /// Produces six users' first events, runs a relay service on the Kafka clients `adjust` changes until it
    /// applied them and has nothing pending, then stops it.
    func runSixEvents(kafka: KafkaConfiguration, commitInterval: Duration, adjust: (inout RelayKafkaClients) -> Void) async throws {
        try await produceFirstEvents(users: 6, kafka: kafka)
        let configuration = RelayServiceConfiguration(kafka: kafka, engine: .init(defaultTopic: "com.example.app"), commitInterval: commitInterval)
        var clients = try RelayKafkaClients.kafka(configuration, logger: quietLogger("relay"))
        adjust(&clients)
        let service = RelayService(configuration: configuration, sender: RecordingSender(), clients: clients, logger: quietLogger("relay"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await service.run() }
            #expect(await waitUntil(timeout: .seconds(60)) {
                let snapshot = service.status.snapshot
                return snapshot.counters.eventsApplied == 6 && snapshot.pendingRecords == 0
            })
            service.stop()
            try await group.waitForAll()
        }
    }
}
