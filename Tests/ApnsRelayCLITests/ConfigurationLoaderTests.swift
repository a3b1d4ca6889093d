import APNs
import Foundation
import Testing

@testable import apns_relay
import TestSupport


@Suite("Configuration")
struct ConfigurationLoaderTests {
    @Test("defaults, file values and environment overrides")
    func loadsAndOverrides() async throws {
        let fixture = try ConfigFixture()
        let file = try fixture.write(fixture.validYAML)
        let configuration = try await ConfigurationLoader.load(
            file: file,
            environment: [
                "APNS_RELAY_RELAY_MAX_IN_FLIGHT": "750",
                "APNS_RELAY_RELAY_MAX_RETRY_S": "120",
                "APNS_RELAY_KAFKA_TOPICS_FAILED_TOKENS": "tokens.dead",
                "APNS_RELAY_KAFKA_PROPERTIES_SASL_MECHANISM": "PLAIN",
                "APNS_RELAY_SERVICE_HOST": "10.0.0.1",  // a Kubernetes service link: ignored
                "UNRELATED": "x",
            ],
            requireService: true
        )
        #expect(configuration.kafka.brokers == "kafka-1:9092,kafka-2:9092")
        #expect(configuration.kafka.groupID == "apns-relay")
        #expect(configuration.kafka.topics.events == "push.events")
        #expect(configuration.kafka.topics.failedTokens == "tokens.dead")
        #expect(configuration.kafka.properties["sasl.mechanism"] == "PLAIN")
        #expect(configuration.kafka.properties["security.protocol"] == "SASL_SSL")
        #expect(configuration.apns.environment == .sandbox)
        #expect(configuration.apns.transport == .http2)
        #expect(configuration.apns.authentication == .token(keyFile: fixture.keyFile, keyID: "ABC123DEFG", teamID: "TEAM123456"))
        #expect(configuration.relay.maxInFlight == 750)
        #expect(configuration.relay.maxRetry == .seconds(120))
        #expect(configuration.relay.reorderWindow == .milliseconds(2_000))
        #expect(configuration.relay.shutdownTimeout == .seconds(25))
        #expect(configuration.relay.httpPort == 9_090)
        #expect(configuration.log.format == .json)
        #expect(configuration.tracing.otlpEndpoint == nil, "spans are off by default")
    }

    @Test("tracing.otlp_endpoint: the collector's base URL, spans posted under /v1/traces")
    func tracingEndpoint() async throws {
        let fixture = try ConfigFixture()
        for (endpoint, traces) in [("http://otel-collector:4318", "http://otel-collector:4318/v1/traces"),
                                   ("https://collector.example/otlp/", "https://collector.example/otlp/v1/traces"),
                                   ("http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:4318/v1/traces")] {
            let configuration = try await ConfigurationLoader.load(
                file: nil,
                environment: ["APNS_RELAY_KAFKA_BROKERS": "embedded", "APNS_RELAY_APNS_AUTH_KEY_FILE": fixture.keyFile,
                              "APNS_RELAY_APNS_AUTH_KEY_ID": "ABC123DEFG", "APNS_RELAY_APNS_AUTH_TEAM_ID": "TEAM123456",
                              "APNS_RELAY_TRACING_OTLP_ENDPOINT": endpoint],
                requireService: true)
            #expect(configuration.tracing.tracesURL == traces)
            #expect(configuration.effectiveValues.contains { $0.key == "tracing.otlp_endpoint" && $0.value == endpoint })
        }
    }

    @Test("environment alone is enough")
    func environmentOnly() async throws {
        let fixture = try ConfigFixture()
        let configuration = try await ConfigurationLoader.load(
            file: nil,
            environment: [
                "APNS_RELAY_KAFKA_BROKERS": "embedded",
                "APNS_RELAY_APNS_AUTH_KEY_FILE": fixture.keyFile,
                "APNS_RELAY_APNS_AUTH_KEY_ID": "ABC123DEFG",
                "APNS_RELAY_APNS_AUTH_TEAM_ID": "TEAM123456",
                "APNS_RELAY_LOG_LEVEL": "debug",
            ],
            requireService: true
        )
        #expect(configuration.kafka.isEmbedded)
        #expect(configuration.log.level == .debug)
        #expect(configuration.relay.maxRetry == .seconds(300))
    }


    @Test("each bad value is an error naming its key", arguments: 0..<ConfigFixture.badValues.count)
    func badValue(_ index: Int) async throws {
        let (environment, key, problem) = ConfigFixture.badValues[index]
        let fixture = try ConfigFixture()
        let file = try fixture.write(fixture.validYAML)
        let error = await #expect(throws: ConfigurationError.self) {
            try await ConfigurationLoader.load(file: file, environment: environment, requireService: true)
        }
        #expect(error?.key == key)
        #expect(error?.problem.contains(problem) == true, "\(error?.problem ?? "no error")")
        #expect(error.map { "\($0)" }?.contains("Secr3t-Pw") == false, "\(error.map { "\($0)" } ?? "")")
    }

    @Test("apns.production_endpoint and apns.sandbox_endpoint from the file and the environment; apns.endpoint replaces the configured environment's host")
    func environmentEndpoints() async throws {
        let fixture = try ConfigFixture()
        let file = try fixture.write("""
            kafka:
              brokers: embedded
            apns:
              production_endpoint: 127.0.0.1:2197
              sandbox_endpoint: "[::1]:2198"
            """)
        let fromFile = try await ConfigurationLoader.load(file: file, environment: [:], requireService: false)
        #expect(fromFile.apns.productionEndpoint == APNsEndpoint(host: "127.0.0.1", port: 2197))
        #expect(fromFile.apns.http2Endpoint(for: .production) == APNsEndpoint(host: "127.0.0.1", port: 2197))
        #expect(fromFile.apns.http2Endpoint(for: .sandbox) == APNsEndpoint(host: "::1", port: 2198))
        let overridden = try await ConfigurationLoader.load(
            file: file, environment: ["APNS_RELAY_APNS_SANDBOX_ENDPOINT": "sim.local:443"], requireService: false)
        #expect(overridden.apns.http2Endpoint(for: .sandbox) == APNsEndpoint(host: "sim.local", port: 443))
        let printed = overridden.effectiveValues.map { "\($0.key): \($0.value)" }
        #expect(printed.contains("apns.production_endpoint: 127.0.0.1:2197"))
        #expect(printed.contains("apns.sandbox_endpoint: sim.local:443"))

        // apns.endpoint goes with apns.environment; the other environment keeps Apple's host.
        let legacy = try await ConfigurationLoader.load(
            file: nil, environment: ["APNS_RELAY_APNS_ENVIRONMENT": "sandbox", "APNS_RELAY_APNS_ENDPOINT": "127.0.0.1:2197"], requireService: false)
        #expect(legacy.apns.http2Endpoint(for: .sandbox) == APNsEndpoint(host: "127.0.0.1", port: 2197))
        #expect(legacy.apns.http2Endpoint(for: .production) == .production)
        #expect(legacy.apns.binaryGateway(for: .sandbox) == APNsEndpoint(host: "127.0.0.1", port: 2197))
        #expect(legacy.apns.binaryGateway(for: .production) == .legacyGateway)
        let legacyPrinted = legacy.effectiveValues.map { "\($0.key): \($0.value)" }
        #expect(legacyPrinted.contains("apns.sandbox_endpoint: 127.0.0.1:2197"))
        #expect(legacyPrinted.contains("apns.production_endpoint: (Apple's production host)"))
        // The same value under both keys is no conflict.
        let same = try await ConfigurationLoader.load(
            file: nil, environment: ["APNS_RELAY_APNS_ENDPOINT": "127.0.0.1:2197", "APNS_RELAY_APNS_PRODUCTION_ENDPOINT": "127.0.0.1:2197"],
            requireService: false)
        #expect(same.apns.http2Endpoint(for: .production) == APNsEndpoint(host: "127.0.0.1", port: 2197))
        // Without any override, Apple's hosts.
        let apple = try await ConfigurationLoader.load(file: nil, environment: [:], requireService: false)
        #expect(apple.apns.http2Endpoint(for: .production) == .production && apple.apns.http2Endpoint(for: .sandbox) == .sandbox)
    }

    @Test("a file whose structure YAML allows but the configuration does not is an error naming where, not a crash")
    func badStructure() async throws {
        let fixture = try ConfigFixture()
        let cases: [(yaml: String, key: String, problem: String)] = [
            ("kafka: {[x]: 1}\n", "kafka", "a key must be a non-empty name, not a list or a mapping"),
            ("? [a]\n: b\n", "--config", "a key must be a non-empty name"),
            ("?\n", "--config", "a key must be a non-empty name"),
            ("apns:\n  '': x\n", "apns", "a key must be a non-empty name"),
            ("kafka:\n  properties:\n    bootstrap.servers: [a, b]\n", "kafka.properties.bootstrap.servers", "must be a single value"),
            ("- kafka\n", "--config", "must be a YAML mapping of keys"),
        ]
        for (yaml, key, problem) in cases {
            let error = await #expect(throws: ConfigurationError.self) {
                try await ConfigurationLoader.load(file: try fixture.write(yaml), environment: [:], requireService: false)
            }
            #expect(error?.key == key, "\(yaml)")
            #expect(error?.problem.contains(problem) == true, "\(error?.problem ?? "no error")")
        }
    }

    @Test("missing required keys and incomplete credentials name the key")
    func missingKeys() async throws {
        let fixture = try ConfigFixture()
        let cases: [(String, String)] = [
            ("apns:\n  auth:\n    key_file: \(fixture.keyFile)\n    key_id: ABC123DEFG\n    team_id: TEAM123456\n", "kafka.brokers"),
            ("kafka:\n  brokers: embedded\n", "apns.auth"),
            ("kafka:\n  brokers: embedded\napns:\n  auth:\n    key_file: \(fixture.keyFile)\n    key_id: ABC123DEFG\n", "apns.auth.team_id"),
            ("kafka:\n  brokers: embedded\napns:\n  auth:\n    key_id: ABC123DEFG\n    team_id: TEAM123456\n", "apns.auth.key_file"),
            ("kafka:\n  brokers: embedded\napns:\n  auth:\n    cert_file: \(fixture.keyFile)\n", "apns.auth.private_key_file"),
            ("kafka:\n  brokers: embedded\napns:\n  transport: binary\n  auth:\n    key_file: \(fixture.keyFile)\n    key_id: ABC123DEFG\n    team_id: TEAM123456\n", "apns.auth"),
            ("kafka:\n  brokers: embedded\nrelay:\n  reorder_windw_ms: 5\n", "relay.reorder_windw_ms"),
            ("- a\n- list\n", "--config"),
            ("kafka: [unclosed\n", "--config"),
        ]
        for (yaml, key) in cases {
            let file = try fixture.write(yaml)
            let error = await #expect(throws: ConfigurationError.self) {
                try await ConfigurationLoader.load(file: file, environment: [:], requireService: true)
            }
            #expect(error?.key == key, "for:\n\(yaml)")
        }
        let missingFile = await #expect(throws: ConfigurationError.self) {
            try await ConfigurationLoader.load(file: "/nonexistent/relay.yaml", environment: [:], requireService: true)
        }
        #expect(missingFile?.key == "--config")
    }

    @Test("effective values never show a secret")
    func redaction() async throws {
        let fixture = try ConfigFixture()
        let p12 = try fixture.write("not really a bundle")
        let file = try fixture.write("""
            kafka:
              brokers: embedded
              properties:
                sasl.password: s3cret-sasl
                ssl.key.password: s3cret-key
            apns:
              auth:
                p12_file: \(p12)
                p12_password: s3cret-p12
            """)
        let configuration = try await ConfigurationLoader.load(file: file, environment: [:], requireService: true)
        let printed = configuration.effectiveValues.map { "\($0.key): \($0.value)" }.joined(separator: "\n")
        #expect(!printed.contains("s3cret"))
        #expect(printed.contains("apns.auth.p12_password: <redacted>"))
        #expect(printed.contains("kafka.properties.sasl.password: <redacted>"))
        #expect(printed.contains("apns.auth.p12_file: \(p12)"))
    }

    @Test("apns.proxy with credentials from the secret env variable or a file; the dump shows host:port and no password")
    func proxyKeys() async throws {
        let fixture = try ConfigFixture()
        let file = try fixture.write(fixture.validYAML + "\n")
        let fromEnvironment = try await ConfigurationLoader.load(
            file: file,
            environment: ["APNS_RELAY_APNS_PROXY": "http://proxy.internal:3128/", "APNS_RELAY_APNS_PROXY_CREDENTIALS": "relay:pa55:with-colon"],
            requireService: true)
        let proxy = try #require(fromEnvironment.apns.proxy)
        #expect(proxy.endpoint == APNsEndpoint(host: "proxy.internal", port: 3128))
        #expect(proxy.credentials == APNsProxyCredentials(user: "relay", password: "pa55:with-colon"))
        let printed = fromEnvironment.effectiveValues.map { "\($0.key): \($0.value)" }
        #expect(printed.contains("apns.proxy: http://proxy.internal:3128"))
        #expect(printed.contains("apns.proxy_credentials: <redacted>"))
        #expect(!printed.joined().contains("pa55"))
        #expect(!"\(proxy)".contains("pa55") && !"\(fromEnvironment)".contains("pa55"), "no description shows the password")

        let credentialsFile = try fixture.write("relay:from-file\n")
        let fromFile = try await ConfigurationLoader.load(
            file: file, environment: ["APNS_RELAY_APNS_PROXY": "http://10.0.0.7:8080", "APNS_RELAY_APNS_PROXY_CREDENTIALS_FILE": credentialsFile],
            requireService: true)
        #expect(fromFile.apns.proxy?.credentials == APNsProxyCredentials(user: "relay", password: "from-file"))
        let printedFromFile = fromFile.effectiveValues.map { "\($0.key): \($0.value)" }
        #expect(printedFromFile.contains("apns.proxy_credentials_file: \(credentialsFile)"))
        #expect(!printedFromFile.joined().contains("from-file"))

        let none = try await ConfigurationLoader.load(file: file, environment: [:], requireService: true)
        #expect(none.apns.proxy == nil)
    }

    @Test("a proxy credentials file that does not hold user:password, or both sources at once, is refused")
    func badProxyCredentialsFile() async throws {
        let fixture = try ConfigFixture()
        let file = try fixture.write(fixture.validYAML)
        let noColon = try fixture.write("just-a-Secr3t-Pw\n")
        let error = await #expect(throws: ConfigurationError.self) {
            try await ConfigurationLoader.load(
                file: file, environment: ["APNS_RELAY_APNS_PROXY": "http://proxy:3128", "APNS_RELAY_APNS_PROXY_CREDENTIALS_FILE": noColon],
                requireService: true)
        }
        #expect(error?.key == "apns.proxy_credentials_file" && error?.problem.contains("user:password") == true)
        #expect(error.map { "\($0)" }?.contains("Secr3t-Pw") == false)
        let both = await #expect(throws: ConfigurationError.self) {
            try await ConfigurationLoader.load(
                file: file,
                environment: ["APNS_RELAY_APNS_PROXY": "http://proxy:3128", "APNS_RELAY_APNS_PROXY_CREDENTIALS_FILE": try fixture.write("a:b"),
                              "APNS_RELAY_APNS_PROXY_CREDENTIALS": "a:b"],
                requireService: true)
        }
        #expect(both?.key == "apns.proxy_credentials")
    }

    @Test("the README's configuration table names exactly the keys the loader reads")
    func readmeTableMatchesTheLoader() async throws {
        let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("README.md")
        let text = try String(contentsOf: readme, encoding: .utf8)
        // Rows like "| apns.auth.key_file / key_id / team_id | ...": a full key, then siblings.
        var documented = Set<String>()
        for line in text.split(separator: "\n") where line.hasPrefix("| ") {
            let cell = line.dropFirst(2).prefix { $0 != "|" }.trimmingCharacters(in: .whitespaces)
            let names = cell.components(separatedBy: " / ")
            guard let first = names.first, first.contains("."), !first.contains(" "), !first.contains("`"),
                  ["kafka.", "apns.", "relay.", "log.", "tracing."].contains(where: { first.hasPrefix($0) }) else { continue }
            let parent = first.split(separator: ".").dropLast().joined(separator: ".")
            documented.insert(first)
            for sibling in names.dropFirst() { documented.insert(sibling.contains(".") ? sibling : "\(parent).\(sibling)") }
        }
        documented.remove("kafka.properties.*")
        let read = await ConfigurationLoader.knownKeys()
        #expect(read.subtracting(documented).isEmpty, "read but not documented: \(read.subtracting(documented).sorted())")
        #expect(documented.subtracting(read).isEmpty, "documented but not read: \(documented.subtracting(read).sorted())")
    }
}
