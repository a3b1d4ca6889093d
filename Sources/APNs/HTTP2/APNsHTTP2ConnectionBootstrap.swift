package import Logging
package import NIOCore
import NIOSSL
import Synchronization

/// What both APNs HTTP/2 connection factories (``APNsHTTP2ConnectionFactory`` on swift-nio-http2,
/// `APNsNGHTTP2ConnectionFactory` on nghttp2) share: the configuration, the TLS context built once, and the
/// making of a connection: TCP (or a `CONNECT` tunnel through `apns.proxy`), TLS, the protocol's handlers around
/// an ``APNsHTTP2ConnectionCore``, and the wait for the server's first SETTINGS within the connect timeout.
package struct APNsHTTP2ConnectionBootstrap: Sendable {
    /// The settings every connection is made with.
    package let configuration: APNsHTTP2ConnectionConfiguration
    private let tls: TLSContext
    private let group: any EventLoopGroup
    private let logger: Logger

    /// The TLS context new connections are made with: built once, and again when the client certificate is replaced.
    private final class TLSContext: Sendable {
        let current: Mutex<NIOSSLContext>
        init(_ context: NIOSSLContext) { current = Mutex(context) }
    }

    /// Builds the TLS context once (fails on unreadable CA or key files).
    package init(configuration: APNsHTTP2ConnectionConfiguration, group: any EventLoopGroup, logger: Logger) throws {
        var clientCertificate: APNsClientCertificate?
        if case .certificate(let certificate) = configuration.credential {
            clientCertificate = certificate
        }
        self.tls = TLSContext(try NIOSSLContext(configuration: APNsTLS.clientConfiguration(caFile: configuration.caFile, clientCertificate: clientCertificate)))
        self.configuration = configuration
        self.group = group
        self.logger = logger
    }

    /// New connections present `certificate` (a renewed client certificate); those open keep theirs. Throws, changing
    /// nothing, when the TLS context cannot be built with it.
    package func replaceClientCertificate(_ certificate: APNsClientCertificate) throws {
        let context = try NIOSSLContext(configuration: APNsTLS.clientConfiguration(caFile: configuration.caFile, clientCertificate: certificate))
        tls.current.withLock { $0 = context }
    }

    /// The provider token of token auth; `nil` for certificate auth.
    package var tokenProvider: APNsTokenProvider? {
        if case .token(let provider) = configuration.credential { provider } else { nil }
    }

    /// Opens a connection's channel and waits until it can carry work. `addHandlers` runs on the channel's event
    /// loop with TLS in place: it adds the protocol's handlers, among them the one that owns the given core, and
    /// returns that one. Once the server's first SETTINGS arrived (within the connect timeout, else the channel
    /// closes), `makeConnection` wraps the established channel into the connection the supervisor drives.
    package func connect<Handler: AnyObject>(
        id: APNsConnectionID, delegate: any APNsConnectionDelegate,
        makeConnection: (APNsHTTP2EstablishedChannel<Handler>) -> any APNsConnection,
        addHandlers: @escaping @Sendable (any Channel, APNsHTTP2ConnectionCore) throws -> Handler
    ) async throws -> APNsEstablishedConnection {
        let configuration = self.configuration
        let logger = self.logger
        let connector = APNsConnector(group: group, proxy: configuration.proxy, connectTimeout: TimeAmount(configuration.connectTimeout))
        let sslContext = tls.current.withLock { $0 }
        let (channel, (handler, ready)) = try await connector.connect(to: configuration.endpoint, sslContext: sslContext) { channel in
            let readyPromise = channel.eventLoop.makePromise(of: Int.self)
            let core = APNsHTTP2ConnectionCore(id: id, delegate: delegate, ready: readyPromise, configuration: configuration, logger: logger)
            do {
                return (NIOLoopBound(try addHandlers(channel, core), eventLoop: channel.eventLoop), readyPromise.futureResult)
            } catch {
                core.errorCaught(error)  // the promise is failed, never leaked
                throw error
            }
        }
        let timeout = channel.eventLoop.scheduleTask(in: TimeAmount(configuration.connectTimeout)) {
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
        let endpoint = configuration.endpoint
        let established = APNsHTTP2EstablishedChannel(
            id: id, channel: channel, handler: handler, credential: configuration.credential,
            authority: endpoint.port == 443 ? endpoint.host : "\(endpoint.host):\(endpoint.port)")
        return APNsEstablishedConnection(connection: makeConnection(established), maxConcurrentStreams: maxStreams)
    }
}

/// An established HTTP/2 connection's channel as the ``APNsConnection`` of either client wraps it: the channel,
/// the protocol's handler (touched on the channel's event loop only), and what every request on it carries alike.
package struct APNsHTTP2EstablishedChannel<Handler: AnyObject>: Sendable {
    /// The id the supervisor gave the connection.
    package let id: APNsConnectionID
    /// The connection's channel.
    package let channel: any Channel
    /// The handler that owns the connection's ``APNsHTTP2ConnectionCore``.
    package let handler: NIOLoopBound<Handler>
    /// Token or certificate auth: with a token, every request carries its `authorization`.
    package let credential: APNsCredential
    /// The `:authority` of every request: the host, with the port unless it is 443.
    package let authority: String
}
