import APNsSimulator
import Crypto
import Foundation
import FoundationNetworking
import Kafka
import Logging
import Testing

@Suite("apns-relay run with several apps and teams", .serialized)
struct AppsProcessTests {
    @Test("apps of two teams through one relay: each notification signed by its own team, one JWT and one pool per key; an unknown topic is rejected with NoCredentialForTopic")
    func appsOfTwoTeams() async throws {
        var logger = Logger(label: "apps-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(relayLines: "  http_port: 0\n  shutdown_timeout_s: 10\n")
        let directory = fixture.directory
        // A simulator that knows two teams, as Apple does: a JWT is checked against the key its kid names, must
        // come from that key's team, and may push only to the team's apps. Wrong routing is refused.
        let teamA = P256.Signing.PrivateKey()
        let teamB = P256.Signing.PrivateKey()
        try teamA.pemRepresentation.write(toFile: "\(directory)/team-a.p8", atomically: true, encoding: .utf8)
        try teamB.pemRepresentation.write(toFile: "\(directory)/team-b.p8", atomically: true, encoding: .utf8)
        var options = SimulatorOptions()
        options.certDirectory = "\(directory)/teams-certs"
        options.providerKeys = [
            SimulatorProviderKey(keyID: "KEYAAAAAAA", teamID: "TEAMAAAAAA", publicKeyPEM: teamA.publicKey.pemRepresentation, topics: ["com.a.one", "com.a.two"]),
            SimulatorProviderKey(keyID: "KEYBBBBBBB", teamID: "TEAMBBBBBB", publicKeyPEM: teamB.publicKey.pemRepresentation, topics: ["com.b.app"]),
        ]
        let simulator = try await APNsSimulator.start(options)
        try """
            kafka:
              brokers: \(fixture.cluster.bootstrapServers)
            apns:
              endpoint: 127.0.0.1:\(simulator.http2Port)
              ca_file: \(simulator.certificates.caPath)
              connections: 1
              apps:
                - topic: com.a.one
                  key_file: \(directory)/team-a.p8
                  key_id: KEYAAAAAAA
                  team_id: TEAMAAAAAA
                - topic: com.a.two
                  key_file: \(directory)/team-a.p8
                  key_id: KEYAAAAAAA
                  team_id: TEAMAAAAAA
                - topic: com.b.app
                  key_file: \(directory)/team-b.p8
                  key_id: KEYBBBBBBB
                  team_id: TEAMBBBBBB
            relay:
              http_port: 0
              shutdown_timeout_s: 10
            """.write(toFile: fixture.configPath, atomically: true, encoding: .utf8)

        let topics = ["com.a.one", "com.a.two", "com.b.app", "com.unknown.app"]
        let (all, metrics) = try await Self.deliver(topics: topics, fixture: fixture, logger: logger)
        #expect(all.count == topics.count, "\(all)")
        for index in 0..<3 {
            #expect(all["e\(index)"]?.contains("\"status\":\"delivered\"") == true, "\(topics[index]): \(all["e\(index)"] ?? "no result")")
            #expect(simulator.deliveries(for: Self.token(index)).map(\.topic) == [topics[index]])
        }
        let unknown = all["e3"] ?? ""
        #expect(unknown.contains("\"status\":\"rejected\"") && unknown.contains("\"reason\":\"NoCredentialForTopic\""), "\(unknown)")
        #expect(unknown.contains("\"attempts\":0"), "\(unknown)")
        #expect(simulator.deliveries(for: Self.token(3)).isEmpty)
        // One pool per key, of `apns.connections: 1` each: the two apps of team A's key share a connection (and its JWT).
        #expect(simulator.connectionsAccepted == 2, "\(simulator.connectionsAccepted) connections")
        #expect(metrics.contains("apns_relay_notifications_without_credential_total 1"), "\(metrics.split(separator: "\n").filter { $0.contains("credential") })")
        #expect(metrics.contains("credential=\"key:KEYAAAAAAA\"") && metrics.contains("credential=\"key:KEYBBBBBBB\""))
        await simulator.shutdown()
        await fixture.stop()
    }

    @Test("certificate apps: connections per certificate, each app's notifications under its own certificate; expiry exported per app")
    func appsWithTheirOwnCertificates() async throws {
        var logger = Logger(label: "apps-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(relayLines: "")
        let directory = fixture.directory
        // Like Apple's per-app certificates: a connection authenticated by one app's certificate may push only to
        // that app, so a notification sent on the other app's connection is refused.
        var options = SimulatorOptions()
        options.certDirectory = "\(directory)/app-certs"
        options.requireClientCertificate = true
        options.clientCertificateTopics = ["com.c.one", "com.c.two"]
        let simulator = try await APNsSimulator.start(options)
        let certificates = simulator.certificates
        try """
            kafka:
              brokers: \(fixture.cluster.bootstrapServers)
            apns:
              endpoint: 127.0.0.1:\(simulator.http2Port)
              ca_file: \(certificates.caPath)
              connections: 1
              apps:
                - topic: com.c.one
                  cert_file: \(certificates.clientCertificatePath(forTopic: "com.c.one"))
                  private_key_file: \(certificates.clientKeyPath(forTopic: "com.c.one"))
                - topic: com.c.two
                  cert_file: \(certificates.clientCertificatePath(forTopic: "com.c.two"))
                  private_key_file: \(certificates.clientKeyPath(forTopic: "com.c.two"))
            relay:
              http_port: 0
              shutdown_timeout_s: 10
            """.write(toFile: fixture.configPath, atomically: true, encoding: .utf8)

        let topics = ["com.c.one", "com.c.two", "com.c.one"]
        let (all, metrics) = try await Self.deliver(topics: topics, fixture: fixture, logger: logger)
        #expect(all.count == topics.count, "\(all)")
        for index in topics.indices {
            #expect(all["e\(index)"]?.contains("\"status\":\"delivered\"") == true, "\(topics[index]): \(all["e\(index)"] ?? "no result")")
            #expect(simulator.deliveries(for: Self.token(index)).map(\.topic) == [topics[index]])
        }
        #expect(simulator.connectionsAccepted == 2, "one connection per certificate: \(simulator.connectionsAccepted)")
        for topic in ["com.c.one", "com.c.two"] {
            #expect(metrics.contains("apns_certificate_expiry_seconds{topic=\"\(topic)\"}"), "expiry of \(topic)")
            #expect(metrics.contains("apns_certificate_not_after_timestamp_seconds{topic=\"\(topic)\"}"), "expiry date of \(topic)")
        }
        await simulator.shutdown()
        await fixture.stop()
    }

    static func token(_ index: Int) -> String { String(repeating: String(format: "%02x", 0xa0 + index), count: 32) }

    /// Produces one event per topic (event `eN` for user `u-N`, token ``token(_:)`` N), runs the relay until every
    /// event has a result, reads `/metrics`, stops it with SIGTERM (exit 0 expected); returns the results by
    /// event id and the metrics page.
    static func deliver(topics: [String], fixture: RelayProcessFixture, logger: Logger) async throws -> (results: [String: String], metrics: String) {
        let kafka = KafkaConfiguration(bootstrapServers: fixture.cluster.bootstrapServers)
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        for (index, topic) in topics.enumerated() {
            _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-\(index)".utf8), value: Array("""
                {"id":"e\(index)","user":"u-\(index)","seq":1,"tokens":["\(token(index))"],"apns":{"topic":"\(topic)","payload":{"aps":{"alert":"hi"}}}}
                """.utf8)))
        }
        try await producer.flush()
        await producer.close()

        let logPath = "\(fixture.directory)/run-\(UUID().uuidString).log"
        let relay = try startRelay(["run", "--config", fixture.configPath], log: logPath)
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        let results = LastValues()
        let doneBy = ContinuousClock.now.advanced(by: .seconds(60))
        while ContinuousClock.now < doneBy && relay.isRunning {
            _ = try await reader.readToEnd((0..<3).map { TopicPartition("push.results", Int32($0)) }) { message in
                results.set(String(decoding: message.key ?? [], as: UTF8.self), String(decoding: message.value ?? [], as: UTF8.self))
            }
            if results.all.count >= topics.count { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        var metrics = ""
        let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        if let line = log.split(separator: "\n").first(where: { $0.contains("ops endpoint listening") }),
           let address = line.firstMatch(of: #/\d+\.\d+\.\d+\.\d+:(\d+)/#) {
            metrics = String(decoding: try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(address.1)/metrics")!).0, as: UTF8.self)
        }
        kill(relay.processIdentifier, SIGTERM)
        while relay.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        let output = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        #expect(relay.terminationStatus == 0, "\(output.suffix(2_000))")
        #expect(results.all.count == topics.count, "\(output.suffix(3_000))")
        return (results.all, metrics)
    }
}
