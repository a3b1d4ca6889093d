import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import ServiceLifecycle

/// `relay.http_port`: `/metrics` (Prometheus text), `/healthz` (200 unless `health` reports a
/// failure the relay cannot get past: it is exiting 1), `/readyz` (200 only when `readiness` says
/// so; its text explains what is missing).
///
/// `/metrics` also carries `apns_relay_ready` (1 when `/readyz` would answer 200, read at each scrape, so an
/// alert sees a replica that is up but not ready) and `process_start_time_seconds` (when the server was made, at
/// the relay's start: a restart changes it, which is how an alert counts restarts).
final class OpsHTTPServer: Service {
    private let host: String
    private let port: Int
    private let registry: PrometheusCollectorRegistry
    private let readiness: @Sendable () -> (ready: Bool, detail: String)
    private let health: @Sendable () -> String?
    private let logger: Logger

    init(host: String = "0.0.0.0", port: Int, registry: PrometheusCollectorRegistry, logger: Logger,
         startedAt: Date = Date(),
         health: @escaping @Sendable () -> String? = { nil },
         readiness: @escaping @Sendable () -> (ready: Bool, detail: String)) {
        self.host = host
        self.port = port
        self.registry = registry
        self.health = health
        self.readiness = readiness
        self.logger = logger
        registry.makeGauge(descriptor: MetricNameDescriptor(metricName: "process_start_time", unitName: "seconds",
                                                            helpText: "Start time of the process since the UNIX epoch, in seconds."))
            .set(to: startedAt.timeIntervalSince1970)
    }

    func run() async throws {
        let registry = self.registry
        let readiness = self.readiness
        let health = self.health
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(OpsHandler(registry: registry, health: health, readiness: readiness))
                }
            }
            .bind(host: host, port: port)
            .get()
        logger.info("ops endpoint listening", metadata: ["address": "\(channel.localAddress.map { "\($0)" } ?? "?")"])
        try await withTaskCancellationHandler {
            try await withGracefulShutdownHandler {
                try await channel.closeFuture.get()
            } onGracefulShutdown: {
                channel.close(promise: nil)
            }
        } onCancel: {
            channel.close(promise: nil)
        }
    }
}

private final class OpsHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let registry: PrometheusCollectorRegistry
    private let readiness: @Sendable () -> (ready: Bool, detail: String)
    private let health: @Sendable () -> String?
    private var path = "/"

    init(registry: PrometheusCollectorRegistry, health: @escaping @Sendable () -> String?, readiness: @escaping @Sendable () -> (ready: Bool, detail: String)) {
        self.registry = registry
        self.health = health
        self.readiness = readiness
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            path = String(head.uri.split(separator: "?").first ?? "/")
        case .body:
            break
        case .end:
            let (status, contentType, body): (HTTPResponseStatus, String, [UInt8])
            switch path {
            case "/metrics":
                registry.makeGauge(descriptor: MetricNameDescriptor(metricName: "apns_relay_ready", unitName: "", helpText: "1 while /readyz answers 200."))
                    .set(to: readiness().ready ? 1.0 : 0.0)
                (status, contentType, body) = (.ok, "text/plain; version=0.0.4", registry.emitToBuffer())
            case "/healthz":
                if let failure = health() {
                    (status, contentType, body) = (.serviceUnavailable, "text/plain", Array("unhealthy: \(failure)\n".utf8))
                } else {
                    (status, contentType, body) = (.ok, "text/plain", Array("ok\n".utf8))
                }
            case "/readyz":
                let (ready, detail) = readiness()
                (status, contentType, body) = (ready ? .ok : .serviceUnavailable, "text/plain", Array("\(detail)\n".utf8))
            default:
                (status, contentType, body) = (.notFound, "text/plain", Array("not found\n".utf8))
            }
            var headers = HTTPHeaders()
            headers.add(name: "content-type", value: contentType)
            headers.add(name: "content-length", value: "\(body.count)")
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}
