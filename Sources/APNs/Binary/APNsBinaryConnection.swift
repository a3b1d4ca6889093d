public import NIOCore
import Foundation
public import Logging
import Metrics
public import NIOPosix
import NIOSSL
import NIOTLS

/// Settings of connections to the legacy binary gateway.
public struct APNsBinaryConnectionConfiguration: Sendable {
    /// The gateway (Apple's was `gateway.push.apple.com:2195`).
    public var endpoint: APNsEndpoint
    /// The client certificate (the binary interface knows no token auth).
    public var certificate: APNsClientCertificate
    /// PEM file of extra trust anchors (`apns.ca_file`); the system trust store is always used as well.
    public var caFile: String?
    /// The notification format (`apns.binary_command`).
    public var format: APNsBinaryFormat
    /// The unconfirmed window: its capacity is the connection's concurrency limit.
    public var window: APNsBinaryWindowConfiguration
    /// TCP + TLS budget.
    public var connectTimeout: Duration
    /// The HTTP proxy every connection is tunnelled through (`apns.proxy`), if any.
    public var proxy: APNsProxy?

    /// Creates a configuration.
    public init(
        endpoint: APNsEndpoint,
        certificate: APNsClientCertificate,
        caFile: String? = nil,
        format: APNsBinaryFormat = .framed,
        window: APNsBinaryWindowConfiguration = .init(),
        connectTimeout: Duration = .seconds(10),
        proxy: APNsProxy? = nil
    ) {
        self.endpoint = endpoint
        self.certificate = certificate
        self.caFile = caFile
        self.format = format
        self.window = window
        self.connectTimeout = connectTimeout
        self.proxy = proxy
    }
}

/// Makes TLS connections (client certificate) to the legacy binary gateway for ``APNsSupervisor``.
///
/// Each ``APNsConnection/send(_:deadline:)`` returns once the notification left the connection's unconfirmed
/// window: `delivered`, the status of an error response, `refused` when APNs dropped it after an earlier error
/// (the supervisor resends it at once on another connection), or `connectionLost` when the connection closed
/// with it unconfirmed (the supervisor retries it). The window's capacity is reported as the stream limit.
public struct APNsBinaryConnectionFactory: APNsConnectionFactory {
    private let configuration: APNsBinaryConnectionConfiguration
    private let sslContext: NIOSSLContext
    private let group: any EventLoopGroup
    private let logger: Logger

    /// Creates the factory; builds the TLS context once (fails on unreadable CA files).
    public init(configuration: APNsBinaryConnectionConfiguration, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger = Logger(label: "apns.binary")) throws {
        let tls = APNsTLS.clientConfiguration(caFile: configuration.caFile, clientCertificate: configuration.certificate, applicationProtocols: [])
        self.sslContext = try NIOSSLContext(configuration: tls)
        self.configuration = configuration
        self.group = group
        self.logger = logger
    }

    public func makeConnection(id: APNsConnectionID, delegate: any APNsConnectionDelegate) async throws -> APNsEstablishedConnection {
        let configuration = self.configuration
        let logger = self.logger
        let (channel, handler) = try await APNsLegacyTLS.connect(
            group: group, proxy: configuration.proxy, endpoint: configuration.endpoint, sslContext: sslContext,
            timeout: TimeAmount(configuration.connectTimeout)
        ) { handshake in
            APNsBinaryClientHandler(id: id, delegate: delegate, configuration: configuration, handshake: handshake, logger: logger)
        }
        let connection = APNsBinaryConnection(id: id, channel: channel, handler: handler, format: configuration.format)
        return APNsEstablishedConnection(connection: connection, maxConcurrentStreams: configuration.window.capacity)
    }
}

/// Opens a TLS connection for the legacy interfaces (gateway and feedback) and waits for the handshake.
enum APNsLegacyTLS {
    /// Connects (directly or through `proxy`), adds TLS and the handler `makeHandler` builds (on the channel's
    /// event loop; it must complete the promise when the handshake is done), and returns once the handshake completed.
    static func connect<Handler: ChannelInboundHandler & SendableMetatype>(
        group: any EventLoopGroup, proxy: APNsProxy?, endpoint: APNsEndpoint, sslContext: NIOSSLContext, timeout: TimeAmount,
        makeHandler: @escaping @Sendable (EventLoopPromise<Void>) -> Handler
    ) async throws -> (any Channel, NIOLoopBound<Handler>) {
        let connector = APNsConnector(group: group, proxy: proxy, connectTimeout: timeout)
        let (channel, (handler, handshake)) = try await connector.connect(to: endpoint, sslContext: sslContext) { channel in
            let sync = channel.pipeline.syncOperations
            try sync.addHandler(APNsFlushCoalescingHandler())
            let promise = channel.eventLoop.makePromise(of: Void.self)
            let handler = makeHandler(promise)
            try sync.addHandler(handler)
            return (NIOLoopBound(handler, eventLoop: channel.eventLoop), promise.futureResult)
        }
        let timer = channel.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
        defer { timer.cancel() }
        do {
            try await handshake.get()
        } catch {
            try? await channel.close()
            throw error
        }
        return (channel, handler)
    }
}

/// Errors while establishing a legacy connection.
public enum APNsLegacyConnectError: Error, Sendable, Hashable {
    /// The connection closed before the TLS handshake finished (a refused client certificate, for example).
    case closedDuringHandshake
}

/// One connection to the binary gateway.
final class APNsBinaryConnection: APNsConnection {
    let id: APNsConnectionID
    private let channel: any Channel
    private let handler: NIOLoopBound<APNsBinaryClientHandler>
    private let format: APNsBinaryFormat

    init(id: APNsConnectionID, channel: any Channel, handler: NIOLoopBound<APNsBinaryClientHandler>, format: APNsBinaryFormat) {
        self.id = id
        self.channel = channel
        self.handler = handler
        self.format = format
    }

    func send(_ notification: APNsNotification, deadline: NIODeadline, completion: @escaping @Sendable (APNsAttemptResult) -> Void) {
        // The limits are checked before the notification gets an identifier or a byte is written.
        let wire: APNsBinaryNotification
        do {
            wire = try APNsBinaryNotification(notification, identifier: 0)
            try wire.validate(for: format)
        } catch {
            completion(.response(error.equivalentStatus.response))
            return
        }
        let uuid = notification.apnsID.uuid
        // A resend keeps its identifier when it can, so the device view can tell a resend from a new notification.
        let preferred = UInt32(uuid.0) << 24 | UInt32(uuid.1) << 16 | UInt32(uuid.2) << 8 | UInt32(uuid.3)
        let promise = channel.eventLoop.makePromise(of: APNsAttemptResult.self)
        let handler = self.handler
        channel.eventLoop.execute {
            handler.value.enqueue(wire, preferredIdentifier: preferred, promise: promise)
        }
        promise.futureResult.whenComplete { result in
            switch result {
            case .success(let attempt): completion(attempt)
            case .failure: completion(.failure(.connectionLost))
            }
        }
    }

    func close(graceful: Bool) async {
        try? await channel.close()
    }
}

/// The binary connection's pipeline end: writes notifications in batches, keeps the unconfirmed window, reads
/// error responses. Confined to the channel's event loop.
final class APNsBinaryClientHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var handshake: EventLoopPromise<Void>?
    private let id: APNsConnectionID
    private let delegate: any APNsConnectionDelegate
    private let format: APNsBinaryFormat
    private let logger: Logger
    private var window: APNsBinaryWindow
    private var decoder = APNsBinaryErrorResponseDecoder()
    private var waiting: [APNsBinaryWindow.Ticket: EventLoopPromise<APNsAttemptResult>] = [:]
    private var nextTicket: APNsBinaryWindow.Ticket = 0
    private var context: ChannelHandlerContext?
    private var confirmationTimer: Scheduled<Void>?
    private var confirmationAt: NIODeadline?
    private var established = false
    private var closedReported = false

    init(id: APNsConnectionID, delegate: any APNsConnectionDelegate, configuration: APNsBinaryConnectionConfiguration, handshake: EventLoopPromise<Void>, logger: Logger) {
        self.handshake = handshake
        self.id = id
        self.delegate = delegate
        self.format = configuration.format
        self.window = APNsBinaryWindow(configuration: configuration.window)
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        failHandshake(APNsLegacyConnectError.closedDuringHandshake)
        self.context = nil
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent, let handshake {
            self.handshake = nil
            established = true
            handshake.succeed()
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("APNs binary connection error", metadata: ["connection": "\(id)", "error": "\(error)"])
        failHandshake(error)
        context.close(promise: nil)
    }

    /// Writes one notification (flushed with the others of this event-loop tick) and keeps it in the window.
    func enqueue(_ notification: APNsBinaryNotification, preferredIdentifier: UInt32, promise: EventLoopPromise<APNsAttemptResult>) {
        let ticket = nextTicket
        nextTicket += 1
        let now = NIODeadline.now()
        guard let context, let identifier = window.send(ticket: ticket, preferredIdentifier: preferredIdentifier, now: now) else {
            // Closed or full: nothing was written, so another connection may take it.
            promise.succeed(.failure(.refused))
            return
        }
        var wire = notification
        wire.identifier = identifier
        var buffer = context.channel.allocator.buffer(capacity: wire.encodedSize(format))
        do {
            try wire.encode(format, into: &buffer)
        } catch {
            // Unreachable: the connection validated it before. Never write a partial record.
            promise.succeed(.response(error.equivalentStatus.response))
            return
        }
        waiting[ticket] = promise
        context.write(wrapOutboundOut(buffer), promise: nil)
        context.flush()  // coalesced per event-loop tick by APNsFlushCoalescingHandler
        resolve(window.confirm(now: now))
        armConfirmationTimer(context: context)
    }

    private func armConfirmationTimer(context: ChannelHandlerContext) {
        guard let next = window.nextConfirmation else {
            confirmationTimer?.cancel()
            confirmationTimer = nil
            confirmationAt = nil
            return
        }
        if let at = confirmationAt, at <= next { return }
        confirmationTimer?.cancel()
        confirmationAt = next
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        confirmationTimer = context.eventLoop.scheduleTask(deadline: next) {
            let (handler, context) = bound.value
            handler.confirmationAt = nil
            handler.confirmationTimer = nil
            handler.resolve(handler.window.confirm(now: .now()))
            handler.armConfirmationTimer(context: context)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        decoder.feed(unwrapInboundIn(data))
        do {
            while let response = try decoder.next() {
                handle(response, context: context)
            }
        } catch {
            logger.warning("APNs binary gateway sent bytes that are not an error response; closing", metadata: ["connection": "\(id)", "error": "\(error)"])
            context.close(promise: nil)
        }
    }

    private func handle(_ response: APNsBinaryErrorResponse, context: ChannelHandlerContext) {
        guard !window.isClosed else { return }
        logger.info("APNs binary error response", metadata: [
            "connection": "\(id)", "status": "\(response.status.rawValue) \(response.status.name)", "identifier": "\(response.identifier)",
        ])
        Counter(label: "apns_binary_error_responses_total", dimensions: [("status", response.status.name)]).increment()
        // First take the connection out of rotation, so that what APNs dropped is resent elsewhere.
        delegate.connectionGoingAway(id)
        resolve(window.received(response))
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        confirmationTimer?.cancel()
        confirmationTimer = nil
        failHandshake(APNsLegacyConnectError.closedDuringHandshake)
        let inDoubt = window.closed()
        if !inDoubt.isEmpty {
            logger.info("APNs binary connection closed with unconfirmed notifications; they are resent", metadata: ["connection": "\(id)", "count": "\(inDoubt.count)"])
        }
        resolve(inDoubt)
        if established && !closedReported {
            closedReported = true
            delegate.connectionClosed(id)
        }
        context.fireChannelInactive()
    }

    private func failHandshake(_ error: any Error) {
        if let handshake {
            self.handshake = nil
            handshake.fail(error)
        }
    }

    private func resolve(_ resolved: [APNsBinaryWindow.Resolved]) {
        for entry in resolved {
            guard let promise = waiting.removeValue(forKey: entry.ticket) else { continue }
            switch entry.resolution {
            case .delivered: promise.succeed(.response(APNsBinaryStatus.noErrors.response))
            case .answered(let status): promise.succeed(.response(status.response))
            case .dropped: promise.succeed(.failure(.refused))
            case .inDoubt: promise.succeed(.failure(.connectionLost))
            }
        }
    }
}

extension APNsEndpoint {
    /// Apple's legacy binary gateway (production).
    public static let legacyGateway = APNsEndpoint(host: "gateway.push.apple.com", port: 2195)
    /// Apple's legacy binary gateway (sandbox).
    public static let legacyGatewaySandbox = APNsEndpoint(host: "gateway.sandbox.push.apple.com", port: 2195)
    /// Apple's legacy feedback service (production).
    public static let legacyFeedback = APNsEndpoint(host: "feedback.push.apple.com", port: 2196)
    /// Apple's legacy feedback service (sandbox).
    public static let legacyFeedbackSandbox = APNsEndpoint(host: "feedback.sandbox.push.apple.com", port: 2196)
}
