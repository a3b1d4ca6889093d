import APNsSimulator
import Foundation
import Kafka
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

/// A relay process started by a test, its output in `log`.
struct RelayProcess {
    let process: Process
    let log: String

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
    let simulator: APNsSimulator
    let directory: String
    let users: Int
    let devicesPerUser: Int
    let logger: Logger
    var kafka: KafkaConfiguration { KafkaConfiguration(bootstrapServers: broker.bootstrapServers) }
    var configPath: String { "\(directory)/relay.yaml" }

    private init(broker: NoidaBroker, simulator: APNsSimulator, directory: String, users: Int, devicesPerUser: Int) {
        self.broker = broker
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
    static func start(users: Int, devicesPerUser: Int) async throws -> BrokerRelayFixture {
        let broker = try NoidaBroker()
        let (simulator, directory) = try await RelayProcessFixture.startSimulatorAndWriteConfig(
            brokers: broker.bootstrapServers,
            kafkaLines: RelayProcessFixture.shortGroupTimeouts,
            relayLines: """
                  http_port: 0
                  shutdown_timeout_s: 10
                  reorder_window_ms: 2000
                """)
        return BrokerRelayFixture(broker: broker, simulator: simulator, directory: directory, users: users, devicesPerUser: devicesPerUser)
    }

    func startRelay(_ name: String) throws -> RelayProcess {
        let log = "\(directory)/\(name).log"
        return RelayProcess(process: try ApnsRelayCLITests.startRelay(["run", "--config", configPath], log: log), log: log)
    }

    /// The six topics, as the relay names them by default.
    static let topics = ["push.events", "push.badge-state", "push.devices", "push.results", "push.failed-tokens", "push.dlq"]

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

    /// Produces seq `seq` of every user, in user order.
    func produceEvents(seq: Int) async throws {
        try await produce((0..<users).map { user in
            KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8),
                        value: Array("{\"id\":\"u\(user)-e\(seq)\",\"user\":\"u-\(user)\",\"seq\":\(seq),\"badge\":{\"increment\":1},\"apns\":{\"payload\":{\"aps\":{\"alert\":\"n\(seq)\"}}}}".utf8))
        })
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
        _ = try await reader.readToEnd((0..<Self.partitions).map { TopicPartition("push.results", Int32($0)) }) { message in
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

    /// The checks every scenario ends with, once every relay has stopped (so nothing more can be published):
    /// each of seqs 1...`seqs` of every user has exactly one `delivered` result per device; each device got
    /// exactly one notification per seq, with badges 1...`seqs` in order (none applied twice, none re-sent:
    /// every `apns-id` once); every user's last `push.badge-state` record is badge `seqs` at seq `seqs`.
    func expectExactlyOnce(seqs: Int, sourceLocation: SourceLocation = #_sourceLocation) async throws {
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
            return badges == Array(1...seqs) ? nil : "\(token.suffix(10)): \(badges)"
        }
        #expect(wrongBadges.isEmpty, "devices whose badges are not 1...\(seqs): \(wrongBadges.count), e.g. \(wrongBadges.prefix(4))", sourceLocation: sourceLocation)

        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        let changelog = try await lastBadgeStates(reader, partitions: Self.partitions)
        let wrongCounts = changelog.filter { !($0.value.contains("\"badge\":\(seqs),") && $0.value.contains("\"seq\":\(seqs),")) }
        #expect(changelog.count == users, "users in push.badge-state: \(changelog.count) of \(users)", sourceLocation: sourceLocation)
        #expect(wrongCounts.isEmpty, "users whose last badge state is not \(seqs) at seq \(seqs): \(wrongCounts.count), e.g. \(wrongCounts.sorted { $0.key < $1.key }.prefix(4))", sourceLocation: sourceLocation)
    }

    func stop() async throws {
        await simulator.shutdown()
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
            #expect(offsets[partition] == end, "push.events[\(partition)]: committed \(offsets[partition].map(String.init) ?? "nothing"), end \(end)")
        }
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
