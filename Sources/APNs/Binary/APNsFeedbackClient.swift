public import NIOCore
import Foundation
public import Logging
import Metrics
public import NIOPosix
import NIOSSL
import NIOTLS

/// What one poll of the feedback service read.
public struct APNsFeedbackPoll: Sendable, Hashable {
    /// The complete tuples, in the order they arrived.
    public var tuples: [APNsFeedbackTuple]
    /// Bytes of a partial last tuple the service cut off (0 when the stream ended cleanly); never decoded into a
    /// tuple.
    public var truncatedBytes: Int

    /// Creates the value.
    public init(tuples: [APNsFeedbackTuple], truncatedBytes: Int = 0) {
        self.tuples = tuples
        self.truncatedBytes = truncatedBytes
    }
}

/// Settings of the feedback client.
public struct APNsFeedbackConfiguration: Sendable {
    /// The feedback service (Apple's was `feedback.push.apple.com:2196`).
    public var endpoint: APNsEndpoint
    /// The client certificate.
    public var certificate: APNsClientCertificate
    /// PEM file of extra trust anchors (`apns.ca_file`).
    public var caFile: String?
    /// TCP + TLS budget.
    public var connectTimeout: Duration
    /// The most one poll may take, reading included.
    public var pollTimeout: Duration
    /// The HTTP proxy the connection is tunnelled through (`apns.proxy`), if any.
    public var proxy: APNsProxy?

    /// Creates a configuration.
    public init(
        endpoint: APNsEndpoint, certificate: APNsClientCertificate, caFile: String? = nil, connectTimeout: Duration = .seconds(10),
        pollTimeout: Duration = .seconds(120), proxy: APNsProxy? = nil
    ) {
        self.endpoint = endpoint
        self.certificate = certificate
        self.caFile = caFile
        self.connectTimeout = connectTimeout
        self.pollTimeout = pollTimeout
        self.proxy = proxy
    }
}

/// Errors of a feedback poll.
public enum APNsFeedbackError: Error, Sendable, Hashable {
    /// The poll did not finish within its budget.
    case timedOut
}

/// One poll of the legacy feedback service: connect, read tuples to end of stream, return them.
public struct APNsFeedbackClient: Sendable {
    private let configuration: APNsFeedbackConfiguration
    private let sslContext: NIOSSLContext
    private let group: any EventLoopGroup
    private let logger: Logger

    /// Creates the client; builds the TLS context once.
    public init(configuration: APNsFeedbackConfiguration, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger = Logger(label: "apns.feedback")) throws {
        let tls = APNsTLS.clientConfiguration(caFile: configuration.caFile, clientCertificate: configuration.certificate, applicationProtocols: [])
        self.sslContext = try NIOSSLContext(configuration: tls)
        self.configuration = configuration
        self.group = group
        self.logger = logger
    }

    /// Connects, reads every tuple until the service closes the stream, and returns them. Throws on connect
    /// failures and on bytes that are not tuples; a cut-off last tuple is counted in
    /// ``APNsFeedbackPoll/truncatedBytes`` and logged.
    public func poll() async throws -> APNsFeedbackPoll {
        let (channel, reader) = try await APNsLegacyTLS.connect(
            group: group, proxy: configuration.proxy, endpoint: configuration.endpoint, sslContext: sslContext,
            timeout: TimeAmount(configuration.connectTimeout)
        ) { handshake in
            APNsFeedbackReader(handshake: handshake, done: handshake.futureResult.eventLoop.makePromise())
        }
        let done = try await channel.eventLoop.submit { reader.value.done.futureResult }.get()
        let timer = channel.eventLoop.scheduleTask(in: TimeAmount(configuration.pollTimeout)) {
            reader.value.finish(.failure(APNsFeedbackError.timedOut))
            channel.close(promise: nil)
        }
        defer { timer.cancel() }
        let result = try await done.get()
        Counter(label: "apns_feedback_tuples_total").increment(by: result.tuples.count)
        if result.truncatedBytes > 0 {
            logger.warning("APNs feedback stream ended inside a tuple; the partial tuple is ignored", metadata: ["bytes": "\(result.truncatedBytes)"])
        }
        return result
    }
}

/// Reads feedback tuples until the channel closes.
final class APNsFeedbackReader: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private var handshake: EventLoopPromise<Void>?
    let done: EventLoopPromise<APNsFeedbackPoll>
    private var decoder = APNsFeedbackDecoder()
    private var tuples: [APNsFeedbackTuple] = []
    private var finished = false

    init(handshake: EventLoopPromise<Void>, done: EventLoopPromise<APNsFeedbackPoll>) {
        self.handshake = handshake
        self.done = done
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent, let handshake {
            self.handshake = nil
            handshake.succeed()
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// Completes the poll once.
    func finish(_ result: Result<APNsFeedbackPoll, any Error>) {
        guard !finished else { return }
        finished = true
        done.completeWith(result)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !finished else { return }
        decoder.feed(unwrapInboundIn(data))
        do {
            tuples += try decoder.drain()
        } catch {
            finish(.failure(error))
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let handshake {
            self.handshake = nil
            handshake.fail(error)
            finish(.failure(error))
        } else if case NIOSSLError.uncleanShutdown = error {
            // A close without close_notify after the data is how many servers end the stream; what was read counts.
        } else {
            // A refused client certificate surfaces here with TLS 1.3 (after the client's side of the handshake).
            finish(.failure(error))
        }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if let handshake {
            self.handshake = nil
            handshake.fail(APNsLegacyConnectError.closedDuringHandshake)
            finish(.failure(APNsLegacyConnectError.closedDuringHandshake))
        } else {
            finish(.success(APNsFeedbackPoll(tuples: tuples, truncatedBytes: decoder.bufferedBytes)))
        }
        context.fireChannelInactive()
    }
}

/// Polls the feedback service every `interval` (first at start) and hands each poll's tuples to `handle`.
///
/// Apple treated frequent connects as an attack: keep the interval long (`apns.feedback_interval_s`, 12 h by
/// default). A failed poll is logged and retried at the next interval. Run it in a task group or a ServiceGroup;
/// it returns when its task is cancelled.
public struct APNsFeedbackPoller: Sendable {
    private let interval: Duration
    private let poll: @Sendable () async throws -> APNsFeedbackPoll
    private let handle: @Sendable ([APNsFeedbackTuple]) async -> Void
    private let sleep: @Sendable (Duration) async throws -> Void
    private let logger: Logger

    /// Creates a poller.
    ///
    /// - Parameters:
    ///   - poll: one poll (``APNsFeedbackClient/poll()``; inject for tests).
    ///   - handle: receives each poll's tuples (publish them, mark the tokens dead).
    ///   - sleep: how it waits between polls (inject for tests); throwing ends the loop.
    public init(
        interval: Duration,
        logger: Logger = Logger(label: "apns.feedback"),
        sleep: @escaping @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) },
        poll: @escaping @Sendable () async throws -> APNsFeedbackPoll,
        handle: @escaping @Sendable ([APNsFeedbackTuple]) async -> Void
    ) {
        self.interval = interval
        self.poll = poll
        self.handle = handle
        self.sleep = sleep
        self.logger = logger
    }

    /// Polls until cancelled (or until `sleep` throws).
    public func run() async {
        while !Task.isCancelled {
            await pollOnce()
            do { try await sleep(interval) } catch { return }
        }
    }

    /// One poll; failures are logged, never thrown. Returns how many tuples were handled.
    @discardableResult
    public func pollOnce() async -> Int {
        do {
            let result = try await poll()
            logger.info("APNs feedback polled", metadata: ["tokens": "\(result.tuples.count)"])
            if !result.tuples.isEmpty { await handle(result.tuples) }
            return result.tuples.count
        } catch {
            Counter(label: "apns_feedback_poll_failures_total").increment()
            logger.warning("APNs feedback poll failed; next try at the next interval", metadata: ["error": "\(error)"])
            return 0
        }
    }
}
