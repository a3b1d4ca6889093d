import APNs

extension RelayConfiguration {
    static let redacted = "<redacted>"

    /// librdkafka properties that carry secrets (passwords, private keys, tokens).
    static func isSecretKafkaProperty(_ name: String) -> Bool {
        let lowered = name.lowercased()
        return lowered.contains("password") || lowered.contains("secret") || lowered.contains("token")
            || lowered == "ssl.key.pem" || lowered == "sasl.oauthbearer.config" || lowered == "ssl_key"
    }

    /// An environment's effective host: the override (own key or `apns.endpoint`) or Apple's.
    private static func endpointValue(_ endpoint: APNsEndpoint?, environment: Environment, kind: String = "") -> String {
        endpoint?.description ?? "(Apple's \(environment.rawValue) \(kind)host)"
    }

    /// Every key with its effective value, in contract order, secrets redacted: what
    /// `check-config` prints and what the service logs at start.
    var effectiveValues: [(key: String, value: String)] {
        var lines: [(String, String)] = [
            ("kafka.brokers", kafka.brokers ?? "(not set)"),
            ("kafka.group_id", kafka.groupID),
            ("kafka.group_instance_id", kafka.groupInstanceID ?? "(not set)"),
            ("kafka.topics.events", kafka.topics.events),
            ("kafka.topics.devices", kafka.topics.devices),
            ("kafka.topics.results", kafka.topics.results),
            ("kafka.topics.failed_tokens", kafka.topics.failedTokens),
            ("kafka.topics.dead_letter", kafka.topics.deadLetter),
            ("kafka.topics.wrong_environment", kafka.topics.wrongEnvironment),
            ("kafka.topics.badge_state", kafka.topics.badgeState),
            ("kafka.transactions", kafka.transactions.rawValue),
        ]
        for (name, value) in kafka.properties.sorted(by: { $0.key < $1.key }) {
            lines.append(("kafka.properties.\(name)", Self.isSecretKafkaProperty(name) ? Self.redacted : value))
        }
        lines += [
            ("apns.transport", apns.transport.rawValue),
            ("apns.http2_client", apns.http2Client.rawValue),
            ("apns.environment", apns.environment.rawValue),
            ("apns.endpoint", apns.endpoint?.description ?? "(Apple's \(apns.environment.rawValue) host)"),
            ("apns.production_endpoint", Self.endpointValue(apns.endpointOverride(for: .production), environment: .production)),
            ("apns.sandbox_endpoint", Self.endpointValue(apns.endpointOverride(for: .sandbox), environment: .sandbox)),
            ("apns.production_management_endpoint",
             Self.endpointValue(apns.managementEndpointOverride(for: .production), environment: .production, kind: "channel management ")),
            ("apns.sandbox_management_endpoint",
             Self.endpointValue(apns.managementEndpointOverride(for: .sandbox), environment: .sandbox, kind: "channel management ")),
            ("apns.feedback_endpoint", apns.feedbackEndpoint?.description ?? "(Apple's \(apns.environment.rawValue) feedback host)"),
            ("apns.ca_file", apns.caFile ?? "(system trust store only)"),
            ("apns.topic", apns.topic ?? "(from each event)"),
        ]
        lines += Self.authenticationValues(apns.authentication, prefix: "apns.auth")
        if let file = apns.authenticationKeyIDFile { lines.append(("apns.auth.key_id_file", file)) }
        for (index, app) in apns.apps.enumerated() {
            lines.append(("apns.apps.\(index).topic", app.topic ?? ""))
            lines += Self.authenticationValues(app.authentication, prefix: "apns.apps.\(index)")
            if let limit = app.keyEnvironment { lines.append(("apns.apps.\(index).key_environment", limit.rawValue)) }
            if let file = app.keyIDFile { lines.append(("apns.apps.\(index).key_id_file", file)) }
        }
        lines += [
            ("apns.connections", "\(apns.connections)"),
            ("apns.binary_command", "\(apns.binaryCommand)"),
            ("apns.feedback_interval_s", "\(apns.feedbackInterval.components.seconds)"),
            ("apns.credential_check_interval_s", "\(apns.credentialCheckInterval.components.seconds)"),
            ("apns.proxy", apns.proxy.map { "http://\($0.endpoint)" } ?? "(none: APNs is connected to directly)"),
        ]
        if let file = apns.proxyCredentialsFile {
            lines.append(("apns.proxy_credentials_file", file))
        } else if apns.proxy?.credentials != nil {
            lines.append(("apns.proxy_credentials", Self.redacted))
        }
        lines += [
            ("relay.reorder_window_ms", "\(relay.reorderWindow.inMilliseconds)"),
            ("relay.max_tokens_per_event", "\(relay.maxTokensPerEvent)"),
            ("relay.failure_timeout_s", "\(relay.failureTimeout.components.seconds)"),
            ("relay.max_in_flight", "\(relay.maxInFlight)"),
            ("relay.urgent_reserve", "\(relay.urgentReserve ?? relay.maxInFlight / 10)"),
            ("relay.max_in_flight_per_user", "\(relay.maxInFlightPerUser ?? max(1, relay.maxInFlight / 10))"),
            ("relay.read_ahead_bytes", "\(relay.readAheadBytes)"),
            ("relay.rate_limits", relay.rateLimits.isEmpty ? "(none)" : relay.rateLimits.map(\.description).joined(separator: ",")),
            ("relay.max_attempts", "\(relay.maxAttempts)"),
            ("relay.max_retry_s", "\(relay.maxRetry.components.seconds)"),
            ("relay.shutdown_timeout_s", "\(relay.shutdownTimeout.components.seconds)"),
            ("relay.transaction_interval_ms", "\(relay.transactionInterval.inMilliseconds)"),
            ("relay.transaction_timeout_ms", "\(relay.transactionTimeout.inMilliseconds)"),
            ("relay.http_port", "\(relay.httpPort)"),
            ("log.level", log.level.rawValue),
            ("log.format", log.format.rawValue),
            ("tracing.otlp_endpoint", tracing.otlpEndpoint ?? "(off)"),
        ]
        return lines
    }

    /// One credential's keys under `prefix`, the password redacted.
    private static func authenticationValues(_ authentication: Authentication, prefix: String) -> [(key: String, value: String)] {
        switch authentication {
        case .none:
            return prefix == "apns.auth" ? [("apns.auth", "(none)")] : []
        case .token(let keyFile, let keyID, let teamID):
            return [("\(prefix).key_file", keyFile), ("\(prefix).key_id", keyID), ("\(prefix).team_id", teamID)]
        case .certificate(let certificateFile, let privateKeyFile):
            return [("\(prefix).cert_file", certificateFile), ("\(prefix).private_key_file", privateKeyFile)]
        case .pkcs12(let file, _):
            return [("\(prefix).p12_file", file), ("\(prefix).p12_password", redacted)]
        }
    }
}
