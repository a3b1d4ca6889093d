import APNs
import APNsSimulator
import Crypto
import Foundation
import Logging
import Testing
import TestSupport

@testable import apns_relay

/// `apns.apps`: several apps, each with its own credential, in one relay.
@Suite("Configuration: apns.apps")
struct AppsConfigurationTests {
    /// Real credentials: two .p8 keys (two teams) and the simulator CA's client certificate as PEM files.
    struct Credentials {
        let fixture: ConfigFixture
        let teamAKey: String
        let teamBKey: String
        let certificate: String
        let certificateKey: String

        init() throws {
            fixture = try ConfigFixture()
            let directory = fixture.directory.path
            teamAKey = "\(directory)/team-a.p8"
            teamBKey = "\(directory)/team-b.p8"
            try P256.Signing.PrivateKey().pemRepresentation.write(toFile: teamAKey, atomically: true, encoding: .utf8)
            try P256.Signing.PrivateKey().pemRepresentation.write(toFile: teamBKey, atomically: true, encoding: .utf8)
            let certificates = try SimulatorCertificates.generate(in: "\(directory)/certs")
            certificate = certificates.clientCertificatePath
            certificateKey = certificates.clientKeyPath
        }

        /// Two apps of team A, one of team B, one with a certificate.
        var appsYAML: String {
            """
            kafka:
              brokers: embedded
            apns:
              apps:
                - topic: com.a.one
                  key_file: \(teamAKey)
                  key_id: KEYAAAAAAA
                  team_id: TEAMAAAAAA
                - topic: com.a.two
                  key_file: \(teamAKey)
                  key_id: KEYAAAAAAA
                  team_id: TEAMAAAAAA
                - topic: com.b.app
                  key_file: \(teamBKey)
                  key_id: KEYBBBBBBB
                  team_id: TEAMBBBBBB
                - topic: com.c.app
                  cert_file: \(certificate)
                  private_key_file: \(certificateKey)
            """
        }
    }

    @Test("apns-relay channels uses the credential of the app it manages: the app's own, none for a topic no app has")
    func channelsCredentialPerApp() async throws {
        let credentials = try Credentials()
        let configuration = try await ConfigurationLoader.load(file: try credentials.fixture.write(credentials.appsYAML), environment: [:], requireService: false)
        let logger = Logger(label: "test")
        guard case .token = try configuration.apns.credential(for: "com.b.app", in: .production, logger: logger) else {
            Issue.record("com.b.app is a token app")
            return
        }
        guard case .certificate = try configuration.apns.credential(for: "com.c.app", in: .production, logger: logger) else {
            Issue.record("com.c.app is a certificate app")
            return
        }
        #expect(throws: ConfigurationError(key: "apns.apps", problem: "no app has the topic 'com.unknown.app'")) {
            try configuration.apns.credential(for: "com.unknown.app", in: .production, logger: logger)
        }
    }

    @Test("a list of apps loads; token apps of one key share one credential group, a certificate is a group of its own")
    func appsLoadAndGroup() async throws {
        let credentials = try Credentials()
        let file = try credentials.fixture.write(credentials.appsYAML)
        let configuration = try await ConfigurationLoader.load(file: file, environment: [:], requireService: true)
        #expect(configuration.apns.apps.map(\.topic) == ["com.a.one", "com.a.two", "com.b.app", "com.c.app"])
        #expect(configuration.apns.apps[2].authentication == .token(keyFile: credentials.teamBKey, keyID: "KEYBBBBBBB", teamID: "TEAMBBBBBB"))
        #expect(configuration.apns.apps[3].authentication == .certificate(certificateFile: credentials.certificate, privateKeyFile: credentials.certificateKey))
        #expect(configuration.apns.defaultTopic == nil, "several apps and no apns.topic: no default")

        let groups = try configuration.apns.credentialGroups(logger: Logger(label: "test"))
        #expect(groups.map(\.name) == ["key:KEYAAAAAAA", "key:KEYBBBBBBB", "certificate:com.c.app"])
        #expect(groups.allSatisfy { $0.environments == [.production, .sandbox] })
        #expect(groups.map(\.topics) == [["com.a.one", "com.a.two"], ["com.b.app"], ["com.c.app"]])
        #expect(groups[2].clientCertificate != nil && groups[0].clientCertificate == nil)
        // One signer per key: the two apps of team A's key use the same provider (one JWT).
        if case .token(let provider) = groups[0].credential {
            #expect(provider.keyID == "KEYAAAAAAA")
        } else {
            Issue.record("team A is not token auth")
        }

        let shown = Dictionary(configuration.effectiveValues.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
        #expect(shown["apns.apps.0.topic"] == "com.a.one")
        #expect(shown["apns.apps.3.cert_file"] == credentials.certificate)
        #expect(shown["apns.auth"] == "(none)")
    }

    @Test("keys limited to one environment: an app listed once per environment, a group per key with its environment; a team with a topic-only key beside its team key")
    func restrictedKeys() async throws {
        let credentials = try Credentials()
        // Flow style: one entry a line.
        let (a, b) = (credentials.teamAKey, credentials.teamBKey)
        let file = try credentials.fixture.write("""
            kafka: {brokers: embedded}
            apns:
              apps:
                - {topic: com.a.one, key_file: \(a), key_id: KEYPRODAAA, team_id: TEAMAAAAAA, key_environment: production}
                - {topic: com.a.one, key_file: \(b), key_id: KEYSANDAAA, team_id: TEAMAAAAAA, key_environment: sandbox}
                - {topic: com.a.two, key_file: \(a), key_id: KEYTEAMAAA, team_id: TEAMAAAAAA}
                - {topic: com.a.widget, key_file: \(b), key_id: KEYWIDGETA, team_id: TEAMAAAAAA}
            """)
        let configuration = try await ConfigurationLoader.load(file: file, environment: [:], requireService: true)
        #expect(configuration.apns.apps.map(\.keyEnvironment) == [.production, .sandbox, nil, nil])
        let groups = try configuration.apns.credentialGroups(logger: Logger(label: "test"))
        #expect(groups.map(\.name) == ["key:KEYPRODAAA", "key:KEYSANDAAA", "key:KEYTEAMAAA", "key:KEYWIDGETA"])
        #expect(groups.map(\.environments) == [[.production], [.sandbox], [.production, .sandbox], [.production, .sandbox]])
        #expect(groups.map(\.topics) == [["com.a.one"], ["com.a.one"], ["com.a.two"], ["com.a.widget"]])
        let shown = Dictionary(configuration.effectiveValues.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
        #expect(shown["apns.apps.1.key_environment"] == "sandbox")
    }

    @Test("the single apns.topic + apns.auth form is one app for every topic")
    func singleFormIsOneApp() async throws {
        let fixture = try ConfigFixture()
        let configuration = try await ConfigurationLoader.load(file: try fixture.write(fixture.validYAML), environment: [:], requireService: true)
        #expect(configuration.apns.apps.isEmpty)
        #expect(configuration.apns.resolvedApps.count == 1)
        #expect(configuration.apns.resolvedApps[0].topic == nil, "carries every topic, as before apns.apps")
        #expect(configuration.apns.defaultTopic == "com.example.app")
    }

    @Test("one app: its topic is the default topic; apns.topic must be one of the apps'")
    func defaultTopic() async throws {
        let credentials = try Credentials()
        let one = try credentials.fixture.write("""
            apns:
              apps:
                - topic: com.b.app
                  key_file: \(credentials.teamBKey)
                  key_id: KEYBBBBBBB
                  team_id: TEAMBBBBBB
            """)
        #expect(try await ConfigurationLoader.load(file: one, environment: [:], requireService: false).apns.defaultTopic == "com.b.app")
        let chosen = try await ConfigurationLoader.load(
            file: try credentials.fixture.write(credentials.appsYAML), environment: ["APNS_RELAY_APNS_TOPIC": "com.a.two"], requireService: false)
        #expect(chosen.apns.defaultTopic == "com.a.two")
    }

    @Test("an app's PKCS#12 password from the environment is a secret: read, never shown")
    func passwordFromEnvironment() async throws {
        let credentials = try Credentials()
        let file = try credentials.fixture.write("""
            apns:
              apps:
                - topic: com.p12.app
                  p12_file: \(credentials.certificate)
            """)
        let configuration = try await ConfigurationLoader.load(
            file: file, environment: ["APNS_RELAY_APNS_APPS_0_P12_PASSWORD": "hunter2-secret"], requireService: false)
        #expect(configuration.apns.apps[0].authentication == .pkcs12(file: credentials.certificate, password: "hunter2-secret"))
        let shown = configuration.effectiveValues
        #expect(shown.contains { $0.key == "apns.apps.0.p12_password" && $0.value == RelayConfiguration.redacted })
        #expect(!shown.contains { $0.value.contains("hunter2") })
        #expect(ConfigurationLoader.isSecretKey("apns.apps.0.p12_password"))
    }

    @Test("apps from the environment alone")
    func appsFromEnvironment() async throws {
        let credentials = try Credentials()
        let configuration = try await ConfigurationLoader.load(file: nil, environment: [
            "APNS_RELAY_KAFKA_BROKERS": "embedded",
            "APNS_RELAY_APNS_APPS_0_TOPIC": "com.a.one",
            "APNS_RELAY_APNS_APPS_0_KEY_FILE": credentials.teamAKey,
            "APNS_RELAY_APNS_APPS_0_KEY_ID": "KEYAAAAAAA",
            "APNS_RELAY_APNS_APPS_0_TEAM_ID": "TEAMAAAAAA",
            "APNS_RELAY_APNS_APPS_1_TOPIC": "com.c.app",
            "APNS_RELAY_APNS_APPS_1_CERT_FILE": credentials.certificate,
            "APNS_RELAY_APNS_APPS_1_PRIVATE_KEY_FILE": credentials.certificateKey,
        ], requireService: true)
        #expect(configuration.apns.apps.map(\.topic) == ["com.a.one", "com.c.app"])
    }

    /// (YAML under `apns:`, the key the error names, words of its problem).
    static let badApps: [(String, String, String)] = [
        ("  apps: com.a.one\n", "apns.apps", "must be a list"),
        ("  apps:\n    - com.a.one\n", "apns.apps.0", "must be a mapping"),
        ("  apps:\n    - key_file: KEY_A\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n", "apns.apps.0.topic", "required"),
        ("  apps:\n    - topic: com.a.one\n", "apns.apps.0", "needs a credential"),
        ("  apps:\n    - topic: com.a.one\n      key_file: KEY_A\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n      typo: 1\n",
         "apns.apps.0.typo", "unknown key"),
        ("  apps:\n    - topic: com.a.one\n      key_file: /nonexistent.p8\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n",
         "apns.apps.0.key_file", "does not exist"),
        ("  apps:\n    - topic: com.a.one\n      key_file: KEY_A\n      key_id: short\n      team_id: TEAMAAAAAA\n", "apns.apps.0.key_id", "10 letters"),
        ("  apps:\n    - topic: com.a.one\n      key_file: KEY_A\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n"
            + "    - topic: com.a.one\n      key_file: KEY_B\n      key_id: KEYBBBBBBB\n      team_id: TEAMBBBBBB\n",
         "apns.apps.1.topic", "already has a credential in apns.apps.0"),
        ("  apps:\n    - topic: com.a.one\n      key_file: KEY_A\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n"
            + "    - topic: com.a.two\n      key_file: KEY_B\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n",
         "apns.apps.1.key_id", "already named in apns.apps.0"),
        ("  apps:\n    - topic: com.a.one\n      key_file: KEY_A\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n      key_environment: production\n",
         "apns.apps.0.key_environment", "'com.a.one' has no key for sandbox"),
        ("  apps:\n    - topic: com.a.one\n      key_file: KEY_A\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n      key_environment: production\n"
            + "    - topic: com.a.one\n      key_file: KEY_B\n      key_id: KEYBBBBBBB\n      team_id: TEAMAAAAAA\n",
         "apns.apps.1.topic", "already has a credential for production in apns.apps.0"),
        ("  apps:\n    - topic: com.a.one\n      key_file: KEY_A\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n      key_environment: staging\n",
         "apns.apps.0.key_environment", "must be one of production, sandbox"),
        ("  apps:\n    - topic: com.a.one\n      cert_file: KEY_A\n      private_key_file: KEY_B\n      key_environment: sandbox\n",
         "apns.apps.0.key_environment", "limits a token key"),
        ("  apps:\n    - topic: com.a.one\n      key_file: KEY_A\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n      cert_file: KEY_B\n",
         "apns.apps.0", "choose one authentication method"),
        ("  topic: com.z.app\n  apps:\n    - topic: com.a.one\n      key_file: KEY_A\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n",
         "apns.topic", "not the topic of any app"),
        ("  auth:\n    key_file: KEY_A\n    key_id: KEYAAAAAAA\n    team_id: TEAMAAAAAA\n"
            + "  apps:\n    - topic: com.a.one\n      key_file: KEY_A\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n",
         "apns.apps", "not both"),
        ("  transport: binary\n  apps:\n    - topic: com.a.one\n      key_file: KEY_A\n      key_id: KEYAAAAAAA\n      team_id: TEAMAAAAAA\n",
         "apns.apps.0", "needs a client certificate"),
    ]

    @Test("each bad app is an error naming its key", arguments: 0..<badApps.count)
    func badApp(_ index: Int) async throws {
        let credentials = try Credentials()
        let (apns, key, problem) = Self.badApps[index]
        let yaml = "kafka:\n  brokers: embedded\napns:\n" + apns
            .replacingOccurrences(of: "KEY_A", with: credentials.teamAKey).replacingOccurrences(of: "KEY_B", with: credentials.teamBKey)
        let file = try credentials.fixture.write(yaml)
        let error = await #expect(throws: ConfigurationError.self) {
            try await ConfigurationLoader.load(file: file, environment: [:], requireService: true)
        }
        #expect(error?.key == key, "\(error.map { "\($0)" } ?? "no error")")
        #expect(error?.problem.contains(problem) == true, "\(error?.problem ?? "no error")")
    }

    @Test("every credential is loaded at start: an unreadable key names the app")
    func credentialsCheckedAtStart() async throws {
        let credentials = try Credentials()
        let broken = "\(credentials.fixture.directory.path)/broken.p8"
        try "not a key".write(toFile: broken, atomically: true, encoding: .utf8)
        let file = try credentials.fixture.write(credentials.appsYAML.replacingOccurrences(of: credentials.teamBKey, with: broken))
        let configuration = try await ConfigurationLoader.load(file: file, environment: [:], requireService: true)
        let error = #expect(throws: ConfigurationError.self) { try configuration.apns.credentialGroups(logger: Logger(label: "test")) }
        #expect(error?.key == "apns.apps.2", "\(error.map { "\($0)" } ?? "no error")")
    }
}
