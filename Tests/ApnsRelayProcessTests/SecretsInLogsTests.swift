import APNs
import APNsSimulator
import Crypto
import Foundation
import Kafka
import Logging
import Testing
#if canImport(FoundationNetworking)
import FoundationNetworking
import TestSupport
#endif

/// Contract guarantee 6: secrets (the .p8 key, the PKCS#12 password, JWTs, the SASL password) never
/// appear in logs at any level, in `check-config` output or in `/metrics`; device tokens in logs are
/// shortened. The relay binary runs at trace level against the simulator, with librdkafka's own
/// configuration and security debug output switched on.
@Suite("Secrets and tokens stay out of logs and metrics", .serialized)
struct SecretsInLogsTests {
    static let saslPassword = "kafka-Sasl-Pa55-7Q1x"
    static let p12Password = "p12-Bundle-Pa55-W9z"
    /// Any JWT: three base64url parts, the first a JSON object (`eyJ` = `{"`).
    static var jwtPattern: Regex<Substring> { #/eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/# }
    /// A whole device token (64 hex digits or more).
    static var fullTokenPattern: Regex<Substring> { #/[0-9a-fA-F]{64}/# }

    static func token(_ index: Int) -> String { String(repeating: String(format: "%02x", 0xd0 + index), count: 32) }

    /// Everything one run needs: a cluster with the topics, a scratch directory, devices and events.
    struct Bench {
        let cluster: EmbeddedKafka
        let kafka: KafkaConfiguration
        let directory: String
        let logger: Logger

        init() throws {
            var logger = Logger(label: "secrets-test")
            logger.logLevel = .error
            self.logger = logger
            cluster = try EmbeddedKafka(brokers: 1, logger: logger)
            for topic in RelayProcessFixture.topics {
                try cluster.createTopic(topic, partitions: 1)
            }
            kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)
            directory = scratchPath("secrets-test")
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }

        /// Registers devices 0...3 (one of them twice, the second time unreadably) and sends one event per user.
        func produceWork() async throws {
            let producer = try KafkaProducer(configuration: kafka, logger: logger)
            for index in 0..<4 {
                _ = try await producer.enqueue(KafkaRecord(topic: "push.devices", key: Array(SecretsInLogsTests.token(index).utf8),
                    value: Array(#"{"user":"u-\#(index)","topic":"com.example.app","environment":"production","registered_at":1}"#.utf8)))
            }
            // An unreadable registration: the relay logs it with the token shortened.
            _ = try await producer.enqueue(KafkaRecord(topic: "push.devices", key: Array(SecretsInLogsTests.token(9).utf8), value: Array("not json".utf8)))
            for index in 0..<4 {
                _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-\(index)".utf8),
                    value: Array(#"{"id":"e-\#(index)","user":"u-\#(index)","seq":1,"badge":{"increment":1},"apns":{"payload":{"aps":{"alert":"hi"}}}}"#.utf8)))
            }
            try await producer.flush()
            await producer.close()
        }

        /// The configuration file: trace level, SASL settings (unused by the PLAINTEXT mock, but parsed,
        /// validated and handed to librdkafka), librdkafka's own debug output, and `auth`.
        func writeConfig(simulator: APNsSimulator, auth: String, format: String) throws -> String {
            let yaml = """
                kafka:
                  brokers: \(cluster.bootstrapServers)
                  properties:
                    session.timeout.ms: 6000
                    heartbeat.interval.ms: 500
                    sasl.mechanism: PLAIN
                    sasl.username: relay
                    sasl.password: \(SecretsInLogsTests.saslPassword)
                    debug: conf,security,generic
                apns:
                  endpoint: 127.0.0.1:\(simulator.http2Port)
                  ca_file: \(simulator.certificates.caPath)
                  topic: com.example.app
                  auth:
                \(auth)
                relay:
                  http_port: 0
                  shutdown_timeout_s: 10
                  reorder_window_ms: 100
                log:
                  level: trace
                  format: \(format)
                """
            return try write(yaml, named: "relay-\(format).yaml")
        }

        func write(_ text: String, named name: String) throws -> String {
            let path = "\(directory)/\(name)"
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }

        /// Runs the relay until `done`, reads `/metrics`, stops it
        /// with SIGTERM; returns the whole log and the metrics page.
        func run(config: String, simulator: APNsSimulator, until done: () -> Bool) async throws -> (log: String, metrics: String) {
            let logPath = "\(directory)/\(UUID().uuidString).log"
            let relay = try startRelay(["run", "--config", config], log: logPath)
            let deadline = ContinuousClock.now.advanced(by: .seconds(90))
            while !done() && relay.isRunning && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
            }
            var metrics = ""
            let listening = try String(contentsOfFile: logPath, encoding: .utf8).split(separator: "\n").first { $0.contains("ops endpoint listening") }
            if let line = listening, let address = line.firstMatch(of: #/\d+\.\d+\.\d+\.\d+:(\d+)/#) {
                let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(address.1)/metrics")!)
                metrics = String(decoding: data, as: UTF8.self)
            }
            kill(relay.processIdentifier, SIGTERM)
            while relay.isRunning { try await Task.sleep(for: .milliseconds(50)) }
            #expect(relay.terminationStatus == 0)
            return (try String(contentsOfFile: logPath, encoding: .utf8), metrics)
        }
    }

    /// What must never show up in `text`, whatever it is.
    static func expectNoSecrets(_ text: String, _ what: String, secrets: [String]) {
        for secret in secrets {
            #expect(!text.contains(secret), "\(what) contains a secret (\(secret.prefix(6))…)")
        }
        #expect(text.firstMatch(of: jwtPattern) == nil, "\(what) contains a JWT: \(text.firstMatch(of: jwtPattern).map { String($0.output.prefix(12)) } ?? "")…")
        #expect(text.firstMatch(of: fullTokenPattern) == nil, "\(what) contains a whole device token: \(text.firstMatch(of: fullTokenPattern).map { String($0.output.prefix(12)) } ?? "")…")
    }

    @Test("token auth (.p8 key, JWTs) and SASL: nothing secret in a trace-level log, check-config or /metrics; tokens shortened")
    func tokenAuthentication() async throws {
        let bench = try Bench()
        defer { bench.cluster.stop() }
        let key = P256.Signing.PrivateKey()
        let keyPEM = key.pemRepresentation
        try keyPEM.write(toFile: "\(bench.directory)/AuthKey.p8", atomically: true, encoding: .utf8)
        var options = SimulatorOptions()
        options.certDirectory = "\(bench.directory)/certs"
        options.jwtPublicKeyPEM = key.publicKey.pemRepresentation
        options.jwtKeyID = "ABCDE12345"
        let simulator = try await APNsSimulator.start(options)
        // One token's first attempt loses its connection, so the supervisor logs that attempt (with the token);
        // another is refused for good.
        simulator.addFault(.closeConnection, token: Self.token(1))
        simulator.markBad(Self.token(2))
        try await bench.produceWork()
        let config = try bench.writeConfig(simulator: simulator, auth: """
                key_file: \(bench.directory)/AuthKey.p8
                key_id: ABCDE12345
                team_id: TEAM123456
            """, format: "text")

        // Four events: three delivered (one on its second attempt), one refused.
        let (log, metrics) = try await bench.run(config: config, simulator: simulator) {
            Set(simulator.allDeliveries().map(\.token)).count >= 3 && simulator.requestCount >= 4
        }
        await simulator.shutdown()
        // A lost connection may take other in-flight requests with it; they are sent again (same apns-id).
        let delivered = Set(simulator.allDeliveries().map(\.token))
        #expect(delivered == [Self.token(0), Self.token(1), Self.token(3)], "the relay delivered (log: \(log.suffix(2_000)))")

        let keyBody = keyPEM.split(separator: "\n").filter { !$0.hasPrefix("-----") }.map(String.init)
        let secrets = [Self.saslPassword, key.rawRepresentation.base64EncodedString()] + keyBody
        Self.expectNoSecrets(log, "the trace-level log", secrets: secrets)
        Self.expectNoSecrets(metrics, "/metrics", secrets: secrets)
        #expect(metrics.contains("# TYPE"), "/metrics was read")
        // The metrics the README's operations section promises are exported.
        for name in ["apns_relay_events_consumed_total", "apns_relay_notifications_total", "apns_relay_event_to_answer_seconds",
                     "apns_relay_records_in_flight", "apns_relay_notifications_in_flight", "apns_relay_consumption_paused",
                     "apns_connections", "apns_jwt_renewals_total"] {
            #expect(metrics.contains(name), "\(name) in /metrics")
        }
        // The log talks about tokens, shortened: the unreadable registration and the lost attempt.
        #expect(log.contains("unreadable device registration skipped") && log.contains(APNsDeviceToken.shortened(hex: Self.token(9))))
        #expect(log.contains("APNs attempt failed") && log.contains(APNsDeviceToken.shortened(hex: Self.token(1))))
        // librdkafka's debug output was on, so its configuration dump was checked too.
        #expect(log.contains("sasl.username") || log.contains("CONF"), "librdkafka's configuration debug output is part of the log")

        let checked = try runRelay(["check-config", "--config", config])
        #expect(checked.status == 0, "\(checked.output)")
        #expect(checked.output.contains("kafka.properties.sasl.password: <redacted>"))
        Self.expectNoSecrets(checked.output, "check-config", secrets: secrets)
    }

    @Test("PKCS#12 auth: its password is nowhere in a trace-level JSON log, check-config or /metrics",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")))
    func pkcs12Authentication() async throws {
        let bench = try Bench()
        defer { bench.cluster.stop() }
        var options = SimulatorOptions()
        options.certDirectory = "\(bench.directory)/certs"
        options.requireClientCertificate = true
        let simulator = try await APNsSimulator.start(options)
        let certificates = simulator.certificates
        let p12 = "\(bench.directory)/client.p12"
        let openssl = Process()
        openssl.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        openssl.arguments = ["pkcs12", "-export", "-in", certificates.clientCertificatePath, "-inkey", certificates.clientKeyPath,
                             "-out", p12, "-passout", "pass:\(Self.p12Password)"]
        try openssl.run()
        openssl.waitUntilExit()
        #expect(openssl.terminationStatus == 0)
        try await bench.produceWork()
        let config = try bench.writeConfig(simulator: simulator, auth: """
                p12_file: \(p12)
                p12_password: \(Self.p12Password)
            """, format: "json")

        let (log, metrics) = try await bench.run(config: config, simulator: simulator) { simulator.deliveryCount >= 4 }
        await simulator.shutdown()
        #expect(simulator.deliveryCount == 4, "the relay delivered (log: \(log.suffix(2_000)))")
        let clientKeyBody = try String(contentsOfFile: certificates.clientKeyPath, encoding: .utf8)
            .split(separator: "\n").filter { !$0.hasPrefix("-----") }.map(String.init)
        let secrets = [Self.p12Password, Self.saslPassword] + clientKeyBody
        Self.expectNoSecrets(log, "the trace-level log", secrets: secrets)
        Self.expectNoSecrets(metrics, "/metrics", secrets: secrets)
        #expect(metrics.contains("# TYPE"), "/metrics was read")

        let checked = try runRelay(["check-config", "--config", config])
        #expect(checked.status == 0, "\(checked.output)")
        #expect(checked.output.contains("apns.auth.p12_password: <redacted>"))
        Self.expectNoSecrets(checked.output, "check-config", secrets: secrets)
        // A YAML error on the password's own line names the position, not the line.
        let broken = try String(contentsOfFile: config, encoding: .utf8)
            .replacingOccurrences(of: "p12_password: \(Self.p12Password)", with: "p12_password: \(Self.p12Password): x")
        let refused = try runRelay(["check-config", "--config", try bench.write(broken, named: "broken.yaml")])
        #expect(refused.status == 2)
        #expect(refused.output.contains("is not valid YAML: ") && refused.output.contains("mapping values are not allowed"), "\(refused.output)")
        Self.expectNoSecrets(refused.output, "a YAML syntax error", secrets: secrets)
        // A password from the environment is not echoed either.
        let wrong = try runRelay(["check-config", "--config", config], environment: ["APNS_RELAY_APNS_AUTH_P12_PASSWORD": "Wrong-Pa55-Kq8"])
        Self.expectNoSecrets(wrong.output, "check-config with a wrong password", secrets: secrets + ["Wrong-Pa55-Kq8"])
    }
}
