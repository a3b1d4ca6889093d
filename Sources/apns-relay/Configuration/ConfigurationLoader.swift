import APNs
import Configuration
import Foundation
import Logging
import Relay
import Yams

/// Reads the configuration: a YAML file (optional, parsed once with Yams) overridden by
/// `APNS_RELAY_*` environment variables, through swift-configuration. Every problem becomes a `ConfigurationError` naming
/// its key; unknown keys in the file are errors too (a typo must not silently fall back to a default).
enum ConfigurationLoader {
    static let environmentPrefix = "APNS_RELAY_"
    static let propertiesPrefix = "kafka.properties."

    /// Whether `key`'s value is a secret: never printed, never logged.
    static func isSecretKey(_ key: String) -> Bool {
        key == "apns.auth.p12_password" || key == "apns.proxy_credentials"
            || (key.hasPrefix("apns.apps.") && key.hasSuffix(".p12_password"))
    }

    /// Loads and validates. `requireService` adds what `run` needs (brokers, credentials).
    static func load(
        file: String?,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        requireService: Bool
    ) async throws(ConfigurationError) -> RelayConfiguration {
        var keysRead: Set<String> = []
        return try await load(file: file, environment: environment, requireService: requireService, keysRead: &keysRead)
    }

    /// Every key of the contract except `kafka.properties.*`: the keys the loader reads.
    static func knownKeys() async -> Set<String> {
        var keysRead: Set<String> = []
        _ = try? await load(file: nil, environment: [:], requireService: false, keysRead: &keysRead)
        return keysRead
    }

    private static func load(
        file: String?, environment: [String: String], requireService: Bool, keysRead: inout Set<String>
    ) async throws(ConfigurationError) -> RelayConfiguration {
        let fileValues = try readFileKeys(file)
        let environmentVariables = environment.filter { $0.key.hasPrefix(environmentPrefix) }
        var stripped: [String: String] = [:]
        for (name, value) in environmentVariables {
            stripped[String(name.dropFirst(environmentPrefix.count))] = value
        }

        var providers: [any ConfigProvider] = [
            EnvironmentVariablesProvider(
                environmentVariables: stripped,
                secretsSpecifier: .dynamic { name, _ in
                    ["APNS_AUTH_P12_PASSWORD", "APNS_PROXY_CREDENTIALS"].contains(name)
                        || (name.hasPrefix("APNS_APPS_") && name.hasSuffix("_P12_PASSWORD"))
                })
        ]
        if file != nil {
            providers.append(YAMLTreeProvider(leaves: fileValues.leaves))
        }
        let reader = ConfigReader(providers: providers)
        var values = Values(reader: reader)

        var configuration = RelayConfiguration()
        configuration.kafka.brokers = try await values.string("kafka.brokers")
        configuration.kafka.groupID = try await values.string("kafka.group_id") ?? configuration.kafka.groupID
        configuration.kafka.groupInstanceID = try await values.string("kafka.group_instance_id").flatMap { $0.isEmpty ? nil : $0 }
        configuration.kafka.topics.events = try await values.topic("kafka.topics.events") ?? configuration.kafka.topics.events
        configuration.kafka.topics.devices = try await values.topic("kafka.topics.devices") ?? configuration.kafka.topics.devices
        configuration.kafka.topics.results = try await values.topic("kafka.topics.results") ?? configuration.kafka.topics.results
        configuration.kafka.topics.failedTokens = try await values.topic("kafka.topics.failed_tokens") ?? configuration.kafka.topics.failedTokens
        configuration.kafka.topics.deadLetter = try await values.topic("kafka.topics.dead_letter") ?? configuration.kafka.topics.deadLetter
        configuration.kafka.topics.badgeState = try await values.topic("kafka.topics.badge_state") ?? configuration.kafka.topics.badgeState
        configuration.kafka.topics.wrongEnvironment = try await values.topic("kafka.topics.wrong_environment") ?? configuration.kafka.topics.wrongEnvironment
        configuration.kafka.properties = kafkaProperties(file: fileValues.properties, environment: stripped)
        configuration.kafka.transactions = try await values.choice("kafka.transactions", RelayConfiguration.Transactions.self) ?? configuration.kafka.transactions

        configuration.apns.transport = try await values.choice("apns.transport", RelayConfiguration.Transport.self) ?? .http2
        configuration.apns.http2Client = try await values.choice("apns.http2_client", RelayConfiguration.HTTP2Client.self) ?? configuration.apns.http2Client
        configuration.apns.environment = try await values.choice("apns.environment", RelayConfiguration.Environment.self) ?? .production
        configuration.apns.endpoint = try await values.hostAndPort("apns.endpoint")
        configuration.apns.productionEndpoint = try await values.hostAndPort("apns.production_endpoint")
        configuration.apns.sandboxEndpoint = try await values.hostAndPort("apns.sandbox_endpoint")
        try checkEndpointConflict(configuration.apns)
        configuration.apns.productionManagementEndpoint = try await values.hostAndPort("apns.production_management_endpoint")
        configuration.apns.sandboxManagementEndpoint = try await values.hostAndPort("apns.sandbox_management_endpoint")
        configuration.apns.feedbackEndpoint = try await values.hostAndPort("apns.feedback_endpoint")
        configuration.apns.caFile = try await values.readableFile("apns.ca_file")
        configuration.apns.topic = try await values.string("apns.topic")
        configuration.apns.connections = try await values.integer("apns.connections", in: 1...64) ?? configuration.apns.connections
        configuration.apns.binaryCommand = try await values.integer("apns.binary_command", in: 0...2) ?? configuration.apns.binaryCommand
        configuration.apns.feedbackInterval = try await values.seconds("apns.feedback_interval_s", in: 60...604_800) ?? configuration.apns.feedbackInterval
        (configuration.apns.authentication, configuration.apns.authenticationKeyIDFile) = try await authentication(&values, prefix: "apns.auth")
        configuration.apns.credentialCheckInterval = try await values.seconds("apns.credential_check_interval_s", in: 1...3_600)
            ?? configuration.apns.credentialCheckInterval
        configuration.apns.apps = try await apps(
            &values, count: max(fileValues.appCount, environmentAppCount(stripped)),
            single: configuration.apns.authentication, defaultTopic: configuration.apns.topic)
        (configuration.apns.proxy, configuration.apns.proxyCredentialsFile) = try await proxy(&values)

        configuration.relay.reorderWindow = try await values.integer("relay.reorder_window_ms", in: 0...600_000).map { .milliseconds($0) } ?? configuration.relay.reorderWindow
        configuration.relay.maxTokensPerEvent = try await values.integer("relay.max_tokens_per_event", in: 1...100_000) ?? configuration.relay.maxTokensPerEvent
        configuration.relay.failureTimeout = try await values.seconds("relay.failure_timeout_s", in: 1...86_400) ?? configuration.relay.failureTimeout
        configuration.relay.maxInFlight = try await values.integer("relay.max_in_flight", in: 1...1_000_000) ?? configuration.relay.maxInFlight
        configuration.relay.urgentReserve = try await values.integer("relay.urgent_reserve", in: 0...1_000_000) ?? configuration.relay.urgentReserve
        if let reserve = configuration.relay.urgentReserve, reserve >= configuration.relay.maxInFlight {
            throw ConfigurationError(key: "relay.urgent_reserve",
                                     problem: "must be below relay.max_in_flight (\(configuration.relay.maxInFlight)), or bulk notifications could never be sent")
        }
        configuration.relay.maxInFlightPerUser = try await values.integer("relay.max_in_flight_per_user", in: 1...1_000_000)
            ?? configuration.relay.maxInFlightPerUser
        configuration.relay.readAheadBytes = try await values.integer("relay.read_ahead_bytes", in: 0...(1 << 40)) ?? configuration.relay.readAheadBytes
        if let rateLimits = try await values.string("relay.rate_limits") {
            do {
                configuration.relay.rateLimits = try RateLimitRule.parseList(rateLimits)
            } catch {
                throw ConfigurationError(key: "relay.rate_limits", problem: "rule '\(error.rule)': \(error.problem)")
            }
        }
        configuration.relay.maxAttempts = try await values.integer("relay.max_attempts", in: 1...100) ?? configuration.relay.maxAttempts
        configuration.relay.maxRetry = try await values.seconds("relay.max_retry_s", in: 1...86_400) ?? configuration.relay.maxRetry
        configuration.relay.shutdownTimeout = try await values.seconds("relay.shutdown_timeout_s", in: 1...3_600) ?? configuration.relay.shutdownTimeout
        configuration.relay.transactionInterval = try await values.integer("relay.transaction_interval_ms", in: 100...60_000).map { .milliseconds($0) }
            ?? configuration.relay.transactionInterval
        configuration.relay.transactionTimeout = try await values.integer("relay.transaction_timeout_ms", in: 1_000...900_000).map { .milliseconds($0) }
            ?? configuration.relay.transactionTimeout
        guard configuration.relay.transactionTimeout >= configuration.relay.transactionInterval * 2 else {
            throw ConfigurationError(key: "relay.transaction_timeout_ms",
                                     problem: "must be at least twice relay.transaction_interval_ms (\(configuration.relay.transactionInterval.inMilliseconds)): a transaction the interval commits would outlive it")
        }
        configuration.relay.httpPort = try await values.integer("relay.http_port", in: 0...65_535) ?? configuration.relay.httpPort

        if let level = try await values.string("log.level") {
            guard let parsed = Logger.Level(rawValue: level.lowercased()) else {
                throw ConfigurationError(key: "log.level", problem: "must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), not '\(level)'")
            }
            configuration.log.level = parsed
        }
        configuration.log.format = try await values.choice("log.format", RelayConfiguration.LogFormat.self) ?? .text
        if let endpoint = try await values.string("tracing.otlp_endpoint") {
            guard let url = URL(string: endpoint), ["http", "https"].contains(url.scheme?.lowercased() ?? ""), url.host?.isEmpty == false,
                  url.user == nil, url.query == nil else {
                throw ConfigurationError(key: "tracing.otlp_endpoint",
                                         problem: "must be an OTLP/HTTP collector's http:// or https:// URL (e.g. http://otel-collector:4318), not '\(endpoint)'")
            }
            configuration.tracing.otlpEndpoint = endpoint
        }

        // The known keys are the ones read above: the reads are the one list of keys in code.
        keysRead = values.keysRead
        if let unknown = fileValues.keys.subtracting(values.keysRead).filter({ !$0.hasPrefix(propertiesPrefix) }).sorted().first {
            throw ConfigurationError(key: unknown, problem: "unknown key (see the configuration table in the README)")
        }
        try validateKafkaProperties(configuration)
        if requireService { try validateForService(configuration) }
        return configuration
    }

    // MARK: Parts

    /// `apns.proxy` and its credentials: from `apns.proxy_credentials_file` or the secret `apns.proxy_credentials`,
    /// never from the URL, which is printed with the configuration. Errors never echo a value that may hold a password.
    private static func proxy(_ values: inout Values) async throws(ConfigurationError) -> (APNsProxy?, credentialsFile: String?) {
        let url = try await values.string("apns.proxy")
        let credentialsFile = try await values.readableFile("apns.proxy_credentials_file")
        let secret = try await values.string("apns.proxy_credentials", isSecret: true)
        if credentialsFile != nil && secret != nil {
            throw ConfigurationError(key: "apns.proxy_credentials", problem: "set either apns.proxy_credentials_file or apns.proxy_credentials, not both")
        }
        guard let url else {
            if credentialsFile != nil { throw ConfigurationError(key: "apns.proxy_credentials_file", problem: "needs apns.proxy (http://host:port)") }
            if secret != nil { throw ConfigurationError(key: "apns.proxy_credentials", problem: "needs apns.proxy (http://host:port)") }
            return (nil, nil)
        }
        let endpoint = try proxyEndpoint(url)
        var credentials: APNsProxyCredentials?
        if let credentialsFile {
            let text: String
            do {
                text = try String(contentsOfFile: credentialsFile, encoding: .utf8)
            } catch {
                throw ConfigurationError(key: "apns.proxy_credentials_file", problem: "cannot read '\(credentialsFile)': \(error.localizedDescription)")
            }
            // A file written by `echo` or a Kubernetes Secret may end with a newline that is no part of the password.
            guard let parsed = APNsProxyCredentials(parsing: text.trimmingCharacters(in: .newlines)) else {
                throw ConfigurationError(key: "apns.proxy_credentials_file", problem: "'\(credentialsFile)' must hold user:password")
            }
            credentials = parsed
        } else if let secret {
            guard let parsed = APNsProxyCredentials(parsing: secret) else {
                throw ConfigurationError(key: "apns.proxy_credentials", problem: "must be user:password")
            }
            credentials = parsed
        }
        return (APNsProxy(endpoint: endpoint, credentials: credentials), credentialsFile)
    }

    /// `http://host:port` (a trailing `/` allowed): the proxy is spoken to in plain HTTP, and only `CONNECT` is sent.
    static func proxyEndpoint(_ url: String) throws(ConfigurationError) -> APNsEndpoint {
        let key = "apns.proxy"
        let scheme = "http://"
        // A value with `@` may carry a password: it is never repeated in an error.
        let shown = url.contains("@") ? "" : " '\(url)'"
        guard url.lowercased().hasPrefix(scheme) else {
            throw ConfigurationError(key: key, problem: "must be http://host:port (an HTTP proxy that supports CONNECT), not\(shown.isEmpty ? " that" : shown)")
        }
        var authority = Substring(url.dropFirst(scheme.count))
        if authority.hasSuffix("/") { authority = authority.dropLast() }
        if authority.contains("@") {
            throw ConfigurationError(
                key: key,
                problem: "must not hold credentials (user:password@): the configuration is printed and logged; put them in apns.proxy_credentials_file or APNS_RELAY_APNS_PROXY_CREDENTIALS")
        }
        guard !authority.contains("/"), !authority.contains("?"), !authority.contains("#") else {
            throw ConfigurationError(key: key, problem: "must be http://host:port with no path, not\(shown)")
        }
        guard let endpoint = APNsEndpoint(parsing: String(authority)) else {
            throw ConfigurationError(key: key, problem: "must be http://host:port with a port from 1 to 65535, not\(shown)")
        }
        return endpoint
    }

    /// `apns.endpoint` replaces the configured environment's host, as does that environment's own key: two
    /// different answers to one question are refused rather than one silently ignored.
    private static func checkEndpointConflict(_ apns: RelayConfiguration.APNsSettings) throws(ConfigurationError) {
        let ownKey = "apns.\(apns.environment.rawValue)_endpoint"
        let own = apns.environment == .production ? apns.productionEndpoint : apns.sandboxEndpoint
        if let endpoint = apns.endpoint, let own, endpoint != own {
            throw ConfigurationError(
                key: "apns.endpoint",
                problem: "'\(endpoint)' conflicts with \(ownKey) '\(own)': both replace the \(apns.environment.rawValue) host (apns.environment); set one of them")
        }
    }

    static func isAppleIdentifier(_ text: String) -> Bool {
        text.count == 10 && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }
    }

    /// What `run` needs beyond a well-formed file.
    private static func validateForService(_ configuration: RelayConfiguration) throws(ConfigurationError) {
        guard let brokers = configuration.kafka.brokers, !brokers.isEmpty else {
            throw ConfigurationError(key: "kafka.brokers", problem: "required: bootstrap servers (host:port,...) or 'embedded'")
        }
        let apps = configuration.apns.resolvedApps
        if configuration.apns.transport == .http2 && apps.isEmpty {
            throw ConfigurationError(key: "apns.auth", problem: "required: token (key_file, key_id, team_id), certificate (cert_file, private_key_file) or PKCS#12 (p12_file, p12_password)")
        }
        if configuration.apns.transport == .binary {
            if apps.isEmpty {
                throw ConfigurationError(key: "apns.auth", problem: "the binary transport needs a client certificate (cert_file and private_key_file, or p12_file)")
            }
            for app in apps {
                switch app.authentication {
                case .certificate, .pkcs12:
                    break
                case .token, .none:
                    throw ConfigurationError(key: app.keyPrefix, problem: "the binary transport needs a client certificate (cert_file and private_key_file, or p12_file)")
                }
            }
        }
    }

    /// Checks every pass-through property with librdkafka itself, so a typo stops the start.
    private static func validateKafkaProperties(_ configuration: RelayConfiguration) throws(ConfigurationError) {
        guard !configuration.kafka.properties.isEmpty else { return }
        do {
            try KafkaPropertiesValidator.validate(configuration.kafka.properties)
        } catch {
            throw error
        }
    }

    /// `kafka.properties.*` from the file, overridden by `APNS_RELAY_KAFKA_PROPERTIES_*`
    /// (lower-cased, `_` → `.`: `..._SASL_MECHANISM` → `sasl.mechanism`).
    static func kafkaProperties(file: [String: String], environment: [String: String]) -> [String: String] {
        var properties = file
        let prefix = "KAFKA_PROPERTIES_"
        for (name, value) in environment where name.hasPrefix(prefix) {
            let property = name.dropFirst(prefix.count).lowercased().replacingOccurrences(of: "_", with: ".")
            properties[property] = value
        }
        return properties
    }

    /// The file's one parse: its keys, flattened to dotted paths, their values (the leaves of the
    /// tree, for swift-configuration) and its `kafka.properties` map.
    private static func readFileKeys(_ file: String?) throws(ConfigurationError) -> (keys: Set<String>, leaves: [String: YAMLTreeProvider.Leaf], properties: [String: String], appCount: Int) {
        guard let file else { return ([], [:], [:], 0) }
        let text: String
        do {
            text = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw ConfigurationError(key: "--config", problem: "cannot read \(file): \(error.localizedDescription)")
        }
        // The node tree, not `Yams.load`: building `[String: Any]` traps on a key that is a list or a
        // mapping (`{[a]: b}`), which must be a configuration error like any other (found by fuzzing).
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch {
            // The parser's message ends with the offending line, which may hold a secret (a password
            // written in the file): report only its first line, the position and the problem.
            let summary = "\(error)".split(separator: "\n").first.map { String($0).trimmingCharacters(in: CharacterSet(charactersIn: ": ")) } ?? ""
            throw ConfigurationError(key: "--config", problem: "\(file) is not valid YAML: \(summary)")
        }
        guard let root else { return ([], [:], [:], 0) }
        guard let mapping = root.mapping else {
            throw ConfigurationError(key: "--config", problem: "\(file) must be a YAML mapping of keys")
        }
        var keys = Set<String>()
        var leaves: [String: YAMLTreeProvider.Leaf] = [:]
        var properties: [String: String] = [:]
        func name(_ node: Node, under path: String) throws(ConfigurationError) -> String {
            guard let name = node.scalar?.string, !name.isEmpty else {
                throw ConfigurationError(key: path.isEmpty ? "--config" : path, problem: "\(file): a key must be a non-empty name, not a list or a mapping")
            }
            return path.isEmpty ? name : "\(path).\(name)"
        }
        // `apns.apps` is a list of mappings of scalars: item N's `topic` becomes `apns.apps.N.topic`, the
        // key its environment variable `APNS_RELAY_APNS_APPS_N_TOPIC` overrides.
        var appCount = 0
        func walkApps(_ node: Node) throws(ConfigurationError) {
            guard let items = node.sequence else {
                throw ConfigurationError(key: "apns.apps", problem: "must be a list of apps (- topic: ..., with a credential)")
            }
            guard items.count <= maxApps else {
                throw ConfigurationError(key: "apns.apps", problem: "at most \(maxApps) apps, not \(items.count)")
            }
            for (index, item) in items.enumerated() {
                guard let fields = item.mapping else {
                    throw ConfigurationError(key: "apns.apps.\(index)", problem: "must be a mapping (topic, and key_file/key_id/team_id, cert_file/private_key_file or p12_file/p12_password)")
                }
                for (fieldNode, field) in fields {
                    let key = try name(fieldNode, under: "apns.apps.\(index)")
                    guard field.scalar != nil else { throw ConfigurationError(key: key, problem: "must be a single value") }
                    keys.insert(key)
                    leaves[key] = YAMLTreeProvider.Leaf(field)
                }
            }
            appCount = items.count
        }
        // librdkafka property names contain dots: flatten nested maps back into them.
        func flatten(_ map: Node.Mapping, prefix: String) throws(ConfigurationError) {
            for (part, item) in map {
                let property = try name(part, under: prefix)
                if let nested = item.mapping {
                    try flatten(nested, prefix: property)
                } else if item.scalar != nil {
                    properties[property] = "\(item.any)"
                } else {
                    throw ConfigurationError(key: propertiesPrefix + property, problem: "must be a single value, not a list")
                }
            }
        }
        func walk(_ node: Node.Mapping, path: String) throws(ConfigurationError) {
            for (nameNode, value) in node {
                let key = try name(nameNode, under: path)
                if key == "apns.apps" {
                    try walkApps(value)
                } else if key == "kafka.properties", let map = value.mapping {
                    try flatten(map, prefix: "")
                    for property in properties.keys { keys.insert(propertiesPrefix + property) }
                } else if let nested = value.mapping {
                    try walk(nested, path: key)
                } else {
                    keys.insert(key)
                    leaves[key] = YAMLTreeProvider.Leaf(value)
                }
            }
        }
        try walk(mapping, path: "")
        return (keys, leaves, properties, appCount)
    }
}

/// Typed reads that turn swift-configuration's errors into ones naming the key.
struct Values {
    let reader: ConfigReader
    /// Every key asked for, whether it had a value or not.
    private(set) var keysRead: Set<String> = []

    /// Counts `key` as known without reading a value (a list read item by item).
    mutating func markRead(_ key: String) { keysRead.insert(key) }

    mutating func string(_ key: String, isSecret: Bool = false) async throws(ConfigurationError) -> String? {
        keysRead.insert(key)
        do {
            if let text = try await reader.fetchString(forKey: ConfigKey(key), isSecret: isSecret) {
                return text.isEmpty ? nil : text
            }
            // A YAML number or boolean where a string is expected (e.g. a numeric team id).
            if let number = try? await reader.fetchInt(forKey: ConfigKey(key)) { return String(number) }
            return nil
        } catch {
            throw ConfigurationError(key: key, problem: "must be a string")
        }
    }

    mutating func integer(_ key: String, in range: ClosedRange<Int>) async throws(ConfigurationError) -> Int? {
        keysRead.insert(key)
        let value: Int?
        do {
            value = try await reader.fetchInt(forKey: ConfigKey(key))
        } catch {
            throw ConfigurationError(key: key, problem: "must be an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        guard let value else { return nil }
        guard range.contains(value) else {
            throw ConfigurationError(key: key, problem: "must be an integer from \(range.lowerBound) to \(range.upperBound), not \(value)")
        }
        return value
    }

    /// A whole number of seconds, as a duration.
    mutating func seconds(_ key: String, in range: ClosedRange<Int>) async throws(ConfigurationError) -> Duration? {
        try await integer(key, in: range).map { .seconds($0) }
    }

    mutating func choice<Choice: RawRepresentable & CaseIterable>(_ key: String, _ type: Choice.Type) async throws(ConfigurationError) -> Choice? where Choice.RawValue == String {
        guard let text = try await string(key) else { return nil }
        guard let choice = Choice(rawValue: text.lowercased()) else {
            throw ConfigurationError(key: key, problem: "must be one of \(Choice.allCases.map(\.rawValue).joined(separator: ", ")), not '\(text)'")
        }
        return choice
    }

    mutating func hostAndPort(_ key: String) async throws(ConfigurationError) -> APNsEndpoint? {
        guard let text = try await string(key) else { return nil }
        guard let value = APNsEndpoint(parsing: text) else {
            throw ConfigurationError(key: key, problem: "must be host:port, not '\(text)'")
        }
        return value
    }

    mutating func topic(_ key: String) async throws(ConfigurationError) -> String? {
        guard let name = try await string(key) else { return nil }
        let allowed = name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "_" || $0 == "-") }
        guard allowed, name.count <= 249 else {
            throw ConfigurationError(key: key, problem: "must be a Kafka topic name (letters, digits, '.', '_', '-'; at most 249), not '\(name)'")
        }
        return name
    }

    mutating func readableFile(_ key: String) async throws(ConfigurationError) -> String? {
        guard let path = try await string(key) else { return nil }
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw ConfigurationError(key: key, problem: "file '\(path)' does not exist or cannot be read")
        }
        return path
    }
}
