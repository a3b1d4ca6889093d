import APNs
import Logging
import Relay

/// The effective configuration of `apns-relay` (contract: "Configuration").
///
/// Built by `ConfigurationLoader` from a YAML file overridden by `APNS_RELAY_*` environment
/// variables; every value has been validated, and every error names its key.
struct RelayConfiguration: Sendable, Equatable {
    var kafka = KafkaSettings()
    var apns = APNsSettings()
    var relay = RelaySettings()
    var log = LogSettings()
    var tracing = TracingSettings()

    struct KafkaSettings: Sendable, Equatable {
        /// Bootstrap servers, or `embedded` for the in-process mock cluster. Required for `run`.
        var brokers: String?
        var groupID = "apns-relay"
        /// `kafka.group_instance_id`: the consumer's `group.instance.id` (static membership, KIP-345), unique per
        /// replica and the same across its restarts; `nil`: a new member at each start.
        var groupInstanceID: String?
        var topics = Topics()
        /// Passed to librdkafka unchanged.
        var properties: [String: String] = [:]
        /// `kafka.transactions`: whether the relay's writes commit in per-partition Kafka transactions.
        var transactions = Transactions.on

        var isEmbedded: Bool { brokers == "embedded" }
    }

    /// `kafka.transactions`.
    enum Transactions: String, Sendable, Equatable, CaseIterable {
        /// Everything written for an events partition commits with its offsets in the partition's transaction.
        case on
        /// Idempotent producers and plain offset commits (brokers without transactions); a relay cut off from
        /// Kafka may then make writes visible after its partitions moved.
        case off
    }

    struct Topics: Sendable, Equatable {
        var events = "push.events"
        var devices = "push.devices"
        var results = "push.results"
        var failedTokens = "push.failed-tokens"
        var deadLetter = "push.dlq"
        var wrongEnvironment = "push.wrong-environment"
        var badgeState = "push.badge-state"
    }

    enum Transport: String, Sendable, Equatable, CaseIterable {
        case http2
        case binary
    }

    /// `apns.http2_client`: the HTTP/2 implementation of the provider API's connections (both speak the same
    /// protocol to APNs, through the same TLS, credentials and proxy).
    enum HTTP2Client: String, Sendable, Equatable, CaseIterable {
        /// swift-nio-http2.
        case nio
        /// libnghttp2 (the library of curl and h2load) behind NIOSSL: about half the CPU per request.
        case nghttp2
    }

    /// `apns.environment`, and the environment of each device registration: the relay's own type.
    typealias Environment = APNsEnvironment

    /// How the relay proves who it is to APNs.
    /// Printed (a log line describing a value that holds one) without the PKCS#12 password.
    enum Authentication: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
        case none
        /// A .p8 signing key: ES256 JWTs.
        case token(keyFile: String, keyID: String, teamID: String)
        /// A client certificate and its private key, PEM files.
        case certificate(certificateFile: String, privateKeyFile: String)
        /// A PKCS#12 bundle and its password.
        case pkcs12(file: String, password: String)

        var description: String {
            switch self {
            case .none: "none"
            case .token(let keyFile, let keyID, let teamID): "token(keyFile: \(keyFile), keyID: \(keyID), teamID: \(teamID))"
            case .certificate(let certificateFile, let privateKeyFile): "certificate(\(certificateFile), \(privateKeyFile))"
            case .pkcs12(let file, _): "pkcs12(file: \(file), password: <redacted>)"
            }
        }

        var debugDescription: String { description }
    }

    /// One app of `apns.apps`: a bundle id and the credential that sends for it.
    struct App: Sendable, Equatable {
        /// The bundle id (`apns-topic`); `nil` only for the single `apns.auth.*` form, which carries every topic.
        var topic: String?
        var authentication: Authentication
        /// Where its settings live, for messages: `apns.auth` or `apns.apps.N`.
        var keyPrefix: String
        /// `key_environment`: the one APNs environment its token key is valid in; `nil` for both.
        var keyEnvironment: Environment? = nil
        /// `key_id_file`: the file its token key's id was read from (beside the key in one Secret), read again when
        /// the key is rotated; `nil` when `key_id` gives it.
        var keyIDFile: String? = nil

        /// The APNs environments this entry's credential signs for.
        var environments: [Environment] { keyEnvironment.map { [$0] } ?? Environment.allCases }
    }

    struct APNsSettings: Sendable, Equatable {
        var transport = Transport.http2
        /// nghttp2 by default: the relay spends less CPU per notification on it than on NIOHTTP2 (docs/BENCHMARKS.md).
        var http2Client = HTTP2Client.nghttp2
        var environment = Environment.production
        /// `apns.endpoint`: replaces the host of `environment` (the configured default).
        var endpoint: APNsEndpoint?
        /// `apns.production_endpoint` / `apns.sandbox_endpoint`: replace each environment's host.
        var productionEndpoint: APNsEndpoint?
        var sandboxEndpoint: APNsEndpoint?
        /// `apns.production_management_endpoint` / `apns.sandbox_management_endpoint`: replace each environment's
        /// broadcast channel management host (`apns-relay channels`).
        var productionManagementEndpoint: APNsEndpoint?
        var sandboxManagementEndpoint: APNsEndpoint?
        var feedbackEndpoint: APNsEndpoint?
        var caFile: String?
        var topic: String?
        /// The single form: `apns.auth.*` (with `apns.topic` as the default topic) is one app for every topic.
        var authentication = Authentication.none
        /// `apns.auth.key_id_file`.
        var authenticationKeyIDFile: String?
        /// `apns.credential_check_interval_s`: how often the credential files are checked for a rotated key or
        /// renewed certificate.
        var credentialCheckInterval: Duration = .seconds(10)
        /// `apns.apps`: several apps, each with its own credential, picked by topic.
        var apps: [App] = []
        var connections = 2
        var binaryCommand = 2
        /// `apns.feedback_interval_s`.
        var feedbackInterval: Duration = .seconds(43_200)
        /// `apns.proxy` with the credentials of `apns.proxy_credentials_file` or `apns.proxy_credentials`.
        var proxy: APNsProxy?
        /// `apns.proxy_credentials_file`, for the configuration dump (the credentials themselves are in `proxy`).
        var proxyCredentialsFile: String?

        /// The `host:port` replacing Apple's host of `environment`, if any: its own key, or `apns.endpoint`
        /// when `environment` is the configured one (the loader refuses the two set to different values).
        func endpointOverride(for environment: Environment) -> APNsEndpoint? {
            let own = environment == .production ? productionEndpoint : sandboxEndpoint
            return own ?? (environment == self.environment ? endpoint : nil)
        }

        /// The apps the relay sends for: `apns.apps`, or the single `apns.auth.*` form as one app for every
        /// topic, or none (no credential configured).
        var resolvedApps: [App] {
            if !apps.isEmpty { return apps }
            if authentication == .none { return [] }
            return [App(topic: nil, authentication: authentication, keyPrefix: "apns.auth", keyIDFile: authenticationKeyIDFile)]
        }

        /// The topic of a notification whose event and registration name none: `apns.topic`, or the one app's
        /// topic when `apns.apps` lists exactly one.
        var defaultTopic: String? {
            topic ?? (apps.count == 1 ? apps[0].topic : nil)
        }

        /// Where HTTP/2 notifications for `environment` go: the override, or Apple's host.
        func http2Endpoint(for environment: Environment) -> APNsEndpoint {
            endpointOverride(for: environment) ?? environment.endpoint
        }

        /// The `host:port` replacing Apple's channel management host of `environment`, if any.
        func managementEndpointOverride(for environment: Environment) -> APNsEndpoint? {
            environment == .production ? productionManagementEndpoint : sandboxManagementEndpoint
        }

        /// Where channel management requests for `environment` go: the override, or Apple's management host.
        func managementEndpoint(for environment: Environment) -> APNsEndpoint {
            managementEndpointOverride(for: environment) ?? environment.managementEndpoint
        }
    }

    struct RelaySettings: Sendable, Equatable {
        /// `relay.reorder_window_ms`.
        var reorderWindow: Duration = .milliseconds(2_000)
        var maxTokensPerEvent = 1_000
        /// `relay.failure_timeout_s`.
        var failureTimeout: Duration = .seconds(60)
        var maxInFlight = 10_000
        /// `relay.urgent_reserve`: `nil` for a tenth of ``maxInFlight``.
        var urgentReserve: Int?
        /// `relay.max_in_flight_per_user`: `nil` for a tenth of ``maxInFlight``.
        var maxInFlightPerUser: Int?
        /// `relay.read_ahead_bytes`.
        var readAheadBytes = 64 << 20
        /// `relay.rate_limits`: none by default.
        var rateLimits: [RateLimitRule] = []
        /// Sends of one notification that failed by themselves before it is `failed` (`relay.max_attempts`); APNs
        /// spells do not count.
        var maxAttempts = 5
        /// How long a notification is retried through APNs spells, and waits for a connection, before it is
        /// `failed` (`relay.max_retry_s`).
        var maxRetry: Duration = .seconds(300)
        /// `relay.shutdown_timeout_s`.
        var shutdownTimeout: Duration = .seconds(25)
        /// `relay.transaction_interval_ms`: how often the relay's open transaction commits when nothing waits for it sooner.
        var transactionInterval: Duration = .milliseconds(100)
        /// `relay.transaction_timeout_ms`: the transactions' `transaction.timeout.ms`, the longest a relay that died
        /// mid-transaction holds back the `read_committed` readers of what it wrote to.
        var transactionTimeout: Duration = .seconds(10)
        var httpPort = 9_090
    }

    enum LogFormat: String, Sendable, Equatable, CaseIterable {
        case text
        case json
    }

    struct LogSettings: Sendable, Equatable {
        var level = Logger.Level.info
        var format = LogFormat.text
    }

    struct TracingSettings: Sendable, Equatable {
        /// `tracing.otlp_endpoint`: the OTLP/HTTP collector's base URL the spans go to; `nil`: no spans.
        var otlpEndpoint: String?

        /// Where the spans are posted: the OTLP/HTTP traces path under the collector's URL.
        var tracesURL: String? {
            otlpEndpoint.map { $0.hasSuffix("/v1/traces") ? $0 : ($0.hasSuffix("/") ? "\($0)v1/traces" : "\($0)/v1/traces") }
        }
    }
}

/// A configuration problem, naming the key and what is expected. Exit code 2.
struct ConfigurationError: Error, Equatable, CustomStringConvertible {
    var key: String
    var problem: String

    var description: String { "configuration error: \(key): \(problem)" }
}
