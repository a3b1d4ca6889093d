package import NIOCore
import Foundation
import Metrics
import NIOExtras
import NIOHTTP1
import NIOPosix
package import NIOSSL

/// An HTTP proxy (`apns.proxy`) through which every APNs connection is tunnelled with `CONNECT`.
public struct APNsProxy: Sendable, Hashable, CustomStringConvertible {
    /// The proxy's `host:port`.
    public var endpoint: APNsEndpoint
    /// Basic authentication for the proxy, if it asks for it.
    public var credentials: APNsProxyCredentials?

    /// Creates the value.
    public init(endpoint: APNsEndpoint, credentials: APNsProxyCredentials? = nil) {
        self.endpoint = endpoint
        self.credentials = credentials
    }

    /// `host:port` only: whatever logs a proxy never shows its credentials.
    public var description: String { endpoint.description }
}

/// The `user:password` of the proxy's Basic authentication. Its descriptions are redacted, so that
/// interpolating it (or a value holding it) into a log line never prints the password.
public struct APNsProxyCredentials: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The user name.
    public let user: String
    private let password: String

    /// Creates the value.
    public init(user: String, password: String) {
        self.user = user
        self.password = password
    }

    /// Parses `user:password` (the user ends at the first `:`; the password may contain more). `nil` when there
    /// is no `:` or no user.
    public init?(parsing text: String) {
        guard let colon = text.firstIndex(of: ":"), colon != text.startIndex else { return nil }
        self.init(user: String(text[..<colon]), password: String(text[text.index(after: colon)...]))
    }

    /// The `Proxy-Authorization` header's value (RFC 7617).
    var basicAuthorization: String { "Basic " + Data("\(user):\(password)".utf8).base64EncodedString() }

    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
}

/// Why a tunnel through the proxy was not established. Every case names the proxy as `host:port`, never its
/// credentials; the supervisor logs it as a connect failure and retries with backoff.
public enum APNsProxyError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The proxy answered `CONNECT` with a status other than 2xx (403 forbidden target, 407 authentication
    /// required or wrong credentials, 502 target unreachable from the proxy...).
    case refused(proxy: APNsEndpoint, target: APNsEndpoint, status: Int, statusLine: String)
    /// No TCP connection to the proxy.
    case unreachable(proxy: APNsEndpoint, cause: String)
    /// The proxy closed the connection before it answered `CONNECT`.
    case closed(proxy: APNsEndpoint, target: APNsEndpoint)
    /// The proxy did not answer `CONNECT` within the connect timeout.
    case timedOut(proxy: APNsEndpoint, target: APNsEndpoint)
    /// The proxy's answer to `CONNECT` was not one a tunnel can follow (a 2xx with a body, bytes that are not HTTP).
    case invalidAnswer(proxy: APNsEndpoint, target: APNsEndpoint, cause: String)

    public var description: String {
        switch self {
        case .refused(let proxy, let target, _, let statusLine):
            "proxy \(proxy) refused CONNECT \(target): \(statusLine)"
        case .unreachable(let proxy, let cause):
            "proxy \(proxy) unreachable: \(cause)"
        case .closed(let proxy, let target):
            "proxy \(proxy) closed the connection before answering CONNECT \(target)"
        case .timedOut(let proxy, let target):
            "proxy \(proxy) did not answer CONNECT \(target) in time"
        case .invalidAnswer(let proxy, let target, let cause):
            "proxy \(proxy) answered CONNECT \(target) unexpectedly: \(cause)"
        }
    }

    /// The `reason` label of `apns_proxy_connect_failures_total` (a small, fixed set), and the status for refusals.
    var metricDimensions: [(String, String)] {
        switch self {
        case .refused(_, _, let status, _): [("reason", "refused"), ("status", String(status))]
        case .unreachable: [("reason", "unreachable")]
        case .closed: [("reason", "closed")]
        case .timedOut: [("reason", "timeout")]
        case .invalidAnswer: [("reason", "invalid_answer")]
        }
    }
}

/// Opens the channel of every APNs connection (HTTP/2, binary gateway, feedback): TCP to the APNs host, or
/// to `proxy` and a `CONNECT` tunnel through it; then TLS to the APNs host, verified end to end (SNI and the
/// certificate's name are the APNs host's, never the proxy's), then the protocol's own handlers. `package`: the
/// nghttp2 client (`APNsNGHTTP2`) opens its channels here too, so the proxy applies to it.
package struct APNsConnector: Sendable {
    package var group: any EventLoopGroup
    package var proxy: APNsProxy?
    /// The TCP connect budget; with a proxy, also the budget of its answer to `CONNECT`.
    package var connectTimeout: TimeAmount

    package init(group: any EventLoopGroup, proxy: APNsProxy?, connectTimeout: TimeAmount) {
        self.group = group
        self.proxy = proxy
        self.connectTimeout = connectTimeout
    }

    /// Connects to `endpoint`, adds TLS and whatever `addHandlers` adds (it runs on the channel's event loop,
    /// with the TLS handler in place and the handshake under way), and returns the channel and what
    /// `addHandlers` returned.
    package func connect<Output: Sendable>(
        to endpoint: APNsEndpoint, sslContext: NIOSSLContext,
        addHandlers: @escaping @Sendable (any Channel) throws -> Output
    ) async throws -> (channel: any Channel, output: Output) {
        let bootstrap = ClientBootstrap(group: group)
            .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .connectTimeout(connectTimeout)
        let serverHostname: String? = endpoint.isIPAddress ? nil : endpoint.host
        @Sendable func addTLSAndHandlers(_ channel: any Channel) throws -> Output {
            try channel.pipeline.syncOperations.addHandler(
                NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname), position: .first)
            return try addHandlers(channel)
        }
        guard let proxy else {
            return try await bootstrap.connect(host: endpoint.host, port: endpoint.port) { channel in
                channel.eventLoop.makeCompletedFuture { (channel, try addTLSAndHandlers(channel)) }
            }
        }

        let (channel, tunnel, answer) = try await Self.countingFailures {
            do {
                return try await bootstrap.connect(host: proxy.endpoint.host, port: proxy.endpoint.port) { channel in
                    channel.eventLoop.makeCompletedFuture { try Self.addConnectHandlers(channel, proxy: proxy, target: endpoint, timeout: connectTimeout) }
                }
            } catch {
                throw APNsProxyError.unreachable(proxy: proxy.endpoint, cause: "\(error)")
            }
        }
        do {
            return try await Self.countingFailures {
                do {
                    try await tunnel.get()
                } catch {
                    let head = try? await channel.eventLoop.submit { answer.value.head }.get()
                    throw Self.proxyError(error, answer: head, proxy: proxy.endpoint, target: endpoint)
                }
                // The tunnel is up: the HTTP/1 codec leaves (the connect handler already did), then TLS to APNs comes
                // in. The decoder leaves on a later tick, and it must be gone before anything but HTTP/1 is written.
                try await channel.eventLoop.flatSubmit {
                    let sync = channel.pipeline.syncOperations
                    return EventLoopFuture.andAllSucceed(
                        [sync.removeHandler(answer.value), sync.removeHandler(name: Self.decoderName), sync.removeHandler(name: Self.encoderName)],
                        on: channel.eventLoop)
                }.get()
                let output = try await channel.eventLoop.submit {
                    guard channel.isActive else { throw APNsProxyError.closed(proxy: proxy.endpoint, target: endpoint) }
                    return try addTLSAndHandlers(channel)
                }.get()
                return (channel, output)
            }
        } catch {
            try? await channel.close()
            throw error
        }
    }

    private static let encoderName = "apns-proxy-request-encoder"
    private static let decoderName = "apns-proxy-response-decoder"

    /// The pipeline of the `CONNECT` exchange: an HTTP/1 client codec, the recorder of the proxy's answer, and
    /// swift-nio-extras' connect handler, which sends `CONNECT` once the channel is active.
    private static func addConnectHandlers(_ channel: any Channel, proxy: APNsProxy, target: APNsEndpoint, timeout: TimeAmount) throws
        -> (any Channel, EventLoopFuture<Void>, NIOLoopBound<ProxyAnswerRecorder>)
    {
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(HTTPRequestEncoder(), name: encoderName)
        // Nothing follows the answer before our TLS ClientHello, so bytes after it would be a broken proxy's.
        try sync.addHandler(ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes)), name: decoderName)
        let answer = ProxyAnswerRecorder()
        try sync.addHandler(answer)
        var headers = HTTPHeaders()
        // RFC 9110: CONNECT carries the target's authority in Host too.
        headers.add(name: "Host", value: "\(target.host):\(target.port)")
        if let credentials = proxy.credentials {
            headers.add(name: "Proxy-Authorization", value: credentials.basicAuthorization)
        }
        let tunnel = channel.eventLoop.makePromise(of: Void.self)
        try sync.addHandler(NIOHTTP1ProxyConnectHandler(
            targetHost: target.host, targetPort: target.port, headers: headers, deadline: .now() + timeout, promise: tunnel))
        return (channel, tunnel.futureResult, NIOLoopBound(answer, eventLoop: channel.eventLoop))
    }

    /// The connect handler's error as what it means for an operator, with the proxy's status line when it answered.
    private static func proxyError(_ error: any Error, answer: HTTPResponseHead?, proxy: APNsEndpoint, target: APNsEndpoint) -> APNsProxyError {
        if let answer, !(200..<300).contains(answer.status.code) {
            return .refused(proxy: proxy, target: target, status: Int(answer.status.code),
                            statusLine: "\(answer.version) \(answer.status.code) \(answer.status.reasonPhrase)")
        }
        if let error = error as? NIOHTTP1ProxyConnectHandler.Error {
            if error == .httpProxyHandshakeTimeout() { return .timedOut(proxy: proxy, target: target) }
            if error == .remoteConnectionClosed() || error == .channelUnexpectedlyInactive() { return .closed(proxy: proxy, target: target) }
        }
        if let error = error as? ChannelError, error == .ioOnClosedChannel || error == .eof || error == .alreadyClosed {
            return .closed(proxy: proxy, target: target)
        }
        return .invalidAnswer(proxy: proxy, target: target, cause: "\(error)")
    }

    /// Runs `body`; a proxy failure it throws is counted in `apns_proxy_connect_failures_total`.
    private static func countingFailures<Result>(_ body: () async throws -> Result) async throws -> Result {
        do {
            return try await body()
        } catch let error as APNsProxyError {
            Counter(label: "apns_proxy_connect_failures_total", dimensions: error.metricDimensions).increment()
            throw error
        }
    }
}

/// Keeps the head of the proxy's answer to `CONNECT`: swift-nio-extras' error for a refusal does not expose
/// the status, and the operator needs it (403 and 407 call for different fixes).
final class ProxyAnswerRecorder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias InboundOut = HTTPClientResponsePart

    private(set) var head: HTTPResponseHead?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data), self.head == nil {
            self.head = head
        }
        context.fireChannelRead(data)
    }
}
