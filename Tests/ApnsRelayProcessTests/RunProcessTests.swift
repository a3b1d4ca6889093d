import APNs
import APNsSimulator
import Crypto
import Foundation
import Kafka
import Logging
import Synchronization
import Testing
import TestSupport

/// Starts the built binary (or `executable`, which runs it) in the background; `environment` adds to a bare
/// PATH. The child starts with
/// no signal blocked, as an orchestrator starts it: Foundation's `Process` hands its child the spawning
/// thread's mask, and the test process's threads block SIGTERM and SIGINT, which would hide how the
/// relay handles a stop signal that comes early.
func startRelay(_ arguments: [String], log: String, environment: [String: String] = [:], executable: String? = nil) throws -> Process {
    let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("apns-relay")
    let process = Process()
    process.executableURL = executable.map { URL(fileURLWithPath: $0) } ?? binary
    process.arguments = arguments
    process.environment = ["PATH": "/usr/bin:/bin"].merging(environment) { _, added in added }
    _ = FileManager.default.createFile(atPath: log, contents: nil)
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
    process.standardOutput = handle
    process.standardError = handle
    var nothing = sigset_t()
    sigemptyset(&nothing)
    var previous = sigset_t()
    pthread_sigmask(SIG_SETMASK, &nothing, &previous)
    defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
    try process.run()
    return process
}

final class MessageCounter: Sendable {
    private let ids = Mutex<[String: Int]>([:])
    func add(_ id: String) { ids.withLock { $0[id, default: 0] += 1 } }
    var distinct: Int { ids.withLock { $0.count } }
}

final class LastValues: Sendable {
    private let values = Mutex<[String: String]>([:])
    func set(_ key: String, _ value: String) { values.withLock { $0[key] = value } }
    var all: [String: String] { values.withLock { $0 } }
}

/// What `apns-relay run` needs as a process: an embedded cluster with the relay's topics (the binary sees it as an
/// external cluster; the mock has no CreateTopics, so the topics exist beforehand, as an operator would create
/// them), an in-process simulator that checks the relay's JWTs, and a directory with the key and `relay.yaml`.
struct RelayProcessFixture {
    let cluster: EmbeddedKafka
    let simulator: APNsSimulator
    let directory: String
    var configPath: String { "\(directory)/relay.yaml" }

    /// The relay's topics, as an operator creates them beforehand.
    static let topics = ["push.events", "push.badge-state", "push.devices", "push.results", "push.failed-tokens", "push.dlq", "push.wrong-environment"]

    /// `kafkaLines`, `apnsLines` and `relayLines` are YAML lines under `kafka:` (after `brokers`), `apns:` and `relay:`,
    /// indented. `broadcastManagement` also serves the simulator's channel management API (`apns.production_management_endpoint`).
    /// `simulatorEnvironment` is the APNs environment the simulator plays (``SimulatorOptions/environment``).
    static func start(kafkaLines: String = "", apnsLines: String = "", relayLines: String, broadcastManagement: Bool = false,
                      simulatorEnvironment: APNsEnvironment? = nil, providerKeys: [SimulatorProviderKey] = []) async throws -> RelayProcessFixture {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let cluster = try EmbeddedKafka(brokers: 1, logger: logger)
        for topic in topics {
            try cluster.createTopic(topic, partitions: 3)
        }
        let (simulator, directory) = try await startSimulatorAndWriteConfig(
            brokers: cluster.bootstrapServers, kafkaLines: kafkaLines, apnsLines: apnsLines, relayLines: relayLines,
            broadcastManagement: broadcastManagement, simulatorEnvironment: simulatorEnvironment, providerKeys: providerKeys)
        return RelayProcessFixture(cluster: cluster, simulator: simulator, directory: directory)
    }

    /// A new directory with the relay's APNs key and `relay.yaml` (for `brokers`), and an in-process simulator
    /// that checks the relay's JWTs (with `providerKeys`, those keys' instead of the relay's key). The YAML lines are as
    /// ``start(kafkaLines:apnsLines:relayLines:broadcastManagement:simulatorEnvironment:providerKeys:)``'s.
    static func startSimulatorAndWriteConfig(
        brokers: String, kafkaLines: String = "", apnsLines: String = "", relayLines: String, broadcastManagement: Bool = false,
        simulatorEnvironment: APNsEnvironment? = nil, providerKeys: [SimulatorProviderKey] = []
    ) async throws -> (APNsSimulator, directory: String) {
        let key = P256.Signing.PrivateKey()
        let directory = scratchPath("run-test")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try key.pemRepresentation.write(toFile: "\(directory)/key.p8", atomically: true, encoding: .utf8)
        var options = SimulatorOptions()
        options.certDirectory = "\(directory)/certs"
        options.jwtPublicKeyPEM = key.publicKey.pemRepresentation
        options.jwtKeyID = "ABCDE12345"
        if broadcastManagement { options.broadcastManagementPort = 0 }
        options.environment = simulatorEnvironment
        options.providerKeys = providerKeys
        // The keys' ids are theirs, not the relay's one key's.
        if !providerKeys.isEmpty { options.jwtKeyID = nil }
        let simulator = try await APNsSimulator.start(options)
        let managementLine = simulator.broadcastManagementPort.map { "\n  production_management_endpoint: 127.0.0.1:\($0)" } ?? ""
        let config = """
            kafka:
              brokers: \(brokers)
            \(kafkaLines)
            apns:
              endpoint: 127.0.0.1:\(simulator.http2Port)\(managementLine)
              ca_file: \(simulator.certificates.caPath)
              topic: com.example.app
              auth:
                key_file: \(directory)/key.p8
                key_id: ABCDE12345
                team_id: TEAM123456
            \(apnsLines)
            relay:
            \(relayLines)
            """
        try config.write(toFile: "\(directory)/relay.yaml", atomically: true, encoding: .utf8)
        return (simulator, directory)
    }

    /// Kafka properties that let a stopped member's partitions move in seconds.
    static let shortGroupTimeouts = """
          properties:
            session.timeout.ms: 6000
            heartbeat.interval.ms: 500
        """

    /// Registers one device per user (`u-0`...), then produces seqs 1...`eventsPerUser` for every
    /// user, seq by seq (each an increment with an alert), then `malformed` unreadable events.
    func produceUsers(_ users: Int, eventsPerUser: Int, malformed: Int = 0, logger: Logger) async throws {
        try await register((0..<users).map { (Self.deviceToken(user: $0), "u-\($0)") }, logger: logger)
        try await produceSeqs(Array(1...eventsPerUser), users: users, logger: logger)
        guard malformed > 0 else { return }
        try await produce((1...malformed).map { ("bad-\($0)", "{broken \($0)") }, logger: logger)
    }

    /// The device token `produceUsers` registers for a user (`variant` 1... for a user's further devices).
    static func deviceToken(user: Int, variant: Int = 0) -> String {
        let repeated = String(format: "%02x", user % 256)
        guard variant > 0 else { return String(repeating: repeated, count: 31) + String(format: "%02x", user / 256) }
        return "ff" + String(repeating: repeated, count: 29) + String(format: "%02x%02x", variant, user / 256)
    }

    /// Registers each (token, user) in `push.devices` (production environment, the fixture's topic).
    func register(_ devices: [(token: String, user: String)], logger: Logger) async throws {
        try await produce(devices.map { ($0.token, "{\"user\":\"\($0.user)\",\"topic\":\"com.example.app\",\"environment\":\"production\",\"registered_at\":1}") },
                          topic: "push.devices", logger: logger)
    }

    /// Produces, seq by seq, each user's event with that seq (an increment with an alert, id `u<user>-e<seq>`).
    func produceSeqs(_ seqs: [Int], users: Int, logger: Logger) async throws {
        try await produce(seqs.flatMap { seq in
            (0..<users).map { user in
                ("u-\(user)", "{\"id\":\"u\(user)-e\(seq)\",\"user\":\"u-\(user)\",\"seq\":\(seq),\"badge\":{\"increment\":1},\"apns\":{\"payload\":{\"aps\":{\"alert\":\"n\(seq)\"}}}}")
            }
        }, logger: logger)
    }

    /// Produces these (key, value) records to `topic`, in order, and waits for them; `headers` are the headers of the
    /// records with those keys.
    func produce(_ records: [(key: String, value: String)], topic: String = "push.events", headers: [String: [KafkaHeader]] = [:],
                 logger: Logger) async throws {
        let producer = try KafkaProducer(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
        for record in records {
            _ = try await producer.enqueue(KafkaRecord(topic: topic, key: Array(record.key.utf8), value: Array(record.value.utf8),
                                                       headers: headers[record.key] ?? []))
        }
        try await producer.flush()
        await producer.close()
    }

    /// Checks what the relays wrote against the topics' schemas (the cluster brought back up first if a test took it
    /// down), then stops the simulator and the cluster.
    func stop(sourceLocation: SourceLocation = #_sourceLocation) async {
        try? cluster.setBrokerUp(1)
        await expectWrittenRecordsMatchSchemas(KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), sourceLocation: sourceLocation)
        await simulator.shutdown()
        cluster.stop()
        if ProcessInfo.processInfo.environment["KEEP_RUN_TEST_DIR"] == nil { try? FileManager.default.removeItem(atPath: directory) }
    }
}

/// Every user's last `push.badge-state` value (the relay's own records, progress markers and layout records, whose
/// keys start with 0xFF, left out; a user deleted where it was after a move counts only where it lives). A user
/// with a live state in two partitions (a split count) has the value `split: ...` naming both.
func lastBadgeStates(_ reader: KafkaPartitionReader, partitions: Int = 3) async throws -> [String: String] {
    let changelog = LastValues()
    _ = try await reader.readToEnd((0..<partitions).map { TopicPartition("push.badge-state", Int32($0)) }) { message in
        guard let key = message.key, key.first != 0xFF else { return }
        changelog.set("\(message.partition) \(String(decoding: key, as: UTF8.self))", message.value.map { String(decoding: $0, as: UTF8.self) } ?? "")
    }
    var users: [String: String] = [:]
    for (entry, value) in changelog.all where !value.isEmpty {
        let user = String(entry.drop { $0 != " " }.dropFirst())
        users[user] = users[user].map { "split: \($0) and \(value)" } ?? value
    }
    return users
}

/// The last value of each key in `topic` (as text), read to its end.
func lastValues(_ reader: KafkaPartitionReader, topic: String, partitions: Int = 3) async throws -> [String: String] {
    let values = Mutex<[String: String]>([:])
    _ = try await reader.readToEnd((0..<partitions).map { TopicPartition(topic, Int32($0)) }) { message in
        values.withLock { $0[String(decoding: message.key ?? [], as: UTF8.self)] = String(decoding: message.value ?? [], as: UTF8.self) }
    }
    return values.withLock { $0 }
}

/// Counts of each key in `topic`, read to its end.
func keyCounts(_ reader: KafkaPartitionReader, topic: String, partitions: Int = 3) async throws -> [String: Int] {
    let counts = Mutex<[String: Int]>([:])
    _ = try await reader.readToEnd((0..<partitions).map { TopicPartition(topic, Int32($0)) }) { message in
        counts.withLock { $0[String(decoding: message.key ?? [], as: UTF8.self), default: 0] += 1 }
    }
    return counts.withLock { $0 }
}

@Suite("apns-relay run as a process", .serialized)
struct RunProcessTests {
    /// `firstTransactions`: the first relay's `kafka.transactions`; `off` is a rolling upgrade from a relay without
    /// transactions (the second, with them, restores what the first wrote and takes its partitions over).
    @Test("a second instance joins under load, then the first stops gracefully: every result present, nothing sent or dead-lettered twice; also as a rolling upgrade from a relay without transactions",
          arguments: ["on", "off"])
    func scaleOutThenGracefulStop(firstTransactions: String) async throws {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(
            kafkaLines: RelayProcessFixture.shortGroupTimeouts,
            relayLines: """
                  http_port: 0
                  shutdown_timeout_s: 10
                  reorder_window_ms: 2000
                """)
        let (cluster, simulator, directory) = (fixture.cluster, fixture.simulator, fixture.directory)
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)
        let users = 300
        let eventsPerUser = 10
        let malformed = 11
        try await fixture.produceUsers(users, eventsPerUser: eventsPerUser, malformed: malformed, logger: logger)
        let total = users * eventsPerUser + malformed

        // Eager, by key: librdkafka's mock cluster answers a commit during a rebalance ILLEGAL_GENERATION, which
        // librdkafka takes as the loss of the whole assignment; an eager revoke commits before the rejoin. The
        // default, cooperative-sticky, is tested on noida-db (RebalanceProcessTests).
        let eager = ["APNS_RELAY_KAFKA_PROPERTIES_PARTITION_ASSIGNMENT_STRATEGY": "range,roundrobin"]
        let first = try startRelay(["run", "--config", fixture.configPath], log: "\(directory)/first.log",
                                   environment: eager.merging(["APNS_RELAY_KAFKA_TRANSACTIONS": firstTransactions]) { $1 })
        let busyBy = ContinuousClock.now.advanced(by: .seconds(60))
        while simulator.deliveryCount < total / 10 && ContinuousClock.now < busyBy && first.isRunning {
            try await Task.sleep(for: .milliseconds(50))
        }
        // The second joins under load: the group rebalances, partitions move to it.
        let second = try startRelay(["run", "--config", fixture.configPath], log: "\(directory)/second.log", environment: eager)
        let joinedBy = ContinuousClock.now.advanced(by: .seconds(30))
        while ContinuousClock.now < joinedBy,
              !((try? String(contentsOfFile: "\(directory)/second.log", encoding: .utf8)) ?? "").contains("partitions assigned") {
            try await Task.sleep(for: .milliseconds(100))
        }
        try await Task.sleep(for: .seconds(1))
        #expect(simulator.deliveryCount < users * eventsPerUser, "the first stops under load, not after the work was done")
        kill(first.processIdentifier, SIGTERM)
        while first.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        #expect(first.terminationStatus == 0)

        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        let doneBy = ContinuousClock.now.advanced(by: .seconds(120))
        var results: [String: Int] = [:]
        while ContinuousClock.now < doneBy {
            results = try await keyCounts(reader, topic: "push.results")
            if results.count >= total { break }
            try await Task.sleep(for: .milliseconds(500))
        }
        try await Task.sleep(for: .seconds(2))  // anything sent twice would arrive by now
        // The first run may have finished everything in its graceful stop, and the results are then
        // complete before the second is even started: signal it once it handles signals (its
        // "starting" line), as the startup test does; before that a signal ends the process outright.
        let secondLog = "\(directory)/run2.log"
        let startedBy = ContinuousClock.now.advanced(by: .seconds(30))
        while second.isRunning && ContinuousClock.now < startedBy,
            !((try? String(contentsOfFile: secondLog, encoding: .utf8)) ?? "").contains("starting")
        {
            try await Task.sleep(for: .milliseconds(20))
        }
        kill(second.processIdentifier, SIGTERM)
        while second.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        #expect(second.terminationStatus == 0)
        results = try await keyCounts(reader, topic: "push.results")
        if ProcessInfo.processInfo.environment["KEEP_RUN_TEST_DIR"] != nil {
            print("run-test directory: \(directory)")
            var expected = Set((0..<users).flatMap { user in (1...eventsPerUser).map { "u\(user)-e\($0)" } })
            expected.formUnion((1...malformed).map { "bad-\($0)" })
            print("missing results: \(expected.subtracting(results.keys).sorted())")
            print("repeated results: \(results.filter { $0.value > 1 }.keys.sorted().prefix(40))")
            let twice = Dictionary(grouping: simulator.allDeliveries(), by: \.apnsID).filter { $0.value.count > 1 }
            print("sent twice: \(twice.values.compactMap { $0.first?.collapseID }.sorted().prefix(60))")
        }
        #expect(results.count == total, "every event has a result (\(results.count) of \(total))")
        let repeatedResults = results.filter { $0.value > 1 }
        #expect(repeatedResults.isEmpty, "results published twice: \(repeatedResults.count), e.g. \(repeatedResults.keys.sorted().prefix(3))")
        let deliveries = simulator.allDeliveries()
        let sentTwice = Dictionary(grouping: deliveries, by: \.apnsID).filter { $0.value.count > 1 }
        #expect(sentTwice.isEmpty, "notifications sent twice: \(sentTwice.count)")
        #expect(deliveries.count == users * eventsPerUser)
        let deadLetters = try await keyCounts(reader, topic: "push.dlq")
        #expect(deadLetters.values.reduce(0, +) == malformed, "dead letters: \(deadLetters)")
        let last = try await lastBadgeStates(reader)
        #expect(last.count == users)
        #expect(last.values.allSatisfy { $0.contains("\"badge\":\(eventsPerUser),") && $0.contains("\"seq\":\(eventsPerUser),") })
        await fixture.stop()
    }

    @Test("SIGTERM under load exits 0 in time; a restart finishes the rest; every event has a result, none applied twice")
    func sigtermAndRestart() async throws {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(
            kafkaLines: RelayProcessFixture.shortGroupTimeouts,
            relayLines: """
                  http_port: 0
                  shutdown_timeout_s: 10
                  reorder_window_ms: 30000
                """)
        let (cluster, simulator, directory) = (fixture.cluster, fixture.simulator, fixture.directory)
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)

        let users = 300
        let eventsPerUser = 10
        try await fixture.produceUsers(users, eventsPerUser: eventsPerUser, logger: logger)
        let total = users * eventsPerUser

        // First run: stop it with SIGTERM while it is busy.
        let first = try startRelay(["run", "--config", fixture.configPath], log: "\(directory)/run1.log")
        let busyBy = ContinuousClock.now.advanced(by: .seconds(60))
        while simulator.deliveryCount < total / 5 && ContinuousClock.now < busyBy && first.isRunning {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(simulator.deliveryCount < total, "stopped under load, not after the work was done")
        let signalled = ContinuousClock.now
        first.interrupt()  // SIGINT; SIGTERM follows the same path
        kill(first.processIdentifier, SIGTERM)
        while first.isRunning && ContinuousClock.now - signalled < .seconds(30) { try await Task.sleep(for: .milliseconds(50)) }
        #expect(!first.isRunning)
        #expect(first.terminationStatus == 0, "exit status \(first.terminationStatus)")
        #expect(ContinuousClock.now - signalled < .seconds(20), "stopped within the shutdown budget")

        // Second run: finishes the rest.
        let second = try startRelay(["run", "--config", fixture.configPath], log: "\(directory)/run2.log")
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        let doneBy = ContinuousClock.now.advanced(by: .seconds(120))
        var distinct = 0
        while ContinuousClock.now < doneBy {
            let pass = MessageCounter()
            _ = try await reader.readToEnd([TopicPartition("push.results", 0), TopicPartition("push.results", 1), TopicPartition("push.results", 2)]) { message in
                pass.add(String(decoding: message.key ?? [], as: UTF8.self))
            }
            distinct = pass.distinct
            if distinct >= total { break }
            try await Task.sleep(for: .milliseconds(500))
        }
        // The first run may have finished everything in its graceful stop, and the results are then
        // complete before the second is even started: signal it once it handles signals (its
        // "starting" line), as the startup test does; before that a signal ends the process outright.
        let secondLog = "\(directory)/run2.log"
        let startedBy = ContinuousClock.now.advanced(by: .seconds(30))
        while second.isRunning && ContinuousClock.now < startedBy,
            !((try? String(contentsOfFile: secondLog, encoding: .utf8)) ?? "").contains("starting")
        {
            try await Task.sleep(for: .milliseconds(20))
        }
        kill(second.processIdentifier, SIGTERM)
        while second.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        #expect(second.terminationStatus == 0)
        #expect(distinct == total, "every event has a result (\(distinct) of \(total))")

        // No event applied twice: every user's changelog ends at 10 with seq 10, and each device's
        // badges never went down.
        let last = try await lastBadgeStates(reader)
        #expect(last.count == users)
        #expect(last.values.allSatisfy { $0.contains("\"badge\":\(eventsPerUser),") && $0.contains("\"seq\":\(eventsPerUser),") })
        for delivery in Set(simulator.allDeliveries().map(\.token)) {
            let badges = simulator.deliveries(for: delivery).compactMap(\.badge)
            #expect(badges == badges.sorted(), "\(delivery.prefix(8)): \(badges)")
        }
        await fixture.stop()
    }

    @Test(
        "SIGTERM while starting up (Kafka not reachable yet) stops cleanly with exit 0, whether startup then completes or fails",
        arguments: [true, false])
    func sigtermDuringStartup(kafkaComesBack: Bool) async throws {
        let fixture = try await RelayProcessFixture.start(relayLines: """
                  http_port: 0
                  shutdown_timeout_s: 10
                """)
        let (cluster, directory) = (fixture.cluster, fixture.directory)

        // With the broker down, the relay cannot get past its topic check: the signal lands during startup,
        // which runs inside the service group and is given up at the signal.
        try cluster.setBrokerDown(1)
        let log = "\(directory)/run.log"
        let relay = try startRelay(["run", "--config", fixture.configPath], log: log)
        let startedBy = ContinuousClock.now.advanced(by: .seconds(30))
        while relay.isRunning && ContinuousClock.now < startedBy,
            !((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("starting")
        {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(relay.isRunning, "the relay is still starting")
        kill(relay.processIdentifier, SIGTERM)
        // The startup's Kafka questions are cancellable: the stop is quick, and is the relay's own (exit 0 below, not
        // death by the signal).
        try await Task.sleep(for: .seconds(1))
        // Back up or left down, startup is given up and the process stops with exit 0.
        if kafkaComesBack { try cluster.setBrokerUp(1) }

        let stoppedBy = ContinuousClock.now.advanced(by: .seconds(60))
        while relay.isRunning && ContinuousClock.now < stoppedBy { try await Task.sleep(for: .milliseconds(50)) }
        if relay.isRunning { relay.terminate() }
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(relay.terminationReason == .exit && relay.terminationStatus == 0, "exit \(relay.terminationReason == .exit ? "status" : "by signal") \(relay.terminationStatus)\n\(output.suffix(2_000))")
        #expect(output.contains("stop signal received while starting"), "\(output.suffix(2_000))")
        // The binary runs on jemalloc with its compiled-in options (the heap line comes first).
        #expect(output.contains("allocator=jemalloc 5.") && output.contains("2 arenas, background thread on"), "\(output.prefix(2_000))")
        await fixture.stop()
    }
}
