import APNs
import APNsSimulator
import Crypto
import Foundation
import Kafka
import Logging
import Synchronization
import Testing

/// Starts the built binary in the background.
func startRelay(_ arguments: [String], log: String) throws -> Process {
    let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("apns-relay")
    let process = Process()
    process.executableURL = binary
    process.arguments = arguments
    process.environment = ["PATH": "/usr/bin:/bin"]
    _ = FileManager.default.createFile(atPath: log, contents: nil)
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
    process.standardOutput = handle
    process.standardError = handle
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

    /// `kafkaLines` and `relayLines` are YAML lines under `kafka:` (after `brokers`) and `relay:`, indented.
    static func start(kafkaLines: String = "", relayLines: String) async throws -> RelayProcessFixture {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let cluster = try EmbeddedKafka(brokers: 1, logger: logger)
        for topic in ["push.events", "push.badge-state", "push.devices", "push.results", "push.failed-tokens", "push.dlq"] {
            try cluster.createTopic(topic, partitions: 3)
        }
        let key = P256.Signing.PrivateKey()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("run-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try key.pemRepresentation.write(toFile: "\(directory)/key.p8", atomically: true, encoding: .utf8)
        var options = SimulatorOptions()
        options.certDirectory = "\(directory)/certs"
        options.jwtPublicKeyPEM = key.publicKey.pemRepresentation
        options.jwtKeyID = "ABCDE12345"
        let simulator = try await APNsSimulator.start(options)
        let config = """
            kafka:
              brokers: \(cluster.bootstrapServers)
            \(kafkaLines)
            apns:
              endpoint: 127.0.0.1:\(simulator.http2Port)
              ca_file: \(simulator.certificates.caPath)
              topic: com.example.app
              auth:
                key_file: \(directory)/key.p8
                key_id: ABCDE12345
                team_id: TEAM123456
            relay:
            \(relayLines)
            """
        try config.write(toFile: "\(directory)/relay.yaml", atomically: true, encoding: .utf8)
        return RelayProcessFixture(cluster: cluster, simulator: simulator, directory: directory)
    }

    func stop() async {
        await simulator.shutdown()
        cluster.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

@Suite("apns-relay run as a process", .serialized)
struct RunProcessTests {
    @Test("SIGTERM under load exits 0 in time; a restart finishes the rest; every event has a result, none applied twice")
    func sigtermAndRestart() async throws {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(
            kafkaLines: """
                  properties:
                    session.timeout.ms: 6000
                    heartbeat.interval.ms: 500
                """,
            relayLines: """
                  http_port: 0
                  shutdown_timeout_s: 10
                  reorder_window_ms: 30000
                """)
        let (cluster, simulator, directory) = (fixture.cluster, fixture.simulator, fixture.directory)
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)

        let users = 300
        let eventsPerUser = 10
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        for user in 0..<users {
            let deviceToken = String(repeating: String(format: "%02x", user % 256), count: 31) + String(format: "%02x", user / 256)
            _ = try await producer.enqueue(KafkaRecord(topic: "push.devices", key: Array(deviceToken.utf8),
                value: Array("{\"user\":\"u-\(user)\",\"topic\":\"com.example.app\",\"environment\":\"production\",\"registered_at\":1}".utf8)))
        }
        try await producer.flush()
        for seq in 1...eventsPerUser {
            for user in 0..<users {
                _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8),
                    value: Array("{\"id\":\"u\(user)-e\(seq)\",\"user\":\"u-\(user)\",\"seq\":\(seq),\"badge\":{\"increment\":1},\"apns\":{\"payload\":{\"aps\":{\"alert\":\"n\(seq)\"}}}}".utf8)))
            }
        }
        try await producer.flush()
        await producer.close()
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
        kill(second.processIdentifier, SIGTERM)
        while second.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        #expect(second.terminationStatus == 0)
        #expect(distinct == total, "every event has a result (\(distinct) of \(total))")

        // No event applied twice: every user's changelog ends at 10 with seq 10, and each device's
        // badges never went down.
        let changelog = LastValues()
        _ = try await reader.readToEnd((0..<3).map { TopicPartition("push.badge-state", Int32($0)) }) { message in
            changelog.set(String(decoding: message.key ?? [], as: UTF8.self), String(decoding: message.value ?? [], as: UTF8.self))
        }
        let last = changelog.all
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
        // before the service group has installed its own handlers.
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
        try await Task.sleep(for: .seconds(1))
        #expect(relay.isRunning, "SIGTERM during startup does not kill the process outright")
        // Back up: startup completes and the group stops at once. Left down: the topic check gives up (10 s).
        if kafkaComesBack { try cluster.setBrokerUp(1) }

        let stoppedBy = ContinuousClock.now.advanced(by: .seconds(60))
        while relay.isRunning && ContinuousClock.now < stoppedBy { try await Task.sleep(for: .milliseconds(50)) }
        if relay.isRunning { relay.terminate() }
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(relay.terminationReason == .exit && relay.terminationStatus == 0, "exit \(relay.terminationReason == .exit ? "status" : "by signal") \(relay.terminationStatus)\n\(output.suffix(2_000))")
        let expectedLine = kafkaComesBack ? "stop signal received while starting" : "stopped while starting; startup had failed"
        #expect(output.contains(expectedLine), "\(output.suffix(2_000))")
        await fixture.stop()
    }
}
