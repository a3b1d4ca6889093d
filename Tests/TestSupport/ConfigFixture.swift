package import Foundation

/// A scratch directory with a .p8 key and helpers to write config files into it.
package struct ConfigFixture {
    package let directory: URL
    package let keyFile: String

    package init() throws {
        directory = URL(fileURLWithPath: scratchPath("apns-relay-config"))
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        keyFile = directory.appendingPathComponent("AuthKey.p8").path
        // Content is not parsed by the loader; it only has to exist and be readable.
        try "-----BEGIN PRIVATE KEY-----\nMIGTAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBHkwdwIBAQQg\n-----END PRIVATE KEY-----\n".write(toFile: keyFile, atomically: true, encoding: .utf8)
    }

    package func write(_ yaml: String) throws -> String {
        let path = directory.appendingPathComponent("relay-\(UUID().uuidString).yaml").path
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    package var validYAML: String {
        """
        kafka:
          brokers: kafka-1:9092,kafka-2:9092
          properties:
            security.protocol: SASL_SSL
            sasl.mechanism: SCRAM-SHA-512
            sasl.username: relay
            sasl.password: s3cret-sasl
        apns:
          environment: sandbox
          topic: com.example.app
          auth:
            key_file: \(keyFile)
            key_id: ABC123DEFG
            team_id: TEAM123456
        relay:
          max_in_flight: 500
        log:
          format: json
        """
    }

    package static let badValues: [(environment: [String: String], key: String, problem: String)] = [
        (["APNS_RELAY_KAFKA_BROKERS": ""], "kafka.brokers", "required"),
        (["APNS_RELAY_RELAY_MAX_IN_FLIGHT": "lots"], "relay.max_in_flight", "must be an integer"),
        (["APNS_RELAY_RELAY_MAX_IN_FLIGHT": "0"], "relay.max_in_flight", "not 0"),
        (["APNS_RELAY_RELAY_REORDER_WINDOW_MS": "-1"], "relay.reorder_window_ms", "not -1"),
        (["APNS_RELAY_RELAY_URGENT_RESERVE": "500"], "relay.urgent_reserve", "must be below relay.max_in_flight (500)"),
        (["APNS_RELAY_RELAY_MAX_IN_FLIGHT_PER_USER": "0"], "relay.max_in_flight_per_user", "not 0"),
        (["APNS_RELAY_RELAY_READ_AHEAD_BYTES": "-1"], "relay.read_ahead_bytes", "not -1"),
        (["APNS_RELAY_RELAY_RATE_LIMITS": "*/background=fast"], "relay.rate_limits", "rule '*/background=fast'"),
        (["APNS_RELAY_RELAY_MAX_ATTEMPTS": "x"], "relay.max_attempts", "must be an integer"),
        (["APNS_RELAY_RELAY_MAX_RETRY_S": "0"], "relay.max_retry_s", "not 0"),
        (["APNS_RELAY_RELAY_SHUTDOWN_TIMEOUT_S": "0"], "relay.shutdown_timeout_s", "not 0"),
        (["APNS_RELAY_RELAY_TRANSACTION_TIMEOUT_MS": "999"], "relay.transaction_timeout_ms", "not 999"),
        (["APNS_RELAY_RELAY_TRANSACTION_TIMEOUT_MS": "1500", "APNS_RELAY_RELAY_TRANSACTION_INTERVAL_MS": "1000"], "relay.transaction_timeout_ms",
         "at least twice relay.transaction_interval_ms"),
        (["APNS_RELAY_RELAY_HTTP_PORT": "70000"], "relay.http_port", "not 70000"),
        (["APNS_RELAY_APNS_TRANSPORT": "carrier-pigeon"], "apns.transport", "http2, binary"),
        (["APNS_RELAY_APNS_ENVIRONMENT": "staging"], "apns.environment", "production, sandbox"),
        (["APNS_RELAY_APNS_ENDPOINT": "localhost"], "apns.endpoint", "host:port"),
        (["APNS_RELAY_APNS_FEEDBACK_ENDPOINT": "h:99999"], "apns.feedback_endpoint", "host:port"),
        (["APNS_RELAY_APNS_PRODUCTION_ENDPOINT": "127.0.0.1"], "apns.production_endpoint", "host:port"),
        (["APNS_RELAY_APNS_SANDBOX_ENDPOINT": ":2197"], "apns.sandbox_endpoint", "host:port"),
        (["APNS_RELAY_APNS_PRODUCTION_MANAGEMENT_ENDPOINT": "localhost"], "apns.production_management_endpoint", "host:port"),
        (["APNS_RELAY_APNS_SANDBOX_MANAGEMENT_ENDPOINT": "127.0.0.1:0"], "apns.sandbox_management_endpoint", "host:port"),
        // validYAML's apns.environment is sandbox: apns.endpoint and apns.sandbox_endpoint both replace its host.
        (["APNS_RELAY_APNS_ENDPOINT": "127.0.0.1:2197", "APNS_RELAY_APNS_SANDBOX_ENDPOINT": "127.0.0.1:2198"], "apns.endpoint",
         "conflicts with apns.sandbox_endpoint"),
        (["APNS_RELAY_APNS_CA_FILE": "/nonexistent/ca.pem"], "apns.ca_file", "does not exist"),
        (["APNS_RELAY_APNS_CONNECTIONS": "0"], "apns.connections", "not 0"),
        (["APNS_RELAY_APNS_BINARY_COMMAND": "3"], "apns.binary_command", "not 3"),
        (["APNS_RELAY_APNS_FEEDBACK_INTERVAL_S": "5"], "apns.feedback_interval_s", "not 5"),
        (["APNS_RELAY_APNS_AUTH_KEY_ID": "short"], "apns.auth.key_id", "10 letters or digits"),
        (["APNS_RELAY_APNS_AUTH_TEAM_ID": "TEAM-12345"], "apns.auth.team_id", "10 letters or digits"),
        (["APNS_RELAY_APNS_AUTH_KEY_FILE": "/nonexistent/key.p8"], "apns.auth.key_file", "does not exist"),
        (["APNS_RELAY_APNS_AUTH_P12_PASSWORD": "pw"], "apns.auth", "choose one authentication method"),
        (["APNS_RELAY_KAFKA_TOPICS_EVENTS": "push events"], "kafka.topics.events", "Kafka topic name"),
        (["APNS_RELAY_LOG_LEVEL": "loud"], "log.level", "must be one of"),
        (["APNS_RELAY_LOG_FORMAT": "xml"], "log.format", "text, json"),
        (["APNS_RELAY_TRACING_OTLP_ENDPOINT": "otel-collector:4318"], "tracing.otlp_endpoint", "http:// or https:// URL"),
        (["APNS_RELAY_TRACING_OTLP_ENDPOINT": "grpc://otel-collector:4317"], "tracing.otlp_endpoint", "not 'grpc://otel-collector:4317'"),
        (["APNS_RELAY_KAFKA_PROPERTIES_NO_SUCH_PROPERTY": "1"], "kafka.properties.no.such.property", "No such configuration property"),
        (["APNS_RELAY_KAFKA_PROPERTIES_LINGER_MS": "soon"], "kafka.properties.linger.ms", "linger.ms"),
        // apns.proxy: its errors never repeat a password (Secr3t-Pw), wherever it was written.
        (["APNS_RELAY_APNS_PROXY": "http://relay:Secr3t-Pw@proxy:3128"], "apns.proxy", "must not hold credentials"),
        (["APNS_RELAY_APNS_PROXY": "https://proxy:3128"], "apns.proxy", "must be http://host:port"),
        (["APNS_RELAY_APNS_PROXY": "socks5://u:Secr3t-Pw@proxy:1080"], "apns.proxy", "must be http://host:port"),
        (["APNS_RELAY_APNS_PROXY": "proxy:3128"], "apns.proxy", "must be http://host:port"),
        (["APNS_RELAY_APNS_PROXY": "http://proxy"], "apns.proxy", "port"),
        (["APNS_RELAY_APNS_PROXY": "http://proxy:0"], "apns.proxy", "port"),
        (["APNS_RELAY_APNS_PROXY": "http://proxy:3128/path"], "apns.proxy", "no path"),
        (["APNS_RELAY_APNS_PROXY": "http://proxy:3128", "APNS_RELAY_APNS_PROXY_CREDENTIALS_FILE": "/nonexistent/credentials"],
         "apns.proxy_credentials_file", "does not exist"),
        (["APNS_RELAY_APNS_PROXY": "http://proxy:3128", "APNS_RELAY_APNS_PROXY_CREDENTIALS": "no-colon-Secr3t-Pw"],
         "apns.proxy_credentials", "user:password"),
        (["APNS_RELAY_APNS_PROXY_CREDENTIALS": "relay:Secr3t-Pw"], "apns.proxy_credentials", "needs apns.proxy"),
    ]
}
