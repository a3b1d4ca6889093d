import APNsSimulator
import Crypto
import Foundation
import FoundationNetworking
import Kafka
import Logging
import Synchronization
import Testing
import TestSupport


/// Credentials rotated while `apns-relay run` sends: a .p8 key with its key id, and a client certificate, each
/// swapped in its Secret-style directory mid-run.
@Suite("apns-relay run: credentials rotated without a restart", .serialized)
struct CredentialRotationProcessTests {
    /// Errors only: the relay's own log is what the tests read.
    static var logger: Logger {
        var logger = Logger(label: "rotation-test")
        logger.logLevel = .error
        return logger
    }

    static func token(_ index: Int) -> String { String(format: "%064x", 0xC0FFEE00 + index) }

    static func events(_ range: Range<Int>) -> [(key: String, value: String)] {
        range.map { ("r\($0)", #"{"id":"r\#($0)","tokens":["\#(token($0))"],"apns":{"payload":{"aps":{"alert":"n\#($0)"}}}}"#) }
    }

    /// Runs the relay with the fixture's `relay.yaml`, produces `before` events and, once they are answered, each
    /// swap in turn: `swap` changes the files, then half its events are produced at once (racing the relay's next
    /// check) and half 3 s later (after it had time to reload), and all are waited for. Returns the results by event
    /// id, the `/metrics` and `/readyz` pages, and the log.
    static func run(_ fixture: RelayProcessFixture, before: Range<Int>, swaps: [(events: Range<Int>, swap: () throws -> Void)],
                    logger: Logger) async throws -> (results: [String: String], metrics: String, readiness: String, log: String) {
        let logPath = "\(fixture.directory)/rotation.log"
        let relay = try startRelay(["run", "--config", fixture.configPath], log: logPath)
        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: fixture.cluster.bootstrapServers), logger: logger)
        func results() async throws -> [String: String] { try await lastValues(reader, topic: "push.results") }
        func waitFor(_ count: Int) async throws -> [String: String] {
            var seen: [String: String] = [:]
            let doneBy = ContinuousClock.now.advanced(by: .seconds(60))
            while ContinuousClock.now < doneBy && relay.isRunning {
                seen = try await results()
                if seen.count >= count { break }
                try await Task.sleep(for: .milliseconds(200))
            }
            return seen
        }
        try await fixture.produce(events(before), logger: logger)
        var expected = before.count
        var all = try await waitFor(expected)
        for (after, swap) in swaps {
            try swap()
            let middle = after.lowerBound + after.count / 2
            try await fixture.produce(events(after.lowerBound..<middle), logger: logger)
            try await Task.sleep(for: .seconds(3))
            try await fixture.produce(events(middle..<after.upperBound), logger: logger)
            expected += after.count
            all = try await waitFor(expected)
        }
        let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        var metrics = "", readiness = ""
        if let line = log.split(separator: "\n").first(where: { $0.contains("ops endpoint listening") }),
           let address = line.firstMatch(of: #/\d+\.\d+\.\d+\.\d+:(\d+)/#) {
            metrics = String(decoding: try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(address.1)/metrics")!).0, as: UTF8.self)
            readiness = String(decoding: try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(address.1)/readyz")!).0, as: UTF8.self)
        }
        kill(relay.processIdentifier, SIGTERM)
        while relay.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        #expect(relay.terminationStatus == 0)
        return (all, metrics, readiness, (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "")
    }

    @Test("a .p8 key and its key id swapped in their Secret: the next JWT is the new key's, nothing fails; a file that no longer parses keeps the key in use")
    func tokenKeyRotated() async throws {
        let logger = Self.logger
        let old = P256.Signing.PrivateKey(), new = P256.Signing.PrivateKey()
        let keys = [("KEYOLD0001", old), ("KEYNEW0001", new)].map {
            SimulatorProviderKey(keyID: $0.0, teamID: "TEAM123456", publicKeyPEM: $0.1.publicKey.pemRepresentation, topics: ["com.example.app"])
        }
        let fixture = try await RelayProcessFixture.start(relayLines: "  http_port: 0\n  shutdown_timeout_s: 10\n", providerKeys: keys)
        let secret = try MountedSecret(directory: "\(fixture.directory)/secret", files: [
            "AuthKey.p8": Data(old.pemRepresentation.utf8), "key-id": Data("KEYOLD0001\n".utf8),
        ])
        let config = try String(contentsOfFile: fixture.configPath, encoding: .utf8)
            .replacingOccurrences(of: "    key_file: \(fixture.directory)/key.p8\n    key_id: ABCDE12345\n",
                                  with: "    key_file: \(secret.path("AuthKey.p8"))\n    key_id_file: \(secret.path("key-id"))\n")
            .replacingOccurrences(of: "relay:\n", with: "  credential_check_interval_s: 1\nrelay:\n")
        try config.write(toFile: fixture.configPath, atomically: true, encoding: .utf8)

        // The new key, then (a file that no longer parses) a broken one.
        let rotated = try await Self.run(fixture, before: 0..<5, swaps: [
            (5..<25, { try secret.update(["AuthKey.p8": Data(new.pemRepresentation.utf8), "key-id": Data("KEYNEW0001\n".utf8)]) }),
            (25..<35, { try secret.update(["AuthKey.p8": Data("not a key".utf8), "key-id": Data("KEYBROKEN1\n".utf8)]) }),
        ], logger: logger)
        #expect(rotated.results.count == 35, "\(rotated.log.suffix(3_000))")
        #expect(rotated.results.values.allSatisfy { $0.contains("\"status\":\"delivered\"") }, "\(rotated.results.values.filter { !$0.contains("delivered") })")
        let signers = fixture.simulator.allDeliveries().map { ($0.token, $0.authenticatedAs ?? "") }
        #expect(signers.filter { $0.1 == "key:KEYOLD0001" }.count >= 5)
        // Every notification produced after the relay's check is signed with the new key.
        for index in 15..<25 {
            #expect(fixture.simulator.deliveries(for: Self.token(index)).map(\.authenticatedAs) == ["key:KEYNEW0001"], "\(index)")
        }
        #expect(rotated.metrics.contains(#"apns_credential_info{credential="key:KEYOLD0001",in_use="key:KEYNEW0001"} 1"#),
                "\(rotated.metrics.split(separator: "\n").filter { $0.contains("apns_credential") })")
        #expect(rotated.metrics.contains(#"apns_credential_info{credential="key:KEYOLD0001",in_use="key:KEYOLD0001"} 0"#))
        #expect(rotated.metrics.contains(#"apns_credential_reloads_total{credential="key:KEYOLD0001"} 1"#))
        #expect(rotated.metrics.contains(#"apns_credential_loaded_timestamp_seconds{credential="key:KEYOLD0001"}"#))
        #expect(rotated.log.contains("APNs credential reloaded") && !rotated.log.contains("BEGIN PRIVATE KEY"))

        // The broken file: the new key stays in use, the error is logged and counted once, readiness holds.
        for index in 25..<35 {
            #expect(fixture.simulator.deliveries(for: Self.token(index)).map(\.authenticatedAs) == ["key:KEYNEW0001"], "\(index)")
        }
        #expect(rotated.metrics.contains(#"apns_credential_reload_failures_total{credential="key:KEYOLD0001"} 1"#))
        #expect(rotated.log.split(separator: "\n").filter { $0.contains("do not load") }.count == 1)
        #expect(rotated.readiness.hasPrefix("ready"), "\(rotated.readiness)")
        await fixture.stop()
    }

    @Test("a client certificate swapped in its Secret: open connections are replaced gracefully, new ones present the new certificate, nothing fails")
    func certificateRenewed() async throws {
        let logger = Self.logger
        let fixture = try await RelayProcessFixture.start(relayLines: "  http_port: 0\n  shutdown_timeout_s: 10\n")
        // A simulator that authenticates by client certificate: the shared one and the app's own, both of its CA.
        var options = SimulatorOptions()
        options.certDirectory = "\(fixture.directory)/cert-host"
        options.requireClientCertificate = true
        options.clientCertificateTopics = ["com.example.app"]
        let simulator = try await APNsSimulator.start(options)
        let certificates = simulator.certificates
        func files(_ certificate: String, _ key: String) throws -> [String: Data] {
            ["cert.pem": try Data(contentsOf: URL(fileURLWithPath: certificate)), "key.pem": try Data(contentsOf: URL(fileURLWithPath: key))]
        }
        let secret = try MountedSecret(directory: "\(fixture.directory)/secret",
                                       files: try files(certificates.clientCertificatePath, certificates.clientKeyPath))
        // One connection, checked each second; the certificate's files are the Secret's links.
        try """
            apns:
              credential_check_interval_s: 1
              connections: 1
              topic: com.example.app
              auth: {cert_file: \(secret.path("cert.pem")), private_key_file: \(secret.path("key.pem"))}
              endpoint: 127.0.0.1:\(simulator.http2Port)
              ca_file: \(certificates.caPath)
            kafka: {brokers: \(fixture.cluster.bootstrapServers)}
            relay: {http_port: 0, shutdown_timeout_s: 10}
            """.write(toFile: fixture.configPath, atomically: true, encoding: .utf8)

        let renewed = try await Self.run(fixture, before: 0..<5, swaps: [(5..<45, {
            try secret.update(try files(certificates.clientCertificatePath(forTopic: "com.example.app"),
                                        certificates.clientKeyPath(forTopic: "com.example.app")))
        })], logger: logger)
        #expect(renewed.results.count == 45, "\(renewed.log.suffix(3_000))")
        #expect(renewed.results.values.allSatisfy { $0.contains("\"status\":\"delivered\"") }, "\(renewed.results.values.filter { !$0.contains("delivered") })")
        for index in 0..<5 { #expect(simulator.deliveries(for: Self.token(index)).map(\.authenticatedAs) == ["certificate:*"]) }
        for index in 25..<45 {
            #expect(simulator.deliveries(for: Self.token(index)).map(\.authenticatedAs) == ["certificate:com.example.app"], "\(index)")
        }
        #expect(simulator.connectionsAccepted == 2, "one connection, replaced once: \(simulator.connectionsAccepted)")
        #expect(renewed.metrics.contains(#"apns_credential_reloads_total{credential="certificate:*"} 1"#),
                "\(renewed.metrics.split(separator: "\n").filter { $0.contains("apns_credential") })")
        #expect(renewed.log.contains("replacing the APNs connections"))
        await simulator.shutdown()
        await fixture.stop()
    }
}
