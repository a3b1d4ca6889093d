public import APNs
import Crypto
public import Foundation

/// One team's signing key, as the simulator checks provider tokens when it models several teams.
public struct SimulatorProviderKey: Sendable {
    /// The key id (`kid`).
    public var keyID: String
    /// The team id (`iss`).
    public var teamID: String
    /// The public key, PEM.
    public var publicKeyPEM: String
    /// The bundle ids the team's tokens may push to.
    public var topics: Set<String>
    /// The one environment the key is valid in (Apple's environment-restricted keys); `nil` for both. A host playing
    /// the other ``SimulatorOptions/environment`` answers its tokens 403 `BadEnvironmentKeyIdInToken`.
    public var environment: APNsEnvironment?
    /// The topics the key is limited to (Apple's topic-specific keys); `nil` for every topic of its team. A push to
    /// another of the team's topics is answered 403 `UnrelatedKeyIdInToken`.
    public var keyTopics: Set<String>?

    /// Creates a key.
    public init(keyID: String, teamID: String, publicKeyPEM: String, topics: Set<String>, environment: APNsEnvironment? = nil,
                keyTopics: Set<String>? = nil) {
        self.keyID = keyID
        self.teamID = teamID
        self.publicKeyPEM = publicKeyPEM
        self.topics = topics
        self.environment = environment
        self.keyTopics = keyTopics
    }

    static let specificationForm = "KEY_ID:TEAM_ID:PEM_FILE:BUNDLE_ID[,BUNDLE_ID...][:environment=production|sandbox][:topics=BUNDLE_ID[,...]]"

    /// Reads `KEY_ID:TEAM_ID:PEM_FILE:BUNDLE_ID[,BUNDLE_ID...][:environment=ENV][:topics=BUNDLE_ID[,...]]` (the
    /// `--provider-key` flag): the team's bundle ids, then the key's limits, if any.
    public init(specification: String) throws {
        let parts = specification.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 4, !parts[0].isEmpty, !parts[1].isEmpty, !parts[3].isEmpty else {
            throw SimulatorOptionError("--provider-key must be \(Self.specificationForm), not '\(specification)'")
        }
        let pem: String
        do {
            pem = try String(contentsOfFile: parts[2], encoding: .utf8)
        } catch {
            throw SimulatorOptionError("--provider-key: cannot read the public key \(parts[2])")
        }
        var environment: APNsEnvironment?
        var keyTopics: Set<String>?
        for limit in parts.dropFirst(4) {
            if limit.hasPrefix("environment="), let parsed = APNsEnvironment(rawValue: String(limit.dropFirst("environment=".count))) {
                environment = parsed
            } else if limit.hasPrefix("topics="), limit.count > "topics=".count {
                keyTopics = Set(limit.dropFirst("topics=".count).split(separator: ",").map(String.init))
            } else {
                throw SimulatorOptionError("--provider-key: '\(limit)' is neither environment=production|sandbox nor topics=BUNDLE_ID[,...] (\(Self.specificationForm))")
            }
        }
        self.init(keyID: parts[0], teamID: parts[1], publicKeyPEM: pem, topics: Set(parts[3].split(separator: ",").map(String.init)),
                  environment: environment, keyTopics: keyTopics)
    }
}

/// A simulator flag that cannot be used, and why.
public struct SimulatorOptionError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// Settings of an ``APNsSimulator``. The `apns-relay simulator` command line maps onto these one to one.
public struct SimulatorOptions: Sendable {
    /// The address to listen on.
    public var host: String = "127.0.0.1"
    /// The HTTP/2 port (`--http2-port`); 0 picks a free port.
    public var http2Port: Int = 0
    /// The legacy binary gateway's port (`--binary-port`); `nil` does not serve it, 0 picks a free port.
    /// Requires a client certificate signed by the simulator's CA.
    public var binaryPort: Int?
    /// The legacy feedback service's port (`--feedback-port`); `nil` does not serve it, 0 picks a free port.
    /// Requires a client certificate signed by the simulator's CA.
    public var feedbackPort: Int?
    /// The port of the broadcast channel management API (`--broadcast-management-port`), Apple's
    /// `api-manage-broadcast` host; `nil` does not serve it, 0 picks a free port. Same TLS and authentication as
    /// the HTTP/2 port. Broadcasts themselves (`/4/broadcasts/apps/...`) go to the HTTP/2 port, as on Apple's hosts.
    public var broadcastManagementPort: Int?
    /// Where `ca.pem`, `server.pem`/`server.key` and `client.pem`/`client.key` are written (`--cert-dir`).
    /// `nil` uses a fresh temporary directory.
    public var certDirectory: String?
    /// PEM public key to verify JWT signatures with (`--jwt-public-key`). Without one, a well-formed JWT is required.
    public var jwtPublicKeyPEM: String?
    /// When set, the JWT `kid` must equal this.
    public var jwtKeyID: String?
    /// The oldest `iat` accepted, in seconds (Apple: one hour).
    public var maxTokenAge: Int64 = 3600
    /// Tokens (lower-case hex) that answer 410 Unregistered, with their timestamp (epoch ms) (`--dead-tokens`).
    /// On the binary gateway their notifications are accepted but not shown (the app is gone), and the feedback
    /// service reports each once.
    public var deadTokens: [String: Int64] = [:]
    /// Tokens (lower-case hex) that answer 400 BadDeviceToken (`--bad-tokens`), binary error 8.
    public var badTokens: Set<String> = []
    /// The APNs environment this host plays (`--environment`): Apple's sandbox host answers every device request with
    /// an `apns-unique-id` header (the id of the notification in the Push Notifications Console's delivery log), and
    /// a host refuses the tokens of the other environment (``tokenEnvironments``). `nil` plays neither in particular:
    /// no `apns-unique-id`, every token not listed elsewhere is accepted.
    public var environment: APNsEnvironment?
    /// The environment each of these tokens (lower-case hex) belongs to (`--production-tokens`, `--sandbox-tokens`):
    /// as on Apple's hosts, a host playing the other ``environment`` answers them 400 BadDeviceToken (binary: error
    /// 8), and one playing theirs treats them as any token. Tokens not listed belong to whichever host is asked.
    public var tokenEnvironments: [String: APNsEnvironment] = [:]
    /// SETTINGS_MAX_CONCURRENT_STREAMS announced to clients (`--max-streams`).
    public var maxConcurrentStreams: Int = 1000
    /// Appends one JSON line per accepted notification (`--device-log`).
    public var deviceLogPath: String?
    /// How many accepted notifications, and how many broadcasts, ``APNsSimulator/allDeliveries()``,
    /// ``APNsSimulator/deliveries(for:)`` and the broadcast accessors keep: the newest; `nil` keeps all. The counts
    /// (``APNsSimulator/deliveryCount``, ``APNsSimulator/broadcastCounts``) and the device log cover every one.
    /// `apns-relay simulator`, which has no inspection API, keeps none.
    public var deliveryHistory: Int?
    /// Require a client certificate signed by the simulator's CA on the HTTP/2 port (certificate auth).
    /// Requests without `authorization` are then authenticated by the certificate.
    public var requireClientCertificate = false
    /// When set, the bundle id part of `apns-topic` must be one of these (what the key or certificate may push to).
    public var allowedTopics: Set<String>?
    /// Apps with a client certificate of their own (certificate auth): one is issued per bundle id (subject CN
    /// = the bundle id, `DIR/client-<topic>.pem`), and a connection authenticated by one pushes only to its app,
    /// as Apple's per-app certificates do. The shared `client.pem` pushes to any topic.
    public var clientCertificateTopics: [String] = []
    /// Several teams' signing keys (in place of `jwtPublicKeyPEM`): a JWT's `kid` picks the key, its `iss` must be
    /// the key's team, and it may push only to the team's bundle ids; anything else is refused as Apple does.
    public var providerKeys: [SimulatorProviderKey] = []
    /// The wall clock (JWT age, 410 timestamps).
    public var now: @Sendable () -> Date = { Date() }
    /// Event-loop threads.
    public var threads: Int = 1

    /// Default options: 127.0.0.1, a free port, a temporary certificate directory.
    public init() {}

    /// Options from the `apns-relay simulator` flags; reads the files they name.
    ///
    /// `--dead-tokens` tokens answer 410 with the load time as their timestamp.
    public init(
        http2Port: Int = 0,
        binaryPort: Int? = nil,
        feedbackPort: Int? = nil,
        certDirectory: String? = nil,
        jwtPublicKeyFile: String? = nil,
        deadTokensFile: String? = nil,
        badTokensFile: String? = nil,
        maxStreams: Int? = nil,
        deviceLogPath: String? = nil,
        providerKeys: [String] = [],
        broadcastManagementPort: Int? = nil,
        environment: APNsEnvironment? = nil,
        productionTokensFile: String? = nil,
        sandboxTokensFile: String? = nil
    ) throws {
        self.init()
        self.providerKeys = try providerKeys.map(SimulatorProviderKey.init(specification:))
        self.http2Port = http2Port
        self.binaryPort = binaryPort
        self.feedbackPort = feedbackPort
        self.broadcastManagementPort = broadcastManagementPort
        self.certDirectory = certDirectory
        if let jwtPublicKeyFile { jwtPublicKeyPEM = try String(contentsOfFile: jwtPublicKeyFile, encoding: .utf8) }
        let loadedAt = Int64(Date().timeIntervalSince1970 * 1000)
        if let deadTokensFile {
            for token in try Self.loadTokenList(deadTokensFile) { deadTokens[token] = loadedAt }
        }
        if let badTokensFile { badTokens = Set(try Self.loadTokenList(badTokensFile)) }
        self.environment = environment
        for (file, tokenEnvironment) in [(productionTokensFile, APNsEnvironment.production), (sandboxTokensFile, .sandbox)] {
            guard let file else { continue }
            for token in try Self.loadTokenList(file) { tokenEnvironments[token] = tokenEnvironment }
        }
        if let maxStreams { maxConcurrentStreams = maxStreams }
        self.deviceLogPath = deviceLogPath
    }

    /// Reads a token list file: hex tokens, one a line; blank lines and `#` comments are skipped.
    public static func loadTokenList(_ path: String) throws -> [String] {
        try String(contentsOfFile: path, encoding: .utf8)
            .split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
    }
}
