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
    FileManager.default.createFile(atPath: log, contents: nil)
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

@Suite("apns-relay run as a process", .serialized)
struct RunProcessTests {
    @Test("SIGTERM under load exits 0 in time; a restart finishes the rest; every event has a result, none applied twice")
    func sigtermAndRestart() async throws {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let cluster = try EmbeddedKafka(brokers: 1, logger: logger)
        defer { cluster.stop() }
        // The binary sees this mock as an external cluster; the mock has no CreateTopics, so the
        // topics exist beforehand, as an operator would create them.
        for topic in ["push.events", "push.badge-state", "push.devices", "push.results", "push.failed-tokens", "push.dlq"] {
            try cluster.createTopic(topic, partitions: 3)
        }
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)

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
              properties:
                session.timeout.ms: 6000
                heartbeat.interval.ms: 500
            apns:
              endpoint: 127.0.0.1:\(simulator.http2Port)
              ca_file: \(simulator.certificates.caPath)
              topic: com.example.app
              auth:
                key_file: \(directory)/key.p8
                key_id: ABCDE12345
                team_id: TEAM123456
            relay:
              http_port: 0
              shutdown_timeout_s: 10
              reorder_window_ms: 30000
            """
        try config.write(toFile: "\(directory)/relay.yaml", atomically: true, encoding: .utf8)

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
        let first = try startRelay(["run", "--config", "\(directory)/relay.yaml"], log: "\(directory)/run1.log")
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
        let second = try startRelay(["run", "--config", "\(directory)/relay.yaml"], log: "\(directory)/run2.log")
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
        await simulator.shutdown()
    }
}
