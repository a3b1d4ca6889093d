public import NIOCore
import Foundation
public import Logging
import Metrics
import NIOHPACK
import NIOHTTP2
public import NIOPosix
import NIOSSL
import NIOTLS

/// Settings of one HTTP/2 connection.
public struct APNsHTTP2ConnectionConfiguration: Sendable {
    /// Where to connect.
    public var endpoint: APNsEndpoint
    /// Token or certificate auth.
    public var credential: APNsCredential
    /// PEM file of extra trust anchors (`apns.ca_file`); the system trust store is always used as well.
    public var caFile: String?
    /// Interval between PINGs.
    public var pingInterval: TimeAmount
    /// How long a PING may stay unanswered before the connection is declared dead.
    public var pingTimeout: TimeAmount
    /// TCP + TLS + first SETTINGS budget.
    public var connectTimeout: TimeAmount

    /// Creates a configuration.
    public init(
        endpoint: APNsEndpoint,
        credential: APNsCredential,
        caFile: String? = nil,
        pingInterval: TimeAmount = .seconds(60),
        pingTimeout: TimeAmount = .seconds(10),
        connectTimeout: TimeAmount = .seconds(10)
    ) {
        self.endpoint = endpoint
        self.credential = credential
        self.caFile = caFile
        self.pingInterval = pingInterval
        self.pingTimeout = pingTimeout
        self.connectTimeout = connectTimeout
    }
}

/// Errors while establishing an HTTP/2 connection.
public enum APNsConnectError: Error, Sendable, Hashable {
    /// The server did not negotiate ALPN `h2`.
    case alpnNotH2(String?)
    /// The connection closed before the server's first SETTINGS frame.
    case closedDuringHandshake
}

/// Makes TLS HTTP/2 connections to APNs.
public struct APNsHTTP2ConnectionFactory: APNsConnectionFactory {
    private let configuration: APNsHTTP2ConnectionConfiguration
    private let sslContext: NIOSSLContext
    private let group: any EventLoopGroup
    private let logger: Logger

    /// Creates the factory; builds the TLS context once (fails on unreadable CA or key files).
    public init(configuration: APNsHTTP2ConnectionConfiguration, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger = Logger(label: "apns.http2")) throws {
        var clientCertificate: APNsClientCertificate?
        if case .certificate(let certificate) = configuration.credential {
            clientCertificate = certificate
            certificate.reportExpiry(logger: logger)
        }
        let tls = APNsTLS.clientConfiguration(caFile: configuration.caFile, clientCertificate: clientCertificate)
        self.sslContext = try NIOSSLContext(configuration: tls)
        self.configuration = configuration
        self.group = group
        self.logger = logger
    }

    public func makeConnection(id: APNsConnectionID, delegate: any APNsConnectionDelegate) async throws -> APNsEstablishedConnection {
        let configuration = self.configuration
        let sslContext = self.sslContext
        let logger = self.logger
        let endpoint = configuration.endpoint
        let serverHostname: String? = endpoint.isIPAddress ? nil : endpoint.host
        let bootstrap = ClientBootstrap(group: group)
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(configuration.connectTimeout)
        let (channel, multiplexer, ready, shared) = try await bootstrap.connect(host: endpoint.host, port: endpoint.port) { channel in
            channel.eventLoop.makeCompletedFuture {
                let sync = channel.pipeline.syncOperations
                try sync.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                try sync.addHandler(APNsFlushCoalescingHandler())
                let multiplexer = try sync.configureHTTP2Pipeline(
                    mode: .client,
                    connectionConfiguration: .init(),
                    streamConfiguration: .init()
                ) { stream in
                    // APNs never pushes streams; refuse any.
                    stream.close(promise: nil)
                    return stream.eventLoop.makeSucceededVoidFuture()
                }
                let readyPromise = channel.eventLoop.makePromise(of: Int.self)
                let shared = APNsHTTP2SharedState()
                let handler = APNsHTTP2ConnectionHandler(
                    id: id, delegate: delegate, ready: readyPromise, shared: shared,
                    pingInterval: configuration.pingInterval, pingTimeout: configuration.pingTimeout, logger: logger)
                try sync.addHandler(handler)
                return (channel, multiplexer, readyPromise.futureResult, NIOLoopBound(shared, eventLoop: channel.eventLoop))
            }
        }
        let timeout = channel.eventLoop.scheduleTask(in: configuration.connectTimeout) {
            channel.close(promise: nil)
        }
        defer { timeout.cancel() }
        let maxStreams: Int
        do {
            maxStreams = try await ready.get()
        } catch {
            try? await channel.close()
            throw error
        }
        let connection = APNsHTTP2Connection(
            id: id, channel: channel, multiplexer: multiplexer, shared: shared, credential: configuration.credential,
            authority: endpoint.port == 443 ? endpoint.host : "\(endpoint.host):\(endpoint.port)")
        return APNsEstablishedConnection(connection: connection, maxConcurrentStreams: maxStreams)
    }
}

/// What the streams of one connection need to know about it; confined to the connection's event loop.
final class APNsHTTP2SharedState {
    /// The last-stream-id of the GOAWAY received, if any: streams above it were never processed.
    var goAwayLastStreamID: HTTP2StreamID?
}

/// One HTTP/2 connection to APNs.
final class APNsHTTP2Connection: APNsConnection {
    let id: APNsConnectionID
    private let channel: any Channel
    private let multiplexer: NIOHTTP2Handler.StreamMultiplexer
    private let shared: NIOLoopBound<APNsHTTP2SharedState>
    private let credential: APNsCredential
    private let authority: String

    init(id: APNsConnectionID, channel: any Channel, multiplexer: NIOHTTP2Handler.StreamMultiplexer, shared: NIOLoopBound<APNsHTTP2SharedState>, credential: APNsCredential, authority: String) {
        self.id = id
        self.channel = channel
        self.multiplexer = multiplexer
        self.shared = shared
        self.credential = credential
        self.authority = authority
    }

    func send(_ notification: APNsNotification, deadline: NIODeadline) async -> APNsAttemptResult {
        var bearer: String?
        var headers = HPACKHeaders()
        headers.reserveCapacity(12)
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        // Values that differ per request are never put in the HPACK dynamic table, so the repeated ones
        // (authorization, topic, push type) stay indexed and cost one byte each after the first request.
        headers.add(name: ":path", value: "/3/device/" + notification.token.hex, indexing: .nonIndexable)
        headers.add(name: ":authority", value: authority)
        if case .token(let provider) = credential {
            let token = provider.currentToken()
            bearer = token
            // Indexed on purpose: the connection is ours alone (no attacker-chosen data shares its compression
            // context), and re-sending a ~200-byte JWT literal on every stream is the largest per-request cost.
            headers.add(name: "authorization", value: "bearer " + token)
        }
        headers.add(name: "apns-topic", value: notification.topic)
        headers.add(name: "apns-push-type", value: notification.pushType.rawValue)
        headers.add(name: "apns-priority", value: String(notification.priority.rawValue))
        headers.add(name: "apns-id", value: notification.apnsID.uuidString.lowercased(), indexing: .nonIndexable)
        if let expiration = notification.expiration {
            headers.add(name: "apns-expiration", value: String(expiration), indexing: .nonIndexable)
        }
        if let collapseID = notification.collapseID {
            headers.add(name: "apns-collapse-id", value: collapseID, indexing: .nonIndexable)
        }
        headers.add(name: "content-length", value: String(notification.payload.count), indexing: .nonIndexable)

        let eventLoop = channel.eventLoop
        let promise = eventLoop.makePromise(of: APNsAttemptResult.self)
        let payload = notification.payload
        let requestHeaders = headers
        let shared = self.shared
        multiplexer.createStreamChannel { stream in
            stream.eventLoop.makeCompletedFuture {
                var body = stream.allocator.buffer(capacity: payload.count)
                body.writeBytes(payload)
                try stream.pipeline.syncOperations.addHandler(
                    APNsStreamHandler(headers: requestHeaders, body: body, deadline: deadline, shared: shared.value, promise: promise))
            }
        }.whenFailure { _ in
            promise.succeed(.failure(.connectionLost))
        }
        let result = (try? await promise.futureResult.get()) ?? .failure(.connectionLost)
        if case .response(let response) = result, response.reason == .expiredProviderToken,
            case .token(let provider) = credential, let bearer
        {
            provider.providerTokenExpired(bearer)
        }
        return result
    }

    func close(graceful: Bool) async {
        let channel = self.channel
        if graceful {
            let goAway = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: .rootStream, errorCode: .noError, opaqueData: nil))
            try? await channel.writeAndFlush(goAway)
        }
        try? await channel.close()
    }
}

/// Handles one request stream: writes HEADERS + DATA, collects the response, enforces the deadline.
final class APNsStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private let headers: HPACKHeaders
    private var body: ByteBuffer?
    private let deadline: NIODeadline
    private let shared: APNsHTTP2SharedState
    private var streamID: HTTP2StreamID?
    private var promise: EventLoopPromise<APNsAttemptResult>?
    private var status: Int?
    private var apnsID: String?
    private var retryAfter: String?
    private var responseBody: [UInt8] = []
    private var timer: Scheduled<Void>?

    init(headers: HPACKHeaders, body: ByteBuffer, deadline: NIODeadline, shared: APNsHTTP2SharedState, promise: EventLoopPromise<APNsAttemptResult>) {
        self.headers = headers
        self.body = body
        self.deadline = deadline
        self.shared = shared
        self.promise = promise
    }

    func channelActive(context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(.headers(.init(headers: headers, endStream: false))), promise: nil)
        if let body {
            context.write(wrapOutboundOut(.data(.init(data: .byteBuffer(body), endStream: true))), promise: nil)
        }
        body = nil
        context.flush()
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(deadline: deadline) {
            let (handler, context) = bound.value
            handler.learnStreamID(context)
            handler.complete(.failure(.deadlineExceeded))
            context.close(promise: nil)  // RST_STREAM CANCEL
        }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let frame):
            if status == nil {
                status = frame.headers.first(name: ":status").flatMap { Int($0) }
                apnsID = frame.headers.first(name: "apns-id")
                retryAfter = frame.headers.first(name: "retry-after")
            }
            if frame.endStream { finish() }
        case .data(let frame):
            if case .byteBuffer(var buffer) = frame.data, let bytes = buffer.readBytes(length: buffer.readableBytes) {
                responseBody.append(contentsOf: bytes)
            }
            if frame.endStream { finish() }
        default:
            break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        learnStreamID(context)
        if let closed = error as? NIOHTTP2Errors.StreamClosed, closed.errorCode == .refusedStream {
            complete(.failure(.refused))
        } else if error is NIOHTTP2Errors.StreamClosed {
            complete(.failure(.connectionLost))
        } else {
            complete(.failure(.streamError(String(describing: type(of: error)))))
        }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        learnStreamID(context)
        complete(.failure(.connectionLost))
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        learnStreamID(context)
        complete(.failure(.connectionLost))
    }

    /// The stream id is assigned when HEADERS reach the connection; read it when a failure is classified.
    func learnStreamID(_ context: ChannelHandlerContext) {
        if streamID == nil {
            streamID = try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)
        }
    }

    private func finish() {
        guard let status else {
            complete(.failure(.streamError("response without :status")))
            return
        }
        complete(.response(APNsResponse.parse(status: status, apnsIDHeader: apnsID, retryAfterHeader: retryAfter, body: responseBody)))
    }

    private func complete(_ result: APNsAttemptResult) {
        var result = result
        // After GOAWAY, a stream above last-stream-id (or one that never got an id) was certainly not processed.
        if case .failure(let failure) = result, failure != .deadlineExceeded, let last = shared.goAwayLastStreamID,
            streamID.map({ $0 > last }) ?? true
        {
            result = .failure(.refused)
        }
        timer?.cancel()
        timer = nil
        guard let promise else { return }
        self.promise = nil
        promise.succeed(result)
    }
}

/// Connection-level frames: SETTINGS (max concurrent streams), GOAWAY, PING keep-alive and its timeout.
final class APNsHTTP2ConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private let id: APNsConnectionID
    private let delegate: any APNsConnectionDelegate
    private let shared: APNsHTTP2SharedState
    private var ready: EventLoopPromise<Int>?
    private let pingInterval: TimeAmount
    private let pingTimeout: TimeAmount
    private let logger: Logger
    private var maxStreams = 100
    private var goingAway = false
    private var pingTask: RepeatedTask?
    private var pingTimeoutTask: Scheduled<Void>?
    private var outstandingPing: UInt64?
    private var pingCounter: UInt64 = 0
    private var closedReported = false

    init(id: APNsConnectionID, delegate: any APNsConnectionDelegate, ready: EventLoopPromise<Int>, shared: APNsHTTP2SharedState, pingInterval: TimeAmount, pingTimeout: TimeAmount, logger: Logger) {
        self.id = id
        self.delegate = delegate
        self.shared = shared
        self.ready = ready
        self.pingInterval = pingInterval
        self.pingTimeout = pingTimeout
        self.logger = logger
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted(let negotiated) = event as? TLSUserEvent, negotiated != "h2" {
            ready?.fail(APNsConnectError.alpnNotH2(negotiated))
            ready = nil
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .settings(.settings(let settings)):
            var changed = false
            for setting in settings where setting.parameter == .maxConcurrentStreams {
                maxStreams = setting.value
                changed = true
            }
            if let ready {
                self.ready = nil
                ready.succeed(maxStreams)
                startPinging(context: context)
            } else if changed {
                delegate.connection(id, maxConcurrentStreamsChanged: maxStreams)
            }
        case .goAway(let lastStreamID, let errorCode, _):
            shared.goAwayLastStreamID = min(shared.goAwayLastStreamID ?? lastStreamID, lastStreamID)
            if !goingAway {
                goingAway = true
                logger.info("APNs sent GOAWAY", metadata: ["connection": "\(id)", "last_stream_id": "\(lastStreamID)", "error_code": "\(errorCode)"])
                delegate.connectionGoingAway(id)
            }
        case .ping(let data, ack: true):
            if let outstanding = outstandingPing, data.integer == outstanding {
                outstandingPing = nil
                pingTimeoutTask?.cancel()
                pingTimeoutTask = nil
            }
        default:
            break
        }
    }

    private func startPinging(context: ChannelHandlerContext) {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        pingTask = context.eventLoop.scheduleRepeatedTask(initialDelay: pingInterval, delay: pingInterval) { _ in
            let (handler, context) = bound.value
            handler.sendPing(context: context)
        }
    }

    private func sendPing(context: ChannelHandlerContext) {
        guard outstandingPing == nil else { return }  // the timeout task is already armed
        pingCounter &+= 1
        let value = pingCounter
        outstandingPing = value
        let data = HTTP2PingData(withInteger: value)
        context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(data, ack: false))), promise: nil)
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        pingTimeoutTask = context.eventLoop.scheduleTask(in: pingTimeout) {
            let (handler, context) = bound.value
            handler.logger.warning("APNs connection PING timed out; declaring it dead", metadata: ["connection": "\(handler.id)"])
            Counter(label: "apns_ping_timeouts_total").increment()
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("APNs connection error", metadata: ["connection": "\(id)", "error": "\(error)"])
        if let ready {
            self.ready = nil
            ready.fail(error)
            context.close(promise: nil)
            return
        }
        // The HTTP/2 layer also reports stream-level problems here (a frame for a stream already closed, ...);
        // those must not take down the other streams. Transport and TLS failures end the connection; HTTP/2
        // connection errors are answered with GOAWAY by the HTTP/2 layer, and the PING keeps watch.
        if error is IOError || error is NIOSSLError || error is BoringSSLError || error is ChannelError {
            context.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // The channel may close before it ever became active (connect timeout): never leak the promise.
        if let ready {
            self.ready = nil
            ready.fail(APNsConnectError.closedDuringHandshake)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        pingTask?.cancel()
        pingTask = nil
        pingTimeoutTask?.cancel()
        pingTimeoutTask = nil
        if let ready {
            self.ready = nil
            ready.fail(APNsConnectError.closedDuringHandshake)
        } else if !closedReported {
            closedReported = true
            delegate.connectionClosed(id)
        }
        context.fireChannelInactive()
    }
}

/// Coalesces flushes: every `flush` within one event-loop tick becomes a single flush on the next handler
/// (fewer TLS records and syscalls when many streams write at once). Sits between TLS and HTTP/2.
public final class APNsFlushCoalescingHandler: ChannelOutboundHandler, RemovableChannelHandler {
    public typealias OutboundIn = ByteBuffer
    public typealias OutboundOut = ByteBuffer

    private var flushPending = false

    /// Creates the handler.
    public init() {}

    public func flush(context: ChannelHandlerContext) {
        guard !flushPending else { return }
        flushPending = true
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (handler, context) = bound.value
            guard handler.flushPending else { return }
            handler.flushPending = false
            context.flush()
        }
    }

    public func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        // Never let a close overtake writes that wait for the coalesced flush (answered streams would be lost).
        if flushPending {
            flushPending = false
            context.flush()
        }
        context.close(mode: mode, promise: promise)
    }
}
