import APNsSimulator
import Foundation
import Kafka
import KafkaBrokerFront
import Logging
import Synchronization
import TestSupport
import Testing

/// One `push.results` record as read back.
struct PublishedResult: Decodable, Hashable {
    var eventID: String
    var token: String?
    var status: String
    var badge: Int?
    var apnsID: String?

    enum CodingKeys: String, CodingKey {
        case eventID = "event_id", token, status, badge, apnsID = "apns_id"
    }
}

/// A relay process started by a test, its output in `log`. Killed when the test lets go of it still running (a
/// test that failed before it stopped it), so no relay outlives its test.
final class RelayProcess {
    let process: Process
    let log: String

    init(process: Process, log: String) {
        self.process = process
        self.log = log
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    var output: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

    /// Waits (at most `timeout`) until its output contains `line`.
    func waitFor(_ line: String, timeout: Duration = .seconds(60)) async -> Bool {
        await waitUntil(timeout: timeout) { output.contains(line) }
    }

    /// SIGTERM once it handles signals (its "starting" line), then waits for it to exit (at most 60 s, then
    /// SIGKILL). Returns whether it exited with status 0.
    func stopGracefully() async -> Bool {
        _ = await waitFor("starting", timeout: .seconds(30))
        kill(process.processIdentifier, SIGTERM)
        guard await waitUntil(timeout: .seconds(60), { !process.isRunning }) else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return false
        }
        return process.terminationReason == .exit && process.terminationStatus == 0
    }
}

/// `apns-relay run` processes against a noida-db broker process (``NoidaBroker``) and an in-process APNs
/// simulator. Users are `u-0`...; each has `devicesPerUser` registered devices; its events are seqs 1, 2, ...,
/// each an increment of 1 with an alert, so every device of a user must show badges 1, 2, 3, ... exactly once.
final class BrokerRelayFixture {
    /// Partitions of every topic: the relay creates them with TopicSetup's default.
    static let partitions = 6

    let broker: NoidaBroker
    /// The front the relays reach the broker through (``start(users:devicesPerUser:kafkaLines:throughFront:)``): a
    /// member that dies is expired and a stale generation's offsets are refused, as Kafka does.
    let front: KafkaBrokerFront?
    let simulator: APNsSimulator
    let directory: String
    let users: Int
    let devicesPerUser: Int
    let logger: Logger
    /// Partitions of `push.events` and `push.badge-state` now (a test that grows them says so).
    var partitionCount = BrokerRelayFixture.partitions
    /// Partitions of `push.results`.
    var resultPartitions = BrokerRelayFixture.partitions
    var kafka: KafkaConfiguration { KafkaConfiguration(bootstrapServers: broker.bootstrapServers) }
    var configPath: String { "\(directory)/relay.yaml" }

    private init(broker: NoidaBroker, front: KafkaBrokerFront?, simulator: APNsSimulator, directory: String, users: Int, devicesPerUser: Int) {
        self.broker = broker
        self.front = front
        self.simulator = simulator
        self.directory = directory
        self.users = users
        self.devicesPerUser = devicesPerUser
        var logger = Logger(label: "broker-test")
        logger.logLevel = .error
        self.logger = logger
    }

    /// Starts the broker (empty) and the simulator, and writes the relay's configuration: short group timeouts
    /// so a hand-over takes seconds, a 10 s shutdown budget.
    /// `kafkaLines` add to the configuration's `kafka` section; `throughFront`: the relays reach the broker through a
    /// ``KafkaBrokerFront`` (the test's own clients reach it directly).
    /// `relayLines` add to its `relay` section.
    static func start(users: Int, devicesPerUser: Int, kafkaLines: String = "", relayLines: String = "",
                      throughFront: Bool = false) async throws -> BrokerRelayFixture {
        let broker = try NoidaBroker()
        let front = throughFront ? try await KafkaBrokerFront(upstreams: broker.bootstrapServers) : nil
        let (simulator, directory) = try await RelayProcessFixture.startSimulatorAndWriteConfig(
            brokers: front?.bootstrapServers ?? broker.bootstrapServers,
            kafkaLines: RelayProcessFixture.shortGroupTimeouts + kafkaLines,
            relayLines: """
                  http_port: 0
                  shutdown_timeout_s: 10
                  reorder_window_ms: 2000
                """ + relayLines)
        return BrokerRelayFixture(broker: broker, front: front, simulator: simulator, directory: directory, users: users, devicesPerUser: devicesPerUser)
    }

    /// Starts `apns-relay run` on the fixture's configuration, `environment` overriding it; its output in `NAME.log`.
    func startRelay(_ name: String, environment: [String: String] = [:]) throws -> RelayProcess {
        let log = "\(directory)/\(name).log"
        return RelayProcess(process: try ApnsRelayProcessTests.startRelay(["run", "--config", configPath], log: log, environment: environment), log: log)
    }

    /// The relay's topics, as it names them by default.
    static let topics = RelayProcessFixture.topics

    /// A first relay creates the topics; once it has joined the group it is stopped (exit 0), then every user's
    /// devices are registered: the next relay loads them all before it processes an event.
    func createTopicsThenRegisterDevices() async throws {
        let setup = try startRelay("setup")
        #expect(await setup.waitFor("partitions assigned"), "the first relay joins the group: \(setup.output.suffix(3_000))")
        #expect(await setup.stopGracefully(), "\(setup.output.suffix(3_000))")
        try await registerDevices()
    }

    func token(user: Int, device: Int) -> String {
        String(repeating: "ab", count: 27) + String(format: "%06x%04x", user, device)
    }

    var allTokens: [String] { (0..<users).flatMap { user in (0..<devicesPerUser).map { token(user: user, device: $0) } } }

    func registerDevices() async throws {
        try await produce((0..<users).flatMap { user in
            (0..<devicesPerUser).map { device in
                KafkaRecord(topic: "push.devices", key: Array(token(user: user, device: device).utf8),
                            value: Array("{\"user\":\"u-\(user)\",\"topic\":\"com.example.app\",\"environment\":\"production\",\"registered_at\":1}".utf8))
            }
        })
    }

    /// How a producer keys an event.
    enum Keying {
        /// By user id, with the producer's default partitioner (librdkafka `murmur2_random` here: Kafka's default).
        case user
        /// By user id, placed as librdkafka's default partitioner (`consistent_random`, crc32) places it.
        case userCrc32
        /// By event id.
        case eventID
        /// No key.
        case none
    }

    /// Produces seq `seq` of every user, in user order, each keyed as `keying` says for its user.
    func produceEvents(seq: Int, keying: (Int) -> Keying = { _ in .user }) async throws {
        try await produce((0..<users).map { user in
            let value = Self.eventValue(user: user, seq: seq)
            let userKey = Array("u-\(user)".utf8)
            switch keying(user) {
            case .user: return KafkaRecord(topic: "push.events", key: userKey, value: value)
            case .userCrc32:
                return KafkaRecord(topic: "push.events", partition: KafkaPartitioner.crc32(key: userKey, partitionCount: Int32(partitionCount)),
                                   key: userKey, value: value)
            case .eventID: return KafkaRecord(topic: "push.events", key: Array("u\(user)-e\(seq)".utf8), value: value)
            case .none: return KafkaRecord(topic: "push.events", key: nil, value: value)
            }
        })
    }

    /// Seq `seq` of user `u-USER`: an increment of 1 with the alert `nSEQ`.
    static func eventValue(user: Int, seq: Int) -> [UInt8] {
        Array("{\"id\":\"u\(user)-e\(seq)\",\"user\":\"u-\(user)\",\"seq\":\(seq),\"badge\":{\"increment\":1},\"apns\":{\"payload\":{\"aps\":{\"alert\":\"n\(seq)\"}}}}".utf8)
    }

    func produce(_ records: [KafkaRecord]) async throws {
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        for record in records { _ = try await producer.enqueue(record) }
        try await producer.flush()
        await producer.close()
    }

    /// Every record of `push.results`, read to its end.
    func results() async throws -> [PublishedResult] {
        let results = Mutex<[PublishedResult]>([])
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        _ = try await reader.readToEnd((0..<resultPartitions).map { TopicPartition("push.results", Int32($0)) }) { message in
            let decoded = try? JSONDecoder().decode(PublishedResult.self, from: Data(message.value ?? []))
            results.withLock { $0.append(decoded ?? PublishedResult(eventID: "(unreadable)", status: "(unreadable)")) }
        }
        return results.withLock { $0 }
    }

    /// Waits (at most `timeout`) until `push.results` holds a result for each of `count` distinct (event, device) pairs.
    func waitForResults(_ count: Int, timeout: Duration = .seconds(120)) async throws -> Bool {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while ContinuousClock.now < deadline {
            let distinct = Set(try await results().map { "\($0.eventID) \($0.token ?? "")" })
            if distinct.count >= count { return true }
            try await Task.sleep(for: .milliseconds(500))
        }
        return false
    }

    /// Records readable in `push.badge-state` and offsets written to it, both within the same offset range (a
    /// running relay writes on meanwhile): fewer records than offsets once the broker has compacted it.
    func changelogSize() async throws -> (records: Int, offsets: Int) {
        let partitions = (0..<partitionCount).map { TopicPartition("push.badge-state", Int32($0)) }
        let admin = try KafkaAdmin(configuration: kafka, logger: logger)
        var offsets = 0
        var from: [TopicPartition: Int64] = [:]
        var through: [TopicPartition: Int64] = [:]
        for partition in partitions {
            let watermarks = try await admin.watermarks(of: partition)
            offsets += Int(watermarks.high - watermarks.low)
            guard watermarks.high > watermarks.low else { continue }
            from[partition] = watermarks.low
            through[partition] = watermarks.high - 1
        }
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        let records = try await reader.readToEnd(Array(from.keys), from: from, through: through) { _ in }
        return (records, offsets)
    }

    /// The checks every scenario ends with, once every relay has stopped (so nothing more can be published):
    /// each of seqs 1...`seqs` of every user has exactly one `delivered` result per device; each device got
    /// exactly one notification per seq, with badges 1...`seqs` in order (none applied twice, none re-sent:
    /// every `apns-id` once); every user's last `push.badge-state` record is badge `seqs` at seq `seqs`.
    /// Every (event, device) once, delivered; each device's badges 1...`seqs`, or with `replayedCounts` (a
    /// hand-over that handed back events whose changes were already stored: the next owner sends them with the
    /// user's current count, documented) one per event, never going down and ending at `seqs`.
    func expectExactlyOnce(seqs: Int, replayedCounts: Bool = false, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let userEvents = Set((0..<users).flatMap { user in (1...seqs).map { "u\(user)-e\($0)" } })
        let results = try await results().filter { userEvents.contains($0.eventID) }
        let expected = users * seqs * devicesPerUser
        let perPair = Dictionary(grouping: results, by: { "\($0.eventID) \($0.token ?? "-")" })
        let repeated = perPair.filter { $0.value.count > 1 }
        #expect(results.count == expected, "results: \(results.count) of \(expected)", sourceLocation: sourceLocation)
        #expect(perPair.count == expected, "distinct (event, device) results: \(perPair.count) of \(expected)", sourceLocation: sourceLocation)
        #expect(repeated.isEmpty, "results published twice: \(repeated.count), e.g. \(repeated.keys.sorted().prefix(4))", sourceLocation: sourceLocation)
        let notDelivered = results.filter { $0.status != "delivered" }
        #expect(notDelivered.isEmpty, "not delivered: \(notDelivered.prefix(4))", sourceLocation: sourceLocation)

        let deliveries = simulator.allDeliveries()
        let sentTwice = Dictionary(grouping: deliveries, by: \.apnsID).filter { $0.value.count > 1 }
        #expect(deliveries.count == expected, "notifications accepted by APNs: \(deliveries.count) of \(expected)", sourceLocation: sourceLocation)
        #expect(sentTwice.isEmpty, "notifications sent twice (same apns-id): \(sentTwice.count), e.g. \(sentTwice.values.compactMap { $0.first.map { "\($0.token.suffix(10)) badge \($0.badge ?? -1)" } }.sorted().prefix(4))", sourceLocation: sourceLocation)
        let wrongBadges = allTokens.compactMap { token -> String? in
            let badges = simulator.deliveries(for: token).compactMap(\.badge)
            let expected = replayedCounts ? badges.count == seqs && badges == badges.sorted() && badges.last == seqs : badges == Array(1...seqs)
            return expected ? nil : "\(token.suffix(10)): \(badges)"
        }
        #expect(wrongBadges.isEmpty, "devices whose badges are not 1...\(seqs): \(wrongBadges.count), e.g. \(wrongBadges.prefix(4))", sourceLocation: sourceLocation)

        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        let changelog = try await lastBadgeStates(reader, partitions: partitionCount)
        let wrongCounts = changelog.filter { !($0.value.contains("\"badge\":\(seqs),") && $0.value.contains("\"seq\":\(seqs),")) }
        #expect(changelog.count == users, "users in push.badge-state: \(changelog.count) of \(users)", sourceLocation: sourceLocation)
        #expect(wrongCounts.isEmpty, "users whose last badge state is not \(seqs) at seq \(seqs): \(wrongCounts.count), e.g. \(wrongCounts.sorted { $0.key < $1.key }.prefix(4))", sourceLocation: sourceLocation)
    }

    /// Checks what the relays wrote against the topics' schemas, then stops the simulator, the front and the broker.
    func stop(sourceLocation: SourceLocation = #_sourceLocation) async throws {
        await expectWrittenRecordsMatchSchemas(kafka, sourceLocation: sourceLocation)
        await simulator.shutdown()
        await front?.close()
        try await broker.stop()
        if ProcessInfo.processInfo.environment["KEEP_RUN_TEST_DIR"] == nil {
            try? FileManager.default.removeItem(atPath: directory)
        } else {
            print("broker test directory: \(directory), broker: \(broker.directory)")
        }
    }
}

@Suite("apns-relay run against a real broker process (noida-db)", .serialized)
struct BrokerProcessTests {
    @Test("the relay creates its topics (badge state and devices compacted, badge state paired with events); events in, one result per (event, device) out; SIGTERM exits 0 with every offset committed")
    func topicsAndEndToEnd() async throws {
        let fixture = try await BrokerRelayFixture.start(users: 20, devicesPerUser: 2)
        let relay = try fixture.startRelay("relay")
        #expect(await relay.waitFor("partitions assigned"), "\(relay.output.suffix(3_000))")

        let admin = try KafkaAdmin(configuration: fixture.kafka, logger: fixture.logger)
        for topic in BrokerRelayFixture.topics {
            let partitions = try await admin.partitionCount(of: topic)
            #expect(partitions == BrokerRelayFixture.partitions, "\(topic): \(partitions.map(String.init) ?? "missing")")
            let configs = try await admin.topicConfigs(of: topic)
            let compacted = topic == "push.badge-state" || topic == "push.devices"
            let policy = configs["cleanup.policy"]
            #expect(policy == KafkaTopicConfig(value: compacted ? "compact" : "delete", isSetOnTopic: compacted), "\(topic): cleanup.policy \(String(describing: policy))")
        }

        // The relay follows push.devices; a registration produced now may be read after the first events, so this
        // run registers first and lets the relay read them before any event: a second relay, started afterwards.
        #expect(await relay.stopGracefully(), "\(relay.output.suffix(3_000))")
        try await fixture.registerDevices()
        let seqs = 5
        for seq in 1...seqs { try await fixture.produceEvents(seq: seq) }
        try await fixture.produce([KafkaRecord(topic: "push.events", key: Array("bad-1".utf8), value: Array("{broken".utf8))])
        let second = try fixture.startRelay("relay2")
        let expected = fixture.users * seqs * fixture.devicesPerUser
        #expect(try await fixture.waitForResults(expected + 1), "\(second.output.suffix(3_000))")
        #expect(await second.stopGracefully(), "\(second.output.suffix(3_000))")

        // The malformed event: a dead letter and an `invalid` result; the rest exactly once.
        let results = try await fixture.results()
        let invalid = results.filter { $0.eventID == "bad-1" }
        #expect(invalid.map(\.status) == ["invalid"], "\(invalid)")
        let reader = try KafkaPartitionReader(configuration: fixture.kafka, logger: fixture.logger)
        let deadLetters = try await keyCounts(reader, topic: "push.dlq", partitions: BrokerRelayFixture.partitions)
        #expect(deadLetters == ["bad-1": 1])
        #expect(results.count == expected + 1)
        try await fixture.expectExactlyOnce(seqs: seqs)

        // Stopped gracefully: every partition of push.events committed up to its end, in the broker.
        let offsets = try await committedEventOffsets(fixture)
        for partition in 0..<BrokerRelayFixture.partitions {
            let end = try await admin.watermarks(of: TopicPartition("push.events", Int32(partition))).high
            // A partition no event reached has nothing to commit.
            #expect(offsets[partition] ?? 0 == end, "push.events[\(partition)]: committed \(offsets[partition].map(String.init) ?? "nothing"), end \(end)")
        }
        // What the relay wrote meets the published schemas (every fixture checks as it stops; here, that it read them).
        let checked = await expectWrittenRecordsMatchSchemas(fixture.kafka)
        #expect(checked[.results] ?? 0 >= fixture.users * fixture.devicesPerUser * seqs && checked[.badgeState] ?? 0 >= fixture.users, "\(checked)")
        try await fixture.stop()
    }

    @Test("SIGTERM under load exits 0; a new process continues exactly: no event applied twice, nothing re-sent, one result per (event, device)")
    func gracefulStopAndRestart() async throws {
        let fixture = try await BrokerRelayFixture.start(users: 100, devicesPerUser: 2)
        try await fixture.createTopicsThenRegisterDevices()
        let seqs = 10
        for seq in 1...seqs { try await fixture.produceEvents(seq: seq) }
        let total = fixture.users * seqs * fixture.devicesPerUser
        // A stop finishes what is in flight within 60% of its 10 s budget: a small window and APNs answering in 1 s (at
        // most 100 answers a second) leave work for the next process.
        fixture.simulator.addFault(.delay(.seconds(1)), count: nil)
        let window = ["APNS_RELAY_RELAY_MAX_IN_FLIGHT": "100"]

        let first = try fixture.startRelay("first", environment: window)
        #expect(await waitUntil(timeout: .seconds(60)) { fixture.simulator.deliveryCount >= total / 4 }, "\(first.output.suffix(3_000))")
        #expect(await first.stopGracefully(), "\(first.output.suffix(3_000))")
        let deliveredByFirst = fixture.simulator.deliveryCount
        #expect(deliveredByFirst < total, "the first was stopped with work left (it delivered \(deliveredByFirst) of \(total))")

        let second = try fixture.startRelay("second", environment: window)
        #expect(try await fixture.waitForResults(total), "\(second.output.suffix(3_000))")
        #expect(await second.stopGracefully(), "\(second.output.suffix(3_000))")
        // APNs slower than the relay: the first applied and stored events it had not sent when it stopped; the second
        // sends each once, with the user's count as stored (documented), never an older one.
        try await fixture.expectExactlyOnce(seqs: seqs, replayedCounts: true)
        try await fixture.stop()
    }

    @Test("push.badge-state is compacted by the broker; a new process restores from the compacted changelog and continues every user's count exactly")
    func compactionThenRestore() async throws {
        let fixture = try await BrokerRelayFixture.start(users: 30, devicesPerUser: 1)
        try await fixture.createTopicsThenRegisterDevices()
        // What an operator tunes on a compacted topic: segments that roll after 0.5 s (the broker compacts only
        // segments no longer written) and compaction as soon as anything is dirty. The relay set the policy.
        let admin = try KafkaAdmin(configuration: fixture.kafka, logger: fixture.logger)
        let compaction = ["cleanup.policy": "compact", "segment.ms": "500", "min.cleanable.dirty.ratio": "0.01"]
        try await admin.alterTopicConfigs(of: "push.badge-state", to: compaction)
        let configs = try await admin.topicConfigs(of: "push.badge-state")
        #expect(compaction.allSatisfy { configs[$0.key] == KafkaTopicConfig(value: $0.value, isSetOnTopic: true) }, "\(configs.filter { $0.value.isSetOnTopic })")

        // Rounds of one event per user until the broker has compacted the changelog: fewer records left than offsets written.
        let first = try fixture.startRelay("first")
        var seq = 0
        var changelog = (records: 0, offsets: 0)
        let compactedBy = ContinuousClock.now.advanced(by: .seconds(120))
        while changelog.records >= changelog.offsets && ContinuousClock.now < compactedBy {
            seq += 1
            try await fixture.produceEvents(seq: seq)
            #expect(try await fixture.waitForResults(fixture.users * seq * fixture.devicesPerUser), "\(first.output.suffix(3_000))")
            changelog = try await fixture.changelogSize()
        }
        #expect(await first.stopGracefully(), "\(first.output.suffix(3_000))")
        changelog = try await fixture.changelogSize()
        #expect(changelog.records < changelog.offsets, "compacted after \(seq) rounds: \(changelog.records) records at \(changelog.offsets) offsets")

        // The next owner restores from what compaction left: every count continues where it was.
        let second = try fixture.startRelay("second")
        for next in seq + 1...seq + 2 { try await fixture.produceEvents(seq: next) }
        #expect(try await fixture.waitForResults(fixture.users * (seq + 2) * fixture.devicesPerUser), "\(second.output.suffix(3_000))")
        #expect(await second.stopGracefully(), "\(second.output.suffix(3_000))")
        #expect(second.output.contains("badge state restored"))
        try await fixture.expectExactlyOnce(seqs: seq + 2)
        try await fixture.stop()
    }

    @Test("a second process joins the group while one device of each user is slow: partitions move gracefully, nothing applied or sent twice, every (event, device) one result")
    func gracefulHandOver() async throws {
        let fixture = try await BrokerRelayFixture.start(users: 10, devicesPerUser: 2)
        try await fixture.createTopicsThenRegisterDevices()
        // Each user's second device answers after 1 s: at the hand-over its notifications are in flight and queued.
        for user in 0..<fixture.users {
            fixture.simulator.addFault(.delay(.seconds(1)), token: fixture.token(user: user, device: 1), count: nil)
        }
        let seqs = 6
        for seq in 1...seqs { try await fixture.produceEvents(seq: seq) }
        let total = fixture.users * seqs * fixture.devicesPerUser

        let first = try fixture.startRelay("first")
        #expect(await waitUntil(timeout: .seconds(60)) { fixture.simulator.deliveryCount >= fixture.users * 2 }, "\(first.output.suffix(3_000))")
        let second = try fixture.startRelay("second")
        #expect(await second.waitFor("badge state restored"), "the second took partitions over: \(second.output.suffix(3_000))")
        #expect(first.output.contains("partitions handed over"), "the first handed partitions over: \(first.output.suffix(3_000))")
        #expect(fixture.simulator.deliveryCount < total, "handed over with work left")
        #expect(try await fixture.waitForResults(total), "\(first.output.suffix(2_000))\n\(second.output.suffix(2_000))")
        #expect(await second.stopGracefully(), "\(second.output.suffix(3_000))")
        #expect(await first.stopGracefully(), "\(first.output.suffix(3_000))")
        try await fixture.expectExactlyOnce(seqs: seqs, replayedCounts: true)
        try await fixture.stop()
    }

    @Test("the broker is stopped and started again (same data, same port) while the relay is idle; later events flow through exactly once")
    func brokerRestartWhileIdle() async throws {
        let fixture = try await BrokerRelayFixture.start(users: 20, devicesPerUser: 2)
        try await fixture.createTopicsThenRegisterDevices()
        let relay = try fixture.startRelay("relay")
        try await fixture.produceEvents(seq: 1)
        #expect(try await fixture.waitForResults(fixture.users * fixture.devicesPerUser), "\(relay.output.suffix(3_000))")

        // Idle: results published, then the relay's last markers and commit written and saved by the broker.
        #expect(await fixture.broker.waitUntilSaved(), "the broker's data file keeps changing")
        try await fixture.broker.stop()
        try fixture.broker.start()
        // The broker keeps no group across a restart: the relay's assignment is lost and it joins again. The next
        // events are produced once it has (events that meet a stale assignment are another scenario).
        #expect(await waitUntil(timeout: .seconds(60)) { relay.output.components(separatedBy: "partitions assigned; restoring").count == 3 },
                "the relay joined the group again: \(relay.output.suffix(3_000))")
        for seq in 2...3 { try await fixture.produceEvents(seq: seq) }
        #expect(try await fixture.waitForResults(fixture.users * 3 * fixture.devicesPerUser), "\(relay.output.suffix(3_000))")
        #expect(relay.process.isRunning, "the relay rode the broker restart out")
        #expect(await relay.stopGracefully(), "\(relay.output.suffix(3_000))")
        try await fixture.expectExactlyOnce(seqs: 3)
        try await fixture.stop()
    }

    /// The relay group's committed offsets of push.events, asked of the broker by a consumer of that group (it
    /// joins the group, which no relay is in any more, and commits nothing).
    private func committedEventOffsets(_ fixture: BrokerRelayFixture) async throws -> [Int: Int64] {
        let consumer = try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(kafka: fixture.kafka, groupID: "apns-relay", topics: ["push.events"]), logger: fixture.logger)
        let committed = try await consumer.committed((0..<BrokerRelayFixture.partitions).map { TopicPartition("push.events", Int32($0)) })
        await consumer.close()
        return Dictionary(uniqueKeysWithValues: committed.compactMap { partition, offset in offset.map { (Int(partition.partition), $0) } })
    }
}
