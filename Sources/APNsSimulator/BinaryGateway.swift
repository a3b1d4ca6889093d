import APNs
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS

/// What the binary gateway remembers to tell a resend from a new notification: the relay keeps a notification's
/// identifier across resends (it derives it from the apns-id), as the HTTP/2 side keeps the apns-id.
struct BinarySeenKey: Hashable, Sendable {
    var token: String
    var identifier: UInt32?
    var payloadHash: Int
}

extension APNsSimulator {
    /// Listens for the legacy binary gateway and feedback service when their ports are configured. Both require a
    /// client certificate signed by the simulator's CA.
    func bindLegacy(group: any EventLoopGroup) async throws {
        guard options.binaryPort != nil || options.feedbackPort != nil else { return }
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(try NIOSSLCertificate(bytes: Array(certificates.serverCertificatePEM.utf8), format: .pem))],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(certificates.serverKeyPEM.utf8), format: .pem)))
        tls.certificateVerification = .noHostnameVerification
        tls.trustRoots = .certificates([try NIOSSLCertificate(bytes: Array(certificates.caPEM.utf8), format: .pem)])
        let sslContext = try NIOSSLContext(configuration: tls)
        for (port, isGateway) in [(options.binaryPort, true), (options.feedbackPort, false)] {
            guard let port else { continue }
            let channel = try await listen(group: group, port: port) { channel in
                let sync = channel.pipeline.syncOperations
                try sync.addHandler(NIOSSLServerHandler(context: sslContext))
                if isGateway {
                    try sync.addHandler(SimulatorBinaryGatewayHandler(simulator: self))
                } else {
                    try sync.addHandler(SimulatorFeedbackHandler(simulator: self))
                }
            }
            legacyChannels.withLock { channels in
                if isGateway { channels.gateway = channel } else { channels.feedback = channel }
            }
        }
    }

    private func listen(group: any EventLoopGroup, port: Int, configure: @escaping @Sendable (any Channel) throws -> Void) async throws -> any Channel {
        try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try configure(channel)
                    self.track(channel)
                }
            }
            .bind(host: options.host, port: port)
            .get()
    }

    /// Remembers an accepted connection so ``shutdown()`` closes it.
    func track(_ channel: any Channel) {
        state.withLock {
            $0.connectionsAccepted += 1
            $0.open[ObjectIdentifier(channel)] = channel
        }
        channel.closeFuture.whenComplete { [self] _ in
            _ = state.withLock { $0.open.removeValue(forKey: ObjectIdentifier(channel)) }
        }
    }

    /// The bound port of the legacy binary gateway (`nil` when not served).
    public var binaryGatewayPort: Int? { legacyChannels.withLock { $0.gateway?.localAddress?.port } }

    /// The bound port of the legacy feedback service (`nil` when not served).
    public var feedbackServicePort: Int? { legacyChannels.withLock { $0.feedback?.localAddress?.port } }

    /// Resends the binary gateway recognised (same token, identifier and payload as an accepted notification) and
    /// kept out of the device view.
    public var binaryResendsSuppressed: Int { state.withLock { $0.binaryResends } }

    /// Notifications that arrived on a connection after its error response and were ignored, as APNs did.
    public var binaryIgnoredAfterError: Int { state.withLock { $0.binaryIgnored } }

    /// Dead tokens the feedback service has not reported yet, with their timestamp (epoch ms).
    public var feedbackPending: [String: Int64] {
        state.withLock { state in state.deadTokens.filter { !state.feedbackReported.contains($0.key) } }
    }

    /// The dead tokens not reported yet, now counted as reported (the feedback service lists a token once).
    func takeFeedback() -> [APNsFeedbackTuple] {
        state.withLock { state in
            var tuples: [APNsFeedbackTuple] = []
            for (token, timestamp) in state.deadTokens.sorted(by: { $0.key < $1.key }) where !state.feedbackReported.contains(token) {
                guard let bytes = try? APNsDeviceToken(hex: token).bytes else { continue }
                state.feedbackReported.insert(token)
                tuples.append(APNsFeedbackTuple(timestamp: UInt32(clamping: max(0, timestamp) / 1000), token: bytes))
            }
            return tuples
        }
    }

    /// Records a binary notification unless it is a resend of one already shown; returns whether it was new.
    func recordBinary(_ frame: APNsBinaryFrame, tokenHex: String) {
        let key = BinarySeenKey(token: tokenHex, identifier: frame.identifier, payloadHash: frame.payload.hashValue)
        let isNew = state.withLock { state -> Bool in
            if state.binarySeen.insert(key).inserted { return true }
            state.binaryResends += 1
            return false
        }
        guard isNew else { return }
        let object = try? JSONSerialization.jsonObject(with: Data(frame.payload)) as? [String: Any]
        let badge = ((object?["aps"] as? [String: Any])?["badge"] as? NSNumber)?.intValue
        record(SimulatedDelivery(
            token: tokenHex, apnsID: frame.identifier.map { String(format: "binary-%08x", $0) } ?? "binary", collapseID: nil,
            topic: options.allowedTopics?.sorted().first ?? "", pushType: "alert", priority: Int(frame.priority ?? 10),
            payload: frame.payload, badge: badge, sequence: 0))
    }
}

/// The legacy gateway's side of one connection: decodes formats 0, 1 and 2, applies Apple's checks and the
/// scripted faults, answers failures with `8 | status | identifier`, and after an error ignores everything that
/// followed, as APNs did. Confined to the connection's event loop.
final class SimulatorBinaryGatewayHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let simulator: APNsSimulator
    private var decoder = APNsBinaryFrameDecoder()
    /// After an error response or a scripted close: every later byte is ignored.
    private var failed = false

    init(simulator: APNsSimulator) { self.simulator = simulator }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else {
            countIgnored(unwrapInboundIn(data))
            return
        }
        decoder.feed(unwrapInboundIn(data))
        do {
            while !failed, let frame = try decoder.next() {
                handle(frame, context: context)
            }
            if failed, decoder.bufferedBytes > 0 { countIgnored(ByteBuffer()) }
        } catch {
            simulator.logger.debug("binary gateway: undecodable input", metadata: ["error": "\(error)"])
            fail(.processingError, identifier: 0, context: context)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    /// Counts the notifications that arrive after an error (APNs dropped them; the client must resend them).
    private func countIgnored(_ bytes: ByteBuffer) {
        decoder.feed(bytes)
        var ignored = 0
        while let frame = try? decoder.next() {
            _ = frame
            ignored += 1
        }
        if ignored > 0 { simulator.state.withLock { $0.binaryIgnored += ignored } }
    }

    private func handle(_ frame: APNsBinaryFrame, context: ChannelHandlerContext) {
        let tokenHex = APNsFeedbackTuple(timestamp: 0, token: frame.token).tokenHex
        let identifier = frame.identifier ?? 0
        switch simulator.takeFault(token: tokenHex, authorization: nil) {
        case .closeConnection:
            // Abrupt: this notification and whatever followed are not processed.
            failed = true
            context.close(promise: nil)
            return
        case .badDeviceToken:
            return fail(.invalidToken, identifier: identifier, context: context)
        case .shutdown:
            if let problem = problem(frame, tokenHex: tokenHex) { return fail(problem, identifier: identifier, context: context) }
            accept(frame, tokenHex: tokenHex)
            return fail(.shutdown, identifier: identifier, context: context)
        case .binaryStatus(let status):
            return fail(APNsBinaryStatus(rawValue: status), identifier: identifier, context: context)
        case .status, .unregistered, .delay, .goAway, .goAwayAfterStream, .freeze, .setMaxConcurrentStreams, .tooManyRequests, .expiredProviderToken, .resetStream, nil:
            break
        }
        if let problem = problem(frame, tokenHex: tokenHex) { return fail(problem, identifier: identifier, context: context) }
        accept(frame, tokenHex: tokenHex)
    }

    /// Apple's checks, in the order of its status codes.
    private func problem(_ frame: APNsBinaryFrame, tokenHex: String) -> APNsBinaryStatus? {
        if frame.token.isEmpty { return .missingDeviceToken }
        if frame.token.count != APNsBinaryFormat.tokenLength { return .invalidTokenSize }
        if frame.payload.isEmpty { return .missingPayload }
        if frame.payload.count > frame.format.maximumPayloadSize { return .invalidPayloadSize }
        if let priority = frame.priority, priority != 10 && priority != 5 { return .processingError }
        if simulator.tokenStatus(tokenHex).bad { return .invalidToken }
        return nil
    }

    private func accept(_ frame: APNsBinaryFrame, tokenHex: String) {
        // An uninstalled app's device shows nothing; the feedback service reports the token.
        if simulator.tokenStatus(tokenHex).dead != nil { return }
        simulator.recordBinary(frame, tokenHex: tokenHex)
    }

    /// Answers the error response, then ignores the rest. The client closes once it has read the answer; the
    /// gateway closes after a grace period in case it does not (closing at once could reset the connection
    /// before the client read the answer).
    private func fail(_ status: APNsBinaryStatus, identifier: UInt32, context: ChannelHandlerContext) {
        failed = true
        var buffer = context.channel.allocator.buffer(capacity: APNsBinaryErrorResponse.size)
        buffer.writeBytes(APNsBinaryErrorResponse(status: status, identifier: identifier).encoded)
        context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
        let channel = context.channel
        context.eventLoop.scheduleTask(in: .seconds(2)) { channel.close(promise: nil) }
    }
}

/// The feedback service's side of one connection: once TLS is up, writes every dead token not reported yet as
/// `timestamp | token length | token`, then closes.
final class SimulatorFeedbackHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let simulator: APNsSimulator

    init(simulator: APNsSimulator) { self.simulator = simulator }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent {
            let tuples = simulator.takeFeedback()
            var buffer = context.channel.allocator.buffer(capacity: tuples.count * 38)
            for tuple in tuples { buffer.writeBytes(tuple.encoded) }
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(buffer)).whenComplete { _ in channel.close(promise: nil) }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
