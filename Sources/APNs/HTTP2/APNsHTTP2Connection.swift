public import NIOCore
package import Foundation
public import Logging
import NIOHPACK
import NIOHTTP2
public import NIOPosix
import NIOSSL

/// Settings of one HTTP/2 connection.
public struct APNsHTTP2ConnectionConfiguration: Sendable {
    /// Where to connect.
    public var endpoint: APNsEndpoint
    /// Token or certificate auth.
    public var credential: APNsCredential
    /// PEM file of extra trust anchors (`apns.ca_file`); the system trust store is always used as well.
    public var caFile: String?
    /// Interval between PINGs.
    public var pingInterval: Duration
    /// How long a PING may stay unanswered before the connection is declared dead.
    public var pingTimeout: Duration
    /// TCP + TLS + first SETTINGS budget (with a proxy: TCP + the proxy's answer, then TLS + first SETTINGS).
    public var connectTimeout: Duration
    /// The HTTP proxy every connection is tunnelled through (`apns.proxy`), if any.
    public var proxy: APNsProxy?

    /// Creates a configuration.
    public init(
        endpoint: APNsEndpoint,
        credential: APNsCredential,
        caFile: String? = nil,
        pingInterval: Duration = .seconds(60),
        pingTimeout: Duration = .seconds(10),
        connectTimeout: Duration = .seconds(10),
        proxy: APNsProxy? = nil
    ) {
        self.endpoint = endpoint
        self.credential = credential
        self.caFile = caFile
        self.pingInterval = pingInterval
        self.pingTimeout = pingTimeout
        self.connectTimeout = connectTimeout
        self.proxy = proxy
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
    private let bootstrap: APNsHTTP2ConnectionBootstrap

    /// Creates the factory; builds the TLS context once (fails on unreadable CA or key files).
    public init(configuration: APNsHTTP2ConnectionConfiguration, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger = Logger(label: "apns.http2")) throws {
        self.bootstrap = try APNsHTTP2ConnectionBootstrap(configuration: configuration, group: group, logger: logger)
    }

    public var tokenProvider: APNsTokenProvider? { bootstrap.tokenProvider }

    public func replaceClientCertificate(_ certificate: APNsClientCertificate) throws -> Bool {
        try bootstrap.replaceClientCertificate(certificate)
        return true
    }

    public func makeConnection(id: APNsConnectionID, delegate: any APNsConnectionDelegate) async throws -> APNsEstablishedConnection {
        try await bootstrap.connect(id: id, delegate: delegate, makeConnection: APNsHTTP2Connection.init, addHandlers: Self.addHandlers)
    }

    /// The pipeline after TLS. Frame level: requests are streams in one table on the connection channel, no child
    /// channel each. Header-block and content-length validation off: every header we send is built here from a
    /// validated APNsNotification (token hex, topic, enum values, a checked collapse id, our own JWT, content-length
    /// from the payload we send), and a response is read by status and JSON only: validating them again would
    /// walk every header of every request twice.
    private static func addHandlers(to channel: any Channel, core: APNsHTTP2ConnectionCore) throws -> APNsHTTP2ConnectionHandler {
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(APNsFlushCoalescingHandler())
        try sync.addHandler(NIOHTTP2Handler(mode: .client, headerBlockValidation: .disabled, contentLengthValidation: .disabled))
        try sync.addHandler(HTTP2InboundWindowHandler(connectionTarget: connectionWindow, streamTarget: streamWindow))
        let handler = APNsHTTP2ConnectionHandler(core: core)
        try sync.addHandler(handler)
        return handler
    }

    /// The receive windows a connection keeps open. Responses are small (a status, at most a short reason JSON),
    /// so the protocol's default stream window is plenty; the connection window is grown so that a burst of
    /// error bodies never waits for an update.
    static let streamWindow = 65_535
    static let connectionWindow = 1 << 20
}

/// One HTTP/2 connection to APNs.
final class APNsHTTP2Connection: APNsConnection {
    private let established: APNsHTTP2EstablishedChannel<APNsHTTP2ConnectionHandler>

    init(_ established: APNsHTTP2EstablishedChannel<APNsHTTP2ConnectionHandler>) {
        self.established = established
    }

    var id: APNsConnectionID { established.id }

    func send(_ notification: APNsNotification, deadline: NIODeadline, completion: @escaping @Sendable (APNsAttemptResult) -> Void) {
        var headers = HPACKHeaders()
        headers.reserveCapacity(12)
        // Values that differ per request are never put in the HPACK dynamic table, so the repeated ones
        // (authorization, topic, push type) stay indexed and cost one byte each after the first request.
        switch notification.recipient {
        case .device(let token):
            addRequestLine(method: "POST", path: token.hex(prefixedBy: "/3/device/"), to: &headers)
            headers.add(name: "apns-topic", value: notification.topic)
            addDeliveryHeaders(of: notification, idHeader: "apns-id", to: &headers)
        case .channel(let channel):
            // The bundle id is in the path; the channel in its own header (not indexed: it varies per request).
            addRequestLine(method: "POST", path: "/4/broadcasts/apps/" + notification.topic, to: &headers)
            headers.add(name: "apns-channel-id", value: channel.value, indexing: .nonIndexable)
            addDeliveryHeaders(of: notification, idHeader: "apns-request-id", to: &headers)
        }
        let request = APNsHTTP2Request(headers: headers, payload: notification.payload, deadline: deadline)
        let handler = established.handler
        established.channel.eventLoop.execute {
            handler.value.start(request, completion: .attempt(completion))
        }
    }

    /// The pseudo-headers and `authorization`; returns the generation of the provider token sent, if any (to renew
    /// it when APNs says it expired).
    @discardableResult
    private func addRequestLine(method: String, path: String, to headers: inout HPACKHeaders) -> UInt64? {
        headers.add(name: ":method", value: method)
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":path", value: path, indexing: .nonIndexable)
        headers.add(name: ":authority", value: established.authority)
        guard case .token(let provider) = established.credential else { return nil }
        // Indexed on purpose: the connection is ours alone (no attacker-chosen data shares its compression
        // context), and re-sending a ~200-byte JWT literal on every stream is the largest per-request cost.
        headers.add(name: "authorization", value: provider.currentAuthorization().header)
        return provider.generation
    }

    /// The headers every notification carries. `idHeader` names its UUID: `apns-id` for a device,
    /// `apns-request-id` for a broadcast.
    private func addDeliveryHeaders(of notification: APNsNotification, idHeader: String, to headers: inout HPACKHeaders) {
        headers.add(name: "apns-push-type", value: notification.pushType.rawValue)
        headers.add(name: "apns-priority", value: String(notification.priority.rawValue))
        headers.add(name: idHeader, value: APNsUUIDText.format(notification.apnsID), indexing: .nonIndexable)
        if let expiration = notification.expiration {
            headers.add(name: "apns-expiration", value: String(expiration), indexing: .nonIndexable)
        }
        if let collapseID = notification.collapseID {
            headers.add(name: "apns-collapse-id", value: collapseID, indexing: .nonIndexable)
        }
        headers.add(name: "content-length", value: String(notification.payload.count), indexing: .nonIndexable)
    }

    /// One request that is not a notification (channel management): `method` on `path` with the connection's
    /// authorization, `extraHeaders`, and `body` when not empty. The answer is returned as it came.
    func request(method: String, path: String, extraHeaders: [(String, String)], body: [UInt8], deadline: NIODeadline) async -> APNsHTTP2Exchange {
        var headers = HPACKHeaders()
        let tokenGeneration = addRequestLine(method: method, path: path, to: &headers)
        for (name, value) in extraHeaders { headers.add(name: name, value: value, indexing: .nonIndexable) }
        if !body.isEmpty {
            headers.add(name: "content-type", value: "application/json")
            headers.add(name: "content-length", value: String(body.count), indexing: .nonIndexable)
        }
        let result = await exchange(APNsHTTP2Request(headers: headers, payload: body, deadline: deadline))
        if case .answered(let answer) = result, answer.status == 403, let tokenGeneration, case .token(let provider) = established.credential,
            APNsResponse.parse(status: answer.status, apnsIDHeader: nil, retryAfterHeader: nil, body: answer.body).reason == .expiredProviderToken
        {
            provider.renewAfterExpiredProviderToken(generation: tokenGeneration)
        }
        return result
    }

    /// Hands a request to the event loop and waits for its answer.
    private func exchange(_ request: APNsHTTP2Request) async -> APNsHTTP2Exchange {
        let handler = established.handler
        let eventLoop = established.channel.eventLoop
        return await withCheckedContinuation { (continuation: CheckedContinuation<APNsHTTP2Exchange, Never>) in
            eventLoop.execute { handler.value.start(request, completion: .exchange { continuation.resume(returning: $0) }) }
        }
    }

    func close(graceful: Bool) async {
        let channel = established.channel
        if graceful {
            let goAway = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: .rootStream, errorCode: .noError, opaqueData: nil))
            try? await channel.writeAndFlush(goAway)
        }
        try? await channel.close()
    }
}

/// One request as it travels to the connection's event loop.
struct APNsHTTP2Request: Sendable {
    var headers: HPACKHeaders
    /// The body; a request without one (a GET, a DELETE) ends with its HEADERS.
    var payload: [UInt8]
    var deadline: NIODeadline
}

/// An answer as the server sent it: the status, the headers APNs uses, the body. Shared by the HTTP/2 clients
/// (swift-nio-http2 here, nghttp2 in `APNsNGHTTP2`) so that both read answers the same way.
package struct APNsHTTP2Answer: Sendable {
    package var status: Int
    /// `apns-id` (device sends), else `apns-request-id` (broadcasts and channel management), read as a UUID.
    package var apnsID: UUID?
    package var retryAfter: String?
    /// `apns-channel-id`: the id of a channel just created.
    package var channelID: String?
    /// `apns-unique-id`: the notification's entry in the Push Notifications Console's delivery log (sandbox only).
    package var uniqueID: String?
    package var body: [UInt8]

    package init(status: Int, apnsID: UUID?, retryAfter: String?, channelID: String?, uniqueID: String? = nil, body: [UInt8]) {
        self.status = status
        self.apnsID = apnsID
        self.retryAfter = retryAfter
        self.channelID = channelID
        self.uniqueID = uniqueID
        self.body = body
    }
}

/// How a request ended: answered, or not (the transport failed first).
package enum APNsHTTP2Exchange: Sendable {
    case answered(APNsHTTP2Answer)
    case failed(APNsTransportFailure)

    /// What a notification's exchange means to the supervisor (which renews an expired provider token itself).
    package var attemptResult: APNsAttemptResult {
        switch self {
        case .answered(let answer):
            .response(APNsResponse.parse(status: answer.status, apnsID: answer.apnsID, retryAfterHeader: answer.retryAfter,
                                         uniqueIDHeader: answer.uniqueID, body: answer.body))
        case .failed(let failure):
            .failure(failure)
        }
    }
}

/// The connection at the frame level: a table of request streams (HEADERS + DATA out, the response collected per
/// stream id, a deadline each), and the connection-level frames: SETTINGS (max concurrent streams), GOAWAY, PING
/// keep-alive and its timeout, as ``APNsHTTP2ConnectionCore`` decides them. Confined to the connection's event loop.
///
/// Stream ids are allocated here, in increasing order as HTTP/2 requires. When the server's
/// SETTINGS_MAX_CONCURRENT_STREAMS is reached, `NIOHTTP2Handler` holds new streams back until others close.
final class APNsHTTP2ConnectionHandler: ChannelInboundHandler, APNsHTTP2FrameWriter {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// The stream table, handshake, timers and shutdown shared with the nghttp2 handler.
    private let core: APNsHTTP2ConnectionCore
    private var nextStreamID = 1

    init(core: APNsHTTP2ConnectionCore) {
        self.core = core
    }

    func handlerAdded(context: ChannelHandlerContext) {
        core.handlerAdded(context: context)
    }

    // MARK: requests

    /// Opens a stream for `request` and writes its HEADERS and DATA; `completion` gets the outcome, on the event loop.
    func start(_ request: APNsHTTP2Request, completion: APNsHTTP2StreamTable.Completion) {
        guard let context = core.context, !core.isInactive else {
            completion(.failed(.connectionLost))
            return
        }
        // After GOAWAY no stream may be opened; and a connection whose stream ids are used up is done.
        guard core.streams.goAwayLastStreamID == nil, nextStreamID <= Int(Int32.max) else {
            completion(.failed(.goingAway))
            return
        }
        let streamID = HTTP2StreamID(nextStreamID)
        nextStreamID += 2
        // In the table before the writes: a write may fail the stream synchronously (errorCaught).
        core.streams.open(Int32(streamID), completion: completion, deadline: request.deadline)
        core.armDeadlineTimer(writer: self)
        if request.payload.isEmpty {
            // Channel management reads and deletes have no body.
            context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: request.headers, endStream: true)))), promise: nil)
            return
        }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: request.headers, endStream: false)))), promise: nil)
        let body = context.channel.allocator.buffer(bytes: request.payload)
        // Flushed per request on purpose: NIOHTTP2Handler releases the DATA frames of one flush in hash order,
        // so a flush per many requests would reorder their END_STREAMs; the server would answer out of order, and
        // both sides' stream tables (sorted arrays) would pay for removing from the middle on every response.
        // APNsFlushCoalescingHandler below still makes it one socket write per event-loop tick.
        context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(body), endStream: true)))), promise: nil)
    }

    // MARK: frames the core asks for

    func cancelStream(_ streamID: APNsHTTP2StreamTable.StreamID) {
        // RST_STREAM CANCEL: the server may stop working on it (a stream still held back is simply dropped).
        core.context?.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: HTTP2StreamID(streamID), payload: .rstStream(.cancel))), promise: nil)
    }

    func writePing(_ value: UInt64) {
        core.context?.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: value), ack: false))), promise: nil)
    }

    /// A stream the server reset with an error is that request's own failure; REFUSED_STREAM was never processed; a
    /// stream closed for no reason of its own (CANCEL, or none: the connection went) was lost with its connection.
    private static func failure(closedWith reason: HTTP2ErrorCode?) -> APNsTransportFailure {
        switch reason {
        case .refusedStream?: .refused
        case nil, .cancel?: .connectionLost
        case let code?: .streamError("reset \(code)")
        }
    }

    // MARK: inbound

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let closed = event as? StreamClosedEvent {
            // A stream closed before its response ended: reset by the server, or dropped by a GOAWAY.
            core.streams.complete(Int32(closed.streamID), .failed(Self.failure(closedWith: closed.reason)))
        } else {
            core.userInboundEventTriggered(event)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        if frame.streamID != .rootStream {
            readStreamFrame(frame)
            return
        }
        switch frame.payload {
        case .settings(.settings(let settings)):
            let maxConcurrentStreams = settings.last { $0.parameter == .maxConcurrentStreams }?.value
            core.settingsReceived(maxConcurrentStreams: maxConcurrentStreams, writer: self)
        case .goAway(let lastStreamID, let errorCode, _):
            core.goAwayReceived(lastStreamID: Int32(lastStreamID), errorCode: errorCode)
        case .ping(let data, ack: true):
            core.pingAcknowledged(data.integer)
        default:
            break
        }
    }

    private func readStreamFrame(_ frame: HTTP2Frame) {
        let streamID = Int32(frame.streamID)
        guard core.streams.contains(streamID) else { return }
        switch frame.payload {
        case .headers(let payload):
            core.streams.update(streamID) { stream in
                guard stream.status == nil else { return }
                stream.status = payload.headers.first(name: ":status").flatMap { Int($0) }
                let id = payload.headers.first(name: "apns-id") ?? payload.headers.first(name: "apns-request-id")
                stream.keepFirst(apnsID: id.flatMap { APNsUUIDText.parse($0) })
                stream.retryAfter = payload.headers.first(name: "retry-after")
                stream.channelID = payload.headers.first(name: "apns-channel-id")
                stream.uniqueID = payload.headers.first(name: "apns-unique-id")
            }
            if payload.endStream { core.streams.finish(streamID) }
        case .data(let payload):
            if case .byteBuffer(let buffer) = payload.data {
                core.streams.update(streamID) { $0.body.append(contentsOf: buffer.readableBytesView) }
            }
            if payload.endStream { core.streams.finish(streamID) }
        case .rstStream(let code):
            core.streams.complete(streamID, .failed(Self.failure(closedWith: code)))
        default:
            break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if core.errorCaught(error) {
            context.close(promise: nil)
            return
        }
        // A stream-level problem fails that stream only (NIOHTTP2Handler has reset it).
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            let base = streamError.baseError
            let failure: APNsTransportFailure
            if let closed = base as? NIOHTTP2Errors.StreamClosed {
                failure = Self.failure(closedWith: closed.errorCode)
            } else {
                failure = .streamError(String(describing: type(of: base)))
            }
            core.streams.complete(Int32(streamError.streamID), .failed(failure))
            return
        }
        // Transport and TLS failures end the connection; HTTP/2 connection errors are answered with GOAWAY by the
        // HTTP/2 layer, and the PING keeps watch.
        if error is IOError || error is NIOSSLError || error is BoringSSLError || error is ChannelError {
            context.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        core.handlerRemoved()
    }

    func channelInactive(context: ChannelHandlerContext) {
        core.channelInactive()
        context.fireChannelInactive()
    }
}
