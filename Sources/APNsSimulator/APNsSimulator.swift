public import APNs
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// An in-process APNs: TLS HTTP/2 with a generated CA, Apple's validation rules and answers, scriptable faults,
/// and a device view of everything it accepted.
///
/// ```swift
/// let simulator = try await APNsSimulator.start(SimulatorOptions())
/// // connect to 127.0.0.1:\(simulator.http2Port), trusting simulator.certificates.caPath
/// let shown = simulator.deliveries(for: tokenHex)
/// await simulator.shutdown()
/// ```
public final class APNsSimulator: Sendable {
    struct FaultRule: Sendable {
        var fault: SimulatorFault
        var token: String?
        var skip: Int
        var remaining: Int?
        /// Hits only every `every`-th matching request (periodic faults: "a GOAWAY every 1,000 streams").
        var every: Int?
        var matched = 0
        /// When the fault ends (a spell); `nil`: it ends only by `remaining`.
        var until: NIODeadline?
        /// Hits only requests whose `authorization` is one of these (provider tokens declared expired).
        var authorizations: Set<String>?
    }

    struct State: Sendable {
        var deadTokens: [String: Int64]
        var badTokens: Set<String>
        var tokenEnvironments: [String: APNsEnvironment]
        var faults: [FaultRule] = []
        var deliveries: SimulatorHistory<SimulatedDelivery>
        var maxConcurrentStreams: Int
        var requests = 0
        var connectionsAccepted = 0
        var open: [ObjectIdentifier: any Channel] = [:]
        /// Binary notifications shown, to recognise resends.
        var binarySeen: Set<BinarySeenKey> = []
        var binaryResends = 0
        var binaryIgnored = 0
        /// Dead tokens the feedback service has already reported.
        var feedbackReported: Set<String> = []
        /// While set, the HTTP/2 port is an unresponsive host to new connections.
        var silence: SimulatorSilence?
        /// Every distinct `authorization` value presented so far (provider tokens; few per run).
        var authorizationsSeen: Set<String> = []
        /// Broadcast channels per app, and the broadcasts accepted (all, and per channel id).
        var channels = SimulatorChannels()
        var broadcasts: SimulatorHistory<SimulatedBroadcast>
    }

    /// What a listener serves.
    enum Role: Sendable {
        /// Notifications and broadcasts (Apple's `api.push.apple.com`).
        case provider
        /// Channel management (Apple's `api-manage-broadcast.push.apple.com`).
        case management
    }

    struct LegacyChannels {
        var gateway: (any Channel)?
        var feedback: (any Channel)?
    }

    /// The options it was started with.
    public let options: SimulatorOptions
    /// The generated certificates (CA, server, client).
    public let certificates: SimulatorCertificates
    /// The bound HTTP/2 port.
    public var http2Port: Int { boundPort.withLock { $0 } }
    private let boundPort = Mutex(0)
    let state: Mutex<State>
    /// X9.63 bytes of the JWT verification key (`P256.Signing.PublicKey` is not `Sendable`).
    let jwtPublicKey: Data?
    private let serverChannel: Mutex<(any Channel)?>
    private let managementChannel = Mutex<(any Channel)?>(nil)
    let legacyChannels = Mutex(LegacyChannels())
    private let group: MultiThreadedEventLoopGroup
    private let deviceLog: FileHandle?
    /// The certificates' directory when the simulator generated it (no `certDirectory` given): removed at shutdown.
    private let ownedDirectory: String?
    private let logLock = Mutex(())
    let logger = Logger(label: "apns.simulator")

    private init(
        options: SimulatorOptions, certificates: SimulatorCertificates, jwtPublicKey: Data?, group: MultiThreadedEventLoopGroup,
        deviceLog: FileHandle?, ownedDirectory: String?
    ) {
        self.ownedDirectory = ownedDirectory
        self.options = options
        self.certificates = certificates
        self.jwtPublicKey = jwtPublicKey
        self.group = group
        self.deviceLog = deviceLog
        self.state = Mutex(State(deadTokens: options.deadTokens, badTokens: options.badTokens, tokenEnvironments: options.tokenEnvironments,
                                 deliveries: SimulatorHistory(limit: options.deliveryHistory), maxConcurrentStreams: options.maxConcurrentStreams,
                                 broadcasts: SimulatorHistory(limit: options.deliveryHistory)))
        self.serverChannel = Mutex(nil)
    }

    /// Generates the certificates, then listens. Returns once the port is bound.
    public static func start(_ options: SimulatorOptions) async throws -> APNsSimulator {
        let directory = options.certDirectory ?? (NSTemporaryDirectory() + "apns-simulator-" + UUID().uuidString)
        // A directory the simulator made for itself is its own to remove at shutdown; one it was given stays.
        let ownsDirectory = options.certDirectory == nil
        let certificates = try SimulatorCertificates.generate(in: directory, now: options.now(), clientTopics: options.clientCertificateTopics)
        let publicKey = try options.jwtPublicKeyPEM.map { try P256.Signing.PublicKey(pemRepresentation: $0).x963Representation }
        for key in options.providerKeys { _ = try P256.Signing.PublicKey(pemRepresentation: key.publicKeyPEM) }
        var deviceLog: FileHandle?
        if let path = options.deviceLogPath {
            if !FileManager.default.fileExists(atPath: path) {
                _ = FileManager.default.createFile(atPath: path, contents: nil)
            }
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            try handle.seekToEnd()
            deviceLog = handle
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, options.threads))
        let simulator = APNsSimulator(
            options: options, certificates: certificates, jwtPublicKey: publicKey, group: group, deviceLog: deviceLog,
            ownedDirectory: ownsDirectory ? directory : nil
        )
        do {
            try await simulator.bind()
            try await simulator.bindManagement()
            try await simulator.bindLegacy(group: group)
        } catch {
            await simulator.shutdown()
            throw error
        }
        return simulator
    }

    private func bind() async throws {
        let channel = try await listen(port: options.http2Port, role: .provider)
        guard let port = channel.localAddress?.port else {
            try? await channel.close()
            throw ChannelError.unknownLocalAddress
        }
        boundPort.withLock { $0 = port }
        serverChannel.withLock { $0 = channel }
    }

    private func bindManagement() async throws {
        guard let port = options.broadcastManagementPort else { return }
        let channel = try await listen(port: port, role: .management)
        managementChannel.withLock { $0 = channel }
    }

    /// A TLS HTTP/2 listener on `port` serving `role`.
    private func listen(port: Int, role: Role) async throws -> any Channel {
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(try NIOSSLCertificate(bytes: Array(certificates.serverCertificatePEM.utf8), format: .pem))],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(certificates.serverKeyPEM.utf8), format: .pem)))
        tls.applicationProtocols = ["h2"]
        if options.requireClientCertificate {
            tls.certificateVerification = .noHostnameVerification
            tls.trustRoots = .certificates([try NIOSSLCertificate(bytes: Array(certificates.caPEM.utf8), format: .pem)])
        }
        let sslContext = try NIOSSLContext(configuration: tls)
        let maxStreams = options.maxConcurrentStreams
        return try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try self.configure(channel: channel, sslContext: sslContext, maxStreams: maxStreams, role: role)
                }
            }
            .bind(host: options.host, port: port)
            .get()
    }

    /// The receive windows the simulator keeps open: per stream (SETTINGS_INITIAL_WINDOW_SIZE) and per connection.
    static let streamWindow = 1 << 20
    static let connectionWindow = 1 << 24

    func configure(channel: any Channel, sslContext: NIOSSLContext, maxStreams: Int, role: Role) throws {
        let sync = channel.pipeline.syncOperations
        let connection = SimulatorConnectionState(channel: channel)
        let silence = state.withLock { state -> SimulatorSilence? in
            guard let silence = state.silence, role == .provider else { return nil }
            state.open[ObjectIdentifier(channel)] = channel
            return silence
        }
        if let silence {
            // An unresponsive host: inbound bytes are read and dropped by the pipeline's tail.
            if silence == .afterTLS { try sync.addHandler(NIOSSLServerHandler(context: sslContext)) }
            channel.closeFuture.whenComplete { [self] _ in
                _ = state.withLock { $0.open.removeValue(forKey: ObjectIdentifier(channel)) }
            }
            return
        }
        try sync.addHandler(NIOSSLServerHandler(context: sslContext))
        try sync.addHandler(APNsFlushCoalescingHandler())
        try sync.addHandler(FreezeHandler(connection: connection))
        let currentMax = state.withLock { state -> Int in
            state.connectionsAccepted += 1
            state.open[ObjectIdentifier(channel)] = channel
            return state.maxConcurrentStreams
        }
        _ = maxStreams
        var configuration = NIOHTTP2Handler.ConnectionConfiguration()
        configuration.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: currentMax),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 16_384),
            HTTP2Setting(parameter: .initialWindowSize, value: Self.streamWindow),
        ]
        configuration.maximumRecentlyResetStreams = 10_000
        configuration.maximumConnectionGlitches = 100_000
        // Frame level: requests are served on the connection channel itself, no child channel per stream.
        try sync.addHandler(NIOHTTP2Handler(mode: .server, connectionConfiguration: configuration, streamConfiguration: .init()))
        try sync.addHandler(HTTP2InboundWindowHandler(connectionTarget: Self.connectionWindow, streamTarget: Self.streamWindow))
        try sync.addHandler(SimulatorConnectionHandler(simulator: self, connection: connection, role: role))
        channel.closeFuture.whenComplete { [self] _ in
            _ = state.withLock { $0.open.removeValue(forKey: ObjectIdentifier(channel)) }
        }
    }

    // MARK: public API

    /// The bound port of the broadcast channel management API (`nil` when not served).
    public var broadcastManagementPort: Int? { managementChannel.withLock { $0?.localAddress?.port } }

    /// The broadcasts accepted for a channel, in acceptance order (those the delivery history keeps).
    public func broadcasts(for channelID: String) -> [SimulatedBroadcast] {
        state.withLock { $0.broadcasts.byKey[channelID] ?? [] }
    }

    /// How many broadcasts were accepted per channel id (the broadcast counterpart of ``deliveryCount``).
    public var broadcastCounts: [String: Int] {
        state.withLock { $0.broadcasts.acceptedByKey }
    }

    /// Every accepted broadcast, in acceptance order (those the delivery history keeps).
    public func allBroadcasts() -> [SimulatedBroadcast] { state.withLock { $0.broadcasts.items } }

    /// The channel ids of `bundleID`, in creation order.
    public func channels(of bundleID: String) -> [String] { state.withLock { $0.channels.channels(of: bundleID) } }

    /// Creates a channel of `bundleID` directly (as if through the management API); returns its id.
    public func createChannel(bundleID: String, storagePolicy: APNsMessageStoragePolicy = .noStorage) -> String {
        let id = SimulatorChannels.newChannelID()
        state.withLock { $0.channels.add(bundleID: bundleID, policy: storagePolicy.rawValue, id: id) }
        return id
    }

    /// The connections accepted so far.
    public var connectionsAccepted: Int { state.withLock { $0.connectionsAccepted } }

    /// Requests handled so far (accepted or rejected).
    public var requestCount: Int { state.withLock { $0.requests } }

    /// The notifications accepted for a token (lower-case hex), in acceptance order (those the delivery history keeps).
    public func deliveries(for token: String) -> [SimulatedDelivery] {
        state.withLock { $0.deliveries.byKey[token.lowercased()] ?? [] }
    }

    /// Every accepted notification, in acceptance order (those the delivery history keeps).
    public func allDeliveries() -> [SimulatedDelivery] { state.withLock { $0.deliveries.items } }

    /// How many notifications were accepted.
    public var deliveryCount: Int { state.withLock { $0.deliveries.accepted } }

    /// The device view as JSON lines (one per accepted notification).
    public func deviceViewJSONLines() -> String {
        allDeliveries().map(\.jsonLine).joined(separator: "\n")
    }

    /// Adds a fault. `token` (hex) limits it to one device; `skip` lets that many matching requests pass first;
    /// `count` is how many requests it hits (`nil`: every one). With `every`, only each `every`-th
    /// matching request is hit (e.g. `every: 20` fails 5% of requests). With `duration` the fault is a spell: it
    /// hits matching requests from now until `duration` has passed (`count: nil` for every one of them), then ends.
    public func addFault(_ fault: SimulatorFault, token: String? = nil, skip: Int = 0, count: Int? = 1, every: Int? = nil,
                         for duration: Duration? = nil) {
        let until = duration.map { NIODeadline.now() + TimeAmount($0) }
        state.withLock {
            $0.faults.append(FaultRule(fault: fault, token: token?.lowercased(), skip: skip, remaining: count, every: every.map { max(1, $0) },
                                       until: until))
        }
    }

    /// For `duration`, answers 403 ExpiredProviderToken to every request that carries a provider token presented
    /// before this call, as APNs does once it considers a token too old: a newly signed token is accepted at once.
    public func expireProviderTokens(for duration: Duration) {
        let until = NIODeadline.now() + TimeAmount(duration)
        state.withLock { state in
            state.faults.append(FaultRule(fault: .expiredProviderToken, token: nil, skip: 0, remaining: nil, every: nil, until: until,
                                          authorizations: state.authorizationsSeen))
        }
    }

    /// How many distinct provider tokens (`authorization` values) were presented so far.
    public var providerTokensSeen: Int { state.withLock { $0.authorizationsSeen.count } }

    /// Removes every fault.
    public func clearFaults() { state.withLock { $0.faults.removeAll() } }

    /// Makes the HTTP/2 port an unresponsive host (`silence`), closing the connections open now so that clients
    /// must connect again; `nil` makes it answer again (silent connections stay open until their clients give up).
    public func silence(_ silence: SimulatorSilence?) {
        let open = state.withLock { state -> [any Channel] in
            state.silence = silence
            return silence == nil ? [] : Array(state.open.values)
        }
        for channel in open { channel.close(promise: nil) }
    }

    /// From now on `token` answers 410 Unregistered with `timestamp` (epoch ms); the feedback service reports it once.
    public func markDead(_ token: String, timestamp: Int64) { state.withLock { $0.deadTokens[token.lowercased()] = timestamp } }

    /// From now on `token` answers 400 BadDeviceToken.
    public func markBad(_ token: String) { state.withLock { _ = $0.badTokens.insert(token.lowercased()) } }

    /// From now on `token` belongs to `environment`: a host playing the other environment answers it 400
    /// BadDeviceToken (see ``SimulatorOptions/tokenEnvironments``).
    public func register(_ token: String, environment: APNsEnvironment) {
        state.withLock { $0.tokenEnvironments[token.lowercased()] = environment }
    }

    /// Announces a new SETTINGS_MAX_CONCURRENT_STREAMS on every open connection (and for new ones).
    public func setMaxConcurrentStreams(_ limit: Int) {
        let channels = state.withLock { state -> [any Channel] in
            state.maxConcurrentStreams = limit
            return Array(state.open.values)
        }
        for channel in channels {
            let frame = HTTP2Frame(streamID: .rootStream, payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: limit)])))
            channel.writeAndFlush(frame, promise: nil)
        }
    }

    /// Stops listening and closes every connection.
    public func shutdown() async {
        await closeListeners()
        let open = state.withLock { Array($0.open.values) }
        for connection in open { try? await connection.close() }
        try? deviceLog?.close()
        try? await group.shutdownGracefully()
        if let ownedDirectory { try? FileManager.default.removeItem(atPath: ownedDirectory) }
    }

    private func closeListeners() async {
        let channel = serverChannel.withLock { $0 }
        try? await channel?.close()
        let management = managementChannel.withLock { $0 }
        try? await management?.close()
        let legacy = legacyChannels.withLock { $0 }
        try? await legacy.gateway?.close()
        try? await legacy.feedback?.close()
    }

    // MARK: request handling (called on event loops)

    /// A provider token (`authorization` value) a connection presents for the first time.
    func noteAuthorization(_ authorization: String) {
        _ = state.withLock { $0.authorizationsSeen.insert(authorization) }
    }

    func takeFault(token: String, authorization: String?) -> SimulatorFault? {
        state.withLock { state in
            state.requests += 1
            // Spells that are over end here, before matching.
            if state.faults.contains(where: { $0.until != nil }) {
                let now = NIODeadline.now()
                state.faults.removeAll { rule in rule.until.map { $0 <= now } ?? false }
            }
            for index in state.faults.indices {
                let rule = state.faults[index]
                if let ruleToken = rule.token, ruleToken != token { continue }
                if let authorizations = rule.authorizations, !authorizations.contains(authorization ?? "") { continue }
                if rule.skip > 0 {
                    state.faults[index].skip -= 1
                    continue
                }
                if let every = rule.every {
                    state.faults[index].matched += 1
                    if state.faults[index].matched % every != 0 { continue }
                }
                if let remaining = rule.remaining {
                    if remaining <= 1 { state.faults.remove(at: index) } else { state.faults[index].remaining = remaining - 1 }
                }
                return rule.fault
            }
            return nil
        }
    }

    /// What this host knows of `token`: dead since a time (410), or bad (400 BadDeviceToken): listed as bad, or a
    /// token of the other environment, which this host does not know at all.
    func tokenStatus(_ token: String) -> (dead: Int64?, bad: Bool) {
        state.withLock { state in
            if let environment = options.environment, let belongsTo = state.tokenEnvironments[token], belongsTo != environment {
                return (nil, true)
            }
            return (state.deadTokens[token], state.badTokens.contains(token))
        }
    }

    func channelExists(bundleID: String, channelID: String) -> Bool {
        state.withLock { $0.channels.exists(bundleID: bundleID, channelID: channelID) }
    }

    /// Serves a channel management request (already authenticated) against the channel table.
    func manage(method: String, bundleID: String, resource: String, channelHeader: String?, body: [UInt8]) -> SimulatorManagementAnswer {
        state.withLock {
            $0.channels.handle(method: method, bundleID: bundleID, resource: resource, channelHeader: channelHeader, body: body,
                               newID: SimulatorChannels.newChannelID)
        }
    }

    func record(_ broadcast: SimulatedBroadcast) {
        let recorded = state.withLock { state -> SimulatedBroadcast in
            var broadcast = broadcast
            broadcast.sequence = state.broadcasts.accepted
            state.broadcasts.append(broadcast, key: broadcast.channelID)
            return broadcast
        }
        appendToDeviceLog(recorded.jsonLine)
    }

    /// `line` is built only when there is a device log: building it (JSONSerialization, sorted keys) costs more
    /// than answering the request, and the benches, which measure the simulator's CPU, write none.
    private func appendToDeviceLog(_ line: @autoclosure () -> String) {
        guard let deviceLog else { return }
        let line = line()
        let bytes = Data((line + "\n").utf8)
        logLock.withLock { _ in try? deviceLog.write(contentsOf: bytes) }
    }

    func record(_ delivery: SimulatedDelivery) {
        let receivedAt = Int64((Date().timeIntervalSince1970 * 1_000).rounded())
        let recorded = state.withLock { state -> SimulatedDelivery in
            var delivery = delivery
            delivery.sequence = state.deliveries.accepted
            delivery.receivedAt = receivedAt
            state.deliveries.append(delivery, key: delivery.token)
            return delivery
        }
        appendToDeviceLog(recorded.jsonLine)
    }
}
