import APNs
import APNsSimulator
import Foundation
import Kafka
import Logging
import Synchronization
import Testing
import TestSupport

@Suite("The legacy interface from the command line", .serialized)
struct FeedbackCommandTests {
    @Test("apns-relay feedback: one poll, the dead tokens published as failed tokens with reason Feedback and the tuple's time; exit 0")
    func feedbackCommand() async throws {
        var logger = Logger(label: "feedback-test")
        logger.logLevel = .error
        let cluster = try EmbeddedKafka(brokers: 1, logger: logger)
        defer { cluster.stop() }
        try cluster.createTopic("push.failed-tokens", partitions: 1)
        let dead = [String(repeating: "a", count: 64): Int64(1_700_000_000_000), String(repeating: "b", count: 64): Int64(1_700_000_005_000)]
        var options = SimulatorOptions()
        options.certDirectory = scratchPath("feedback-test")
        options.binaryPort = 0
        options.feedbackPort = 0
        options.deadTokens = dead
        let simulator = try await APNsSimulator.start(options)
        let certificates = simulator.certificates
        let config = """
            kafka:
              brokers: \(cluster.bootstrapServers)
            apns:
              transport: binary
              endpoint: 127.0.0.1:\(simulator.binaryGatewayPort ?? 0)
              feedback_endpoint: 127.0.0.1:\(simulator.feedbackServicePort ?? 0)
              ca_file: \(certificates.caPath)
              auth:
                cert_file: \(certificates.clientCertificatePath)
                private_key_file: \(certificates.clientKeyPath)
            """
        let file = certificates.directory + "/relay.yaml"
        try config.write(toFile: file, atomically: true, encoding: .utf8)
        let first = try runRelay(["feedback", "--config", file])
        let second = try runRelay(["feedback", "--config", file])
        await simulator.shutdown()
        #expect(first.status == 0, "\(first.output)")
        #expect(first.output.contains("feedback: 2 dead token(s) published to push.failed-tokens"), "\(first.output)")
        #expect(second.status == 0, "\(second.output)")
        #expect(second.output.contains("feedback: 0 dead token(s)"), "the service reports a token once: \(second.output)")

        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
        let records = Mutex<[String: [UInt8]]>([:])
        _ = try await reader.readToEnd([TopicPartition("push.failed-tokens", 0)]) { message in
            guard let key = message.key, let value = message.value else { return }
            records.withLock { $0[String(decoding: key, as: UTF8.self)] = Array(value) }
        }
        let published = try records.withLock { $0 }.mapValues { try JSONSerialization.jsonObject(with: Data($0)) as? [String: Any] }
        #expect(Set(published.keys) == Set(dead.keys))
        for (token, since) in dead {
            #expect(published[token]??["reason"] as? String == "Feedback")
            #expect((published[token]??["since"] as? NSNumber)?.int64Value == since)
        }
        await expectWrittenRecordsMatchSchemas(KafkaConfiguration(bootstrapServers: cluster.bootstrapServers))
    }

    @Test("apns-relay simulator --binary-port --feedback-port serves the legacy ports and writes the client certificate")
    func simulatorLegacyPorts() throws {
        let directory = scratchPath("sim-cli")
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("apns-relay")
        let process = Process()
        process.executableURL = binary
        process.arguments = ["simulator", "--http2-port", "0", "--binary-port", "0", "--feedback-port", "0", "--cert-dir", directory]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        var banner = ""
        while !banner.contains("\n") {
            let data = pipe.fileHandleForReading.availableData
            if data.isEmpty { break }
            banner += String(decoding: data, as: UTF8.self)
        }
        process.terminate()
        process.waitUntilExit()
        #expect(banner.contains("(binary)"), "\(banner)")
        #expect(banner.contains("(feedback)"), "\(banner)")
        #expect(process.terminationStatus == 0)
        for name in ["ca.pem", "client.pem", "client.key"] {
            #expect(FileManager.default.fileExists(atPath: "\(directory)/\(name)"), "\(name)")
        }
        let usage = try runRelay(["simulator", "--binary-port", "70000"])
        #expect(usage.status == 2)
    }
}
