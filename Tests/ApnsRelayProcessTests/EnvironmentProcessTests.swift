import APNsSimulator
import Crypto
import Foundation
import Kafka
import Logging
import Testing

@Suite("apns-relay run with production and sandbox hosts", .serialized)
struct EnvironmentProcessTests {
    @Test("a sandbox device's notifications go to apns.sandbox_endpoint: delivered, no failed token, still registered")
    func sandboxDeviceReachesSandboxHost() async throws {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(relayLines: "  http_port: 0\n  shutdown_timeout_s: 10\n")
        let (cluster, production, directory) = (fixture.cluster, fixture.simulator, fixture.directory)
        // A second simulator as the sandbox host, checking the same key's JWTs. Like Apple, each host refuses the
        // other environment's tokens with 400 BadDeviceToken.
        var options = SimulatorOptions()
        options.certDirectory = "\(directory)/sandbox-certs"
        options.jwtPublicKeyPEM = try P256.Signing.PrivateKey(pemRepresentation: String(contentsOfFile: "\(directory)/key.p8", encoding: .utf8))
            .publicKey.pemRepresentation
        options.jwtKeyID = "ABCDE12345"
        let sandbox = try await APNsSimulator.start(options)
        let productionDevice = String(repeating: "ab", count: 32)
        let sandboxDevice = String(repeating: "cd", count: 32)
        production.markBad(sandboxDevice)
        sandbox.markBad(productionDevice)
        // apns.ca_file may hold several trust anchors: each simulator has its own CA.
        let caFile = "\(directory)/both-cas.pem"
        try (production.certificates.caPEM + "\n" + sandbox.certificates.caPEM).write(toFile: caFile, atomically: true, encoding: .utf8)
        let config = try String(contentsOfFile: fixture.configPath, encoding: .utf8)
            .replacingOccurrences(of: "  endpoint: 127.0.0.1:\(production.http2Port)",
                                  with: "  production_endpoint: 127.0.0.1:\(production.http2Port)\n  sandbox_endpoint: 127.0.0.1:\(sandbox.http2Port)")
            .replacingOccurrences(of: production.certificates.caPath, with: caFile)
        try config.write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        #expect(config.contains("sandbox_endpoint") && !config.contains("  endpoint:"))

        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        for (device, environment) in [(productionDevice, "production"), (sandboxDevice, "sandbox")] {
            _ = try await producer.enqueue(KafkaRecord(topic: "push.devices", key: Array(device.utf8),
                value: Array("{\"user\":\"u-1\",\"topic\":\"com.example.app\",\"environment\":\"\(environment)\",\"registered_at\":1}".utf8)))
        }
        for seq in 1...2 {
            _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-1".utf8),
                value: Array("{\"id\":\"e\(seq)\",\"user\":\"u-1\",\"seq\":\(seq),\"badge\":{\"increment\":1},\"apns\":{\"payload\":{\"aps\":{\"alert\":\"n\(seq)\"}}}}".utf8)))
        }
        try await producer.flush()
        await producer.close()

        let relay = try startRelay(["run", "--config", fixture.configPath], log: "\(directory)/run.log")
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        let results = LastValues()
        let doneBy = ContinuousClock.now.advanced(by: .seconds(60))
        while ContinuousClock.now < doneBy && relay.isRunning {
            _ = try await reader.readToEnd((0..<3).map { TopicPartition("push.results", Int32($0)) }) { message in
                let value = String(decoding: message.value ?? [], as: UTF8.self)
                results.set(value, value)
            }
            if results.all.count >= 4 { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        kill(relay.processIdentifier, SIGTERM)
        while relay.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        let output = (try? String(contentsOfFile: "\(directory)/run.log", encoding: .utf8)) ?? ""
        #expect(relay.terminationStatus == 0, "\(output.suffix(2_000))")

        #expect(results.all.count == 4, "\(output.suffix(3_000))")
        #expect(results.all.keys.allSatisfy { $0.contains("\"status\":\"delivered\"") }, "\(results.all.keys.sorted())")
        #expect(sandbox.deliveries(for: sandboxDevice).compactMap(\.badge) == [1, 2], "the second event still targets it: not removed")
        #expect(production.deliveries(for: productionDevice).compactMap(\.badge) == [1, 2])
        #expect(production.deliveries(for: sandboxDevice).isEmpty && sandbox.deliveries(for: productionDevice).isEmpty)
        let failed = LastValues()
        _ = try await reader.readToEnd((0..<3).map { TopicPartition("push.failed-tokens", Int32($0)) }) { message in
            failed.set(String(decoding: message.key ?? [], as: UTF8.self), String(decoding: message.value ?? [], as: UTF8.self))
        }
        #expect(failed.all.isEmpty, "no token reported dead: \(failed.all)")
        await sandbox.shutdown()
        await fixture.stop()
    }
}
