import APNs
import APNsSimulator
import Crypto
import Foundation
import Logging
import Testing
import TestSupport

/// Apple's restricted token keys (2025) through `apns-relay run`, between a production and a sandbox host that know
/// the keys and their limits as Apple does: a key limited to one environment is refused by the other's host (403
/// `BadEnvironmentKeyIdInToken`), a key limited to one topic is refused for the team's other topics (403
/// `UnrelatedKeyIdInToken`).
@Suite("apns-relay run: environment- and topic-restricted keys", .serialized)
struct RestrictedKeysProcessTests {
    static let (production, sandbox) = (WrongEnvironmentProcessTests.production, WrongEnvironmentProcessTests.sandbox)
    /// A development build's token registered as production: production refuses it, the sandbox delivers it.
    static let wronglyRegistered = WrongEnvironmentProcessTests.wronglyRegistered
    static let (other, widget) = (String(repeating: "34", count: 32), String(repeating: "56", count: 32))
    static let team = "TEAM123456"
    static let topics: Set<String> = ["com.example.app", "com.example.other", "com.example.widget"]

    /// The four keys of one team: production only, sandbox only, the whole team, and the widget only.
    struct Keys {
        var files: [String: String] = [:]
        var simulatorKeys: [SimulatorProviderKey] = []

        init(directory: String) throws {
            let limits: [(id: String, environment: APNsEnvironment?, topics: Set<String>?)] = [
                ("KEYPROD001", .production, nil), ("KEYSAND001", .sandbox, nil), ("KEYTEAM001", nil, nil), ("KEYWIDGET1", nil, ["com.example.widget"]),
            ]
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            for limit in limits {
                let key = P256.Signing.PrivateKey()
                let file = "\(directory)/\(limit.id).p8"
                try key.pemRepresentation.write(toFile: file, atomically: true, encoding: .utf8)
                files[limit.id] = file
                simulatorKeys.append(SimulatorProviderKey(keyID: limit.id, teamID: RestrictedKeysProcessTests.team, publicKeyPEM: key.publicKey.pemRepresentation,
                                                          topics: RestrictedKeysProcessTests.topics, environment: limit.environment, keyTopics: limit.topics))
            }
        }

        /// An `apns.apps` entry: `topic` signed by key `id`, limited to `environment` when given.
        func app(_ topic: String, _ id: String, environment: String? = nil) -> String {
            "    - topic: \(topic)\n      key_file: \(files[id]!)\n      key_id: \(id)\n      team_id: \(RestrictedKeysProcessTests.team)\n"
                + (environment.map { "      key_environment: \($0)\n" } ?? "")
        }
    }

    static let events: [(key: String, value: String)] = [
        ("u-1", #"{"id":"e1","user":"u-1","seq":1,"apns":{"payload":{"aps":{"alert":"hi"}}}}"#),
        ("e2", #"{"id":"e2","tokens":["\#(other)"],"apns":{"topic":"com.example.other","payload":{"aps":{"alert":"other"}}}}"#),
        ("e3", #"{"id":"e3","tokens":["\#(widget)"],"apns":{"topic":"com.example.widget","payload":{"aps":{"alert":"widget"}}}}"#),
    ]

    /// Both hosts with the four keys, and a relay whose `apns.apps` entries (`apps`: topic, key id, limit) name them.
    static func start(apps: [(topic: String, key: String, environment: String?)]) async throws -> (TwoHostsFixture, directory: String) {
        let directory = scratchPath("restricted-keys")
        let keys = try Keys(directory: directory)
        let hosts = try await TwoHostsFixture.start(
            tokens: [production: .production, wronglyRegistered: .sandbox, sandbox: .sandbox], providerKeys: keys.simulatorKeys,
            apps: "  apps:\n" + apps.map { keys.app($0.topic, $0.key, environment: $0.environment) }.joined())
        return (hosts, directory)
    }

    @Test("a production-only and a sandbox-only key for one app: each environment signed by its own, the wrong-environment resend by the sandbox key; a topic-only key beside the team key")
    func eachNotificationSignedByAKeyValidForIt() async throws {
        var logger = Logger(label: "keys-test")
        logger.logLevel = .error
        let (hosts, directory) = try await Self.start(apps: [
            ("com.example.app", "KEYPROD001", "production"), ("com.example.app", "KEYSAND001", "sandbox"),
            ("com.example.other", "KEYTEAM001", nil), ("com.example.widget", "KEYWIDGET1", nil),
        ])
        let published = try await hosts.run(
            devices: [(Self.production, "production"), (Self.wronglyRegistered, "production"), (Self.sandbox, "sandbox")],
            events: Self.events, results: 5, logger: logger)
        let results = Dictionary(published.results.map { (RecordShape.object($0)["token"] as? String ?? "", RecordShape.object($0)) }) { first, _ in first }
        #expect(published.results.count == 5, "\(published.results)\n\(published.log.suffix(3_000))")
        for token in [Self.production, Self.wronglyRegistered, Self.sandbox, Self.other, Self.widget] {
            #expect(results[token]?["status"] as? String == "delivered", "\(token.prefix(4)): \(results[token] ?? [:])")
        }
        // Refused as BadDeviceToken by production (signed there by the production key), delivered by the sandbox,
        // signed there by the sandbox key (the production key would have been refused: 403).
        #expect(results[Self.wronglyRegistered]?["environment"] as? String == "sandbox" && results[Self.wronglyRegistered]?["attempts"] as? Int == 2)
        #expect(hosts.sandbox.deliveries(for: Self.wronglyRegistered).count == 1 && hosts.sandbox.deliveries(for: Self.sandbox).count == 1)
        #expect(hosts.production.deliveries(for: Self.other).map(\.topic) == ["com.example.other"])
        #expect(hosts.production.deliveries(for: Self.widget).map(\.topic) == ["com.example.widget"])
        #expect(published.wrongEnvironment.count == 1 && published.failedTokens.isEmpty, "\(published.failedTokens)")
        #expect(!published.metrics.contains("apns_credential_refusals_total"), "no key refused")
        #expect(published.readiness.hasPrefix("ready"), "\(published.readiness)")
        await hosts.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    @Test("a key declared for both environments that Apple limits to production, and a topic-only key declared for another topic: configuration errors, never a dead token; a clear reason, a metric, a log line naming the key id, /readyz naming the pool")
    func refusedKeysAreConfigurationErrors() async throws {
        var logger = Logger(label: "keys-test")
        logger.logLevel = .error
        // KEYPROD001 is Apple's production-only key; KEYWIDGET1 signs for com.example.widget only.
        let (hosts, directory) = try await Self.start(apps: [("com.example.app", "KEYPROD001", nil), ("com.example.other", "KEYWIDGET1", nil)])
        let published = try await hosts.run(
            devices: [(Self.production, "production"), (Self.sandbox, "sandbox")], events: Array(Self.events.prefix(2)), results: 3, logger: logger)
        let results = Dictionary(published.results.map { (RecordShape.object($0)["token"] as? String ?? "", RecordShape.object($0)) }) { first, _ in first }
        #expect(published.results.count == 3, "\(published.results)\n\(published.log.suffix(3_000))")
        #expect(results[Self.production]?["status"] as? String == "delivered")
        #expect(results[Self.sandbox]?["status"] as? String == "rejected" && results[Self.sandbox]?["reason"] as? String == "BadEnvironmentKeyIdInToken",
                "\(results[Self.sandbox] ?? [:])")
        #expect(results[Self.other]?["status"] as? String == "rejected" && results[Self.other]?["reason"] as? String == "UnrelatedKeyIdInToken",
                "\(results[Self.other] ?? [:])")
        #expect(published.failedTokens.isEmpty, "a refused key is no dead token: \(published.failedTokens)")
        #expect(published.metrics.contains(#"apns_credential_refusals_total{reason="BadEnvironmentKeyIdInToken",environment="sandbox",credential="key:KEYPROD001"} 1"#),
                "\(published.metrics.split(separator: "\n").filter { $0.contains("refusal") })")
        #expect(published.metrics.contains(#"apns_credential_refusals_total{reason="UnrelatedKeyIdInToken",environment="production",credential="key:KEYWIDGET1"} 1"#))
        let lines = published.log.split(separator: "\n").filter { $0.contains("refused the pool's credential") }
        #expect(lines.contains { $0.contains("key:KEYPROD001") && $0.contains("BadEnvironmentKeyIdInToken") }, "\(lines)")
        #expect(lines.contains { $0.contains("key:KEYWIDGET1") && $0.contains("UnrelatedKeyIdInToken") }, "\(lines)")
        #expect(!published.log.contains("BEGIN PRIVATE KEY") && !published.log.contains("eyJ"), "never the key or a JWT")
        #expect(published.readiness.contains("APNs credential refused (key:KEYPROD001 in sandbox: BadEnvironmentKeyIdInToken"), "\(published.readiness)")
        #expect(published.readiness.contains("APNs credential refused (key:KEYWIDGET1 in production: UnrelatedKeyIdInToken"), "\(published.readiness)")
        await hosts.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
