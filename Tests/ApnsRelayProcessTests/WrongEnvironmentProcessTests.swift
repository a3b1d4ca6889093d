import APNs
import APNsSimulator
import Crypto
import Foundation
import FoundationNetworking
import Kafka
import Logging
import Synchronization
import Testing

/// The relay as a process between two simulated APNs hosts, production and sandbox, that answer as Apple's do: each
/// refuses the other environment's tokens with 400 BadDeviceToken, and the sandbox names every answer's delivery-log
/// entry in `apns-unique-id`.
struct TwoHostsFixture {
    let fixture: RelayProcessFixture
    let sandbox: APNsSimulator
    var production: APNsSimulator { fixture.simulator }

    /// `tokens`: the environment each token belongs to, known to both hosts. `apnsLines` go under `apns:`. With
    /// `providerKeys` both hosts check those keys (and their limits) instead of the relay's one key, and `apps`
    /// (YAML lines under `apns:`) replace the single `apns.auth` credential.
    static func start(tokens: [String: APNsEnvironment], apnsLines: String = "", providerKeys: [SimulatorProviderKey] = [],
                      apps: String? = nil) async throws -> TwoHostsFixture {
        let fixture = try await RelayProcessFixture.start(apnsLines: apnsLines, relayLines: "  http_port: 0\n  shutdown_timeout_s: 10\n",
                                                          simulatorEnvironment: .production, providerKeys: providerKeys)
        let directory = fixture.directory
        for (token, environment) in tokens { fixture.simulator.register(token, environment: environment) }
        var options = SimulatorOptions()
        options.certDirectory = "\(directory)/sandbox-certs"
        options.jwtPublicKeyPEM = try P256.Signing.PrivateKey(pemRepresentation: String(contentsOfFile: "\(directory)/key.p8", encoding: .utf8))
            .publicKey.pemRepresentation
        options.jwtKeyID = "ABCDE12345"
        options.environment = .sandbox
        options.tokenEnvironments = tokens
        options.providerKeys = providerKeys
        if !providerKeys.isEmpty { options.jwtKeyID = nil }
        let sandbox = try await APNsSimulator.start(options)
        // apns.ca_file holds both simulators' CAs; each environment has its own host.
        let caFile = "\(directory)/both-cas.pem"
        try (fixture.simulator.certificates.caPEM + "\n" + sandbox.certificates.caPEM).write(toFile: caFile, atomically: true, encoding: .utf8)
        var config = try String(contentsOfFile: fixture.configPath, encoding: .utf8)
        if let apps {
            config = config.replacingOccurrences(
                of: "  auth:\n    key_file: \(directory)/key.p8\n    key_id: ABCDE12345\n    team_id: TEAM123456\n", with: apps)
        }
        config = config
            .replacingOccurrences(of: "  endpoint: 127.0.0.1:\(fixture.simulator.http2Port)",
                                  with: "  production_endpoint: 127.0.0.1:\(fixture.simulator.http2Port)\n  sandbox_endpoint: 127.0.0.1:\(sandbox.http2Port)")
            .replacingOccurrences(of: fixture.simulator.certificates.caPath, with: caFile)
        try config.write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        return TwoHostsFixture(fixture: fixture, sandbox: sandbox)
    }

    /// What a run published, each topic's values in order, and the relay's `/metrics` page at the end.
    struct Published {
        var results: [String] = []
        var failedTokens: [String] = []
        var wrongEnvironment: [String] = []
        /// Every record of the relay's output topics (results, failed tokens, wrong-environment, dead letters), with
        /// its headers.
        var records: [String: [KafkaMessage]] = [:]
        var metrics = ""
        /// `/readyz` at the end of the run.
        var readiness = ""
        var log = ""
    }

    /// Registers `devices` (token, environment) for `u-1`, produces `events` (key, value), runs the relay until
    /// `results` results are published, reads `/metrics`, and stops it (exit 0 expected).
    func run(devices: [(token: String, environment: String)], events: [(key: String, value: String)], results expected: Int,
             headers: [String: [KafkaHeader]] = [:], relayEnvironment: [String: String] = [:], logger: Logger) async throws -> Published {
        try await fixture.produce(devices.map {
            ($0.token, "{\"user\":\"u-1\",\"topic\":\"com.example.app\",\"environment\":\"\($0.environment)\",\"registered_at\":1}")
        }, topic: "push.devices", logger: logger)
        try await fixture.produce(events, headers: headers, logger: logger)
        let logPath = "\(fixture.directory)/run-\(UUID().uuidString).log"
        let relay = try startRelay(["run", "--config", fixture.configPath], log: logPath, environment: relayEnvironment)
        let kafka = KafkaConfiguration(bootstrapServers: fixture.cluster.bootstrapServers)
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        func messages(of topic: String) async throws -> [KafkaMessage] {
            let messages = Mutex<[KafkaMessage]>([])
            _ = try await reader.readToEnd((0..<3).map { TopicPartition(topic, Int32($0)) }) { message in
                messages.withLock { $0.append(message) }
            }
            return messages.withLock { $0 }
        }
        func values(of topic: String) async throws -> [String] {
            try await messages(of: topic).map { String(decoding: $0.value ?? [], as: UTF8.self) }
        }
        var published = Published()
        let doneBy = ContinuousClock.now.advanced(by: .seconds(60))
        while ContinuousClock.now < doneBy && relay.isRunning {
            published.results = try await values(of: "push.results")
            if published.results.count >= expected { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        // Records published with a result's notification (failed tokens, wrong-environment notices) are flushed by now.
        try await Task.sleep(for: .seconds(1))
        let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        if let line = log.split(separator: "\n").first(where: { $0.contains("ops endpoint listening") }),
           let address = line.firstMatch(of: #/\d+\.\d+\.\d+\.\d+:(\d+)/#) {
            published.metrics = String(decoding: try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(address.1)/metrics")!).0, as: UTF8.self)
            published.readiness = String(decoding: try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(address.1)/readyz")!).0, as: UTF8.self)
        }
        kill(relay.processIdentifier, SIGTERM)
        while relay.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        published.log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        #expect(relay.terminationStatus == 0, "\(published.log.suffix(2_000))")
        published.failedTokens = try await values(of: "push.failed-tokens")
        published.wrongEnvironment = try await values(of: "push.wrong-environment")
        for topic in ["push.results", "push.failed-tokens", "push.wrong-environment", "push.dlq"] {
            published.records[topic] = try await messages(of: topic)
        }
        return published
    }

    func stop() async {
        await sandbox.shutdown()
        await fixture.stop()
    }
}

/// The value of the counter `name{labels}` on a Prometheus page, if exported.
func metricValue(_ page: String, _ series: String) -> Double? {
    page.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
}

@Suite("apns-relay run: a token sent to the wrong APNs environment", .serialized)
struct WrongEnvironmentProcessTests {
    static let production = String(repeating: "ab", count: 32)
    /// A development build's token registered as production (the registration bug).
    static let wronglyRegistered = String(repeating: "cd", count: 32)
    /// A token neither host knows.
    static let dead = String(repeating: "ef", count: 32)
    static let sandbox = String(repeating: "12", count: 32)
    /// A development build's token given in an event, which says nothing of its environment (the default: production).
    static let inEvent = String(repeating: "34", count: 32)

    @Test("BadDeviceToken: tried once in the other environment; delivered there, the result says so and a wrong-environment record tells the registry's owner; refused in both, the token is dead")
    func wrongEnvironment() async throws {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let hosts = try await TwoHostsFixture.start(tokens: [
            Self.production: .production, Self.wronglyRegistered: .sandbox, Self.sandbox: .sandbox, Self.inEvent: .sandbox,
        ])
        hosts.production.markBad(Self.dead)
        hosts.sandbox.markBad(Self.dead)
        let published = try await hosts.run(
            devices: [(Self.production, "production"), (Self.wronglyRegistered, "production"), (Self.dead, "production"), (Self.sandbox, "sandbox")],
            events: [
                ("u-1", #"{"id":"e1","user":"u-1","seq":1,"badge":{"increment":1},"apns":{"payload":{"aps":{"alert":"hi"}}}}"#),
                ("e2", #"{"id":"e2","tokens":["\#(Self.inEvent)"],"apns":{"payload":{"aps":{"alert":"hello"}}}}"#),
            ],
            results: 5, logger: logger)
        let results = Dictionary(published.results.map { (RecordShape.object($0)["token"] as? String ?? "", RecordShape.object($0)) }) { first, _ in first }
        #expect(published.results.count == 5, "\(published.results)\n\(published.log.suffix(3_000))")

        // Delivered where it was sent: nothing new on the result.
        #expect(results[Self.production]?["status"] as? String == "delivered")
        #expect(results[Self.production]?["environment"] == nil && results[Self.sandbox]?["environment"] == nil)
        // Registered as production, delivered by the sandbox: the result says where, after two sends.
        for token in [Self.wronglyRegistered, Self.inEvent] {
            #expect(results[token]?["status"] as? String == "delivered", "\(results[token] ?? [:])")
            #expect(results[token]?["environment"] as? String == "sandbox", "\(results[token] ?? [:])")
            #expect(results[token]?["http_status"] as? Int == 200 && results[token]?["attempts"] as? Int == 2, "\(results[token] ?? [:])")
            #expect(hosts.sandbox.deliveries(for: token).count == 1 && hosts.production.deliveries(for: token).isEmpty)
        }
        // Refused by both hosts: dead, and reported so.
        #expect(results[Self.dead]?["status"] as? String == "rejected" && results[Self.dead]?["reason"] as? String == "BadDeviceToken",
                "\(results[Self.dead] ?? [:])")
        #expect(results[Self.dead]?["environment"] as? String == "sandbox" && results[Self.dead]?["attempts"] as? Int == 2)

        // push.failed-tokens: only the token refused in both, in the contract's shape.
        #expect(published.failedTokens.count == 1, "\(published.failedTokens)")
        for record in published.failedTokens {
            #expect(RecordShape.keys(of: record) == RecordShape.failedTokenKeys, "\(record)")
            let object = RecordShape.object(record)
            #expect(object["token"] as? String == Self.dead && object["reason"] as? String == "BadDeviceToken")
            #expect(object["environment"] as? String == "production" && object["user"] as? String == "u-1")
        }
        // push.wrong-environment: the two tokens that belong to the sandbox, for whoever registered them.
        let notices = Dictionary(published.wrongEnvironment.map { (RecordShape.object($0)["token"] as? String ?? "", $0) }) { first, _ in first }
        #expect(published.wrongEnvironment.count == 2, "\(published.wrongEnvironment)")
        for record in published.wrongEnvironment {
            #expect(RecordShape.keys(of: record) == ["token", "user", "topic", "environment", "wrong_environment", "source", "event_id", "at"], "\(record)")
        }
        let registered = RecordShape.object(notices[Self.wronglyRegistered] ?? "")
        #expect(registered["user"] as? String == "u-1" && registered["topic"] as? String == "com.example.app" && registered["event_id"] as? String == "e1")
        #expect(registered["environment"] as? String == "sandbox" && registered["wrong_environment"] as? String == "production"
                && registered["source"] as? String == "registration", "\(registered)")
        let fromEvent = RecordShape.object(notices[Self.inEvent] ?? "")
        #expect(fromEvent["user"] is NSNull && fromEvent["topic"] as? String == "com.example.app" && fromEvent["event_id"] as? String == "e2")
        #expect(fromEvent["environment"] as? String == "sandbox" && fromEvent["wrong_environment"] as? String == "production"
                && fromEvent["source"] as? String == "event", "\(fromEvent)")

        // Existing consumers read every result as before: the contract's keys, in order, then optional ones.
        for record in published.results { #expect(RecordShape.isCompatibleResult(record), "\(record)") }
        #expect(metricValue(published.metrics, #"apns_relay_other_environment_retries_total{outcome="delivered"}"#) == 2, "\(published.metrics)")
        #expect(metricValue(published.metrics, #"apns_relay_other_environment_retries_total{outcome="refused"}"#) == 1)
        await hosts.stop()
    }

    @Test("apns-unique-id: a notification the sandbox answers carries it on its result (apns_unique_id), with either HTTP/2 client",
          arguments: ["nghttp2", "nio"])
    func uniqueID(client: String) async throws {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let hosts = try await TwoHostsFixture.start(tokens: [Self.production: .production, Self.sandbox: .sandbox],
                                                    apnsLines: "  http2_client: \(client)\n")
        let published = try await hosts.run(
            devices: [(Self.production, "production"), (Self.sandbox, "sandbox")],
            events: [("u-1", #"{"id":"e1","user":"u-1","seq":1,"apns":{"payload":{"aps":{"alert":"hi"}}}}"#)],
            results: 2, logger: logger)
        let results = Dictionary(published.results.map { (RecordShape.object($0)["token"] as? String ?? "", RecordShape.object($0)) }) { first, _ in first }
        #expect(published.results.count == 2, "\(published.log.suffix(3_000))")
        let issued = hosts.sandbox.deliveries(for: Self.sandbox).first?.uniqueID
        #expect(issued != nil, "the sandbox host answered with an apns-unique-id")
        #expect(results[Self.sandbox]?["status"] as? String == "delivered")
        #expect(results[Self.sandbox]?["apns_unique_id"] as? String == issued, "\(results[Self.sandbox] ?? [:])")
        // Production sends none: the key is left out, as every optional key is.
        #expect(results[Self.production]?["status"] as? String == "delivered")
        #expect(!published.results.contains { $0.contains(Self.production) && $0.contains("apns_unique_id") })
        for record in published.results { #expect(RecordShape.isCompatibleResult(record), "\(record)") }
        await hosts.stop()
    }
}
