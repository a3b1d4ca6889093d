import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// An OTLP/HTTP collector for tests: takes `POST /v1/traces` (protobuf, as the relay's exporter sends it), answers 200,
/// and keeps the spans it decoded.
final class OTLPReceiver: Sendable {
    /// One span as the exporter sent it (the fields the tests read).
    struct ReceivedSpan: Sendable, CustomStringConvertible {
        var traceID: String
        var spanID: String
        var parentSpanID: String
        var name: String
        /// OTLP's `SpanKind`: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
        var kind: Int
        var start: UInt64
        var end: UInt64
        var attributes: [String: String]
        /// OTLP's status code: 0 unset, 1 ok, 2 error.
        var statusCode: Int

        var description: String { "\(name)(\(traceID.prefix(8))…/\(spanID) ← \(parentSpanID), kind \(kind), \(attributes))" }
    }

    private let group: MultiThreadedEventLoopGroup
    private let channel: any Channel
    private let received: Received
    let port: Int

    private init(group: MultiThreadedEventLoopGroup, channel: any Channel, received: Received) {
        self.group = group
        self.channel = channel
        self.received = received
        self.port = channel.localAddress?.port ?? 0
    }

    /// Spans received so far.
    var spans: [ReceivedSpan] { received.state.withLock { $0.spans } }
    /// `METHOD path content-type` of each request, for failure messages.
    var requests: [String] { received.state.withLock { $0.requests } }

    static func start() async throws -> OTLPReceiver {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let received = Received()
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                // Added on the channel's event loop: the handler never leaves it, so it need not be Sendable.
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(Handler(received: received))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return OTLPReceiver(group: group, channel: channel, received: received)
    }

    func shutdown() async {
        try? await channel.close()
        try? await group.shutdownGracefully()
    }


    /// The spans of an `ExportTraceServiceRequest`: resource_spans (1) → scope_spans (2) → spans (2).
    static func spans(inExportRequest body: [UInt8]) throws -> [ReceivedSpan] {
        var spans: [ReceivedSpan] = []
        for resourceSpans in try ProtobufFields(body).messages(1) {
            for scopeSpans in try ProtobufFields(resourceSpans).messages(2) {
                for span in try ProtobufFields(scopeSpans).messages(2) {
                    spans.append(try Self.span(span))
                }
            }
        }
        return spans
    }

    private static func span(_ bytes: [UInt8]) throws -> ReceivedSpan {
        let fields = try ProtobufFields(bytes)
        func hex(_ field: Int) -> String { (fields.bytes(field) ?? []).map { String(format: "%02x", $0) }.joined() }
        var attributes: [String: String] = [:]
        for pair in fields.messages(9) {
            let keyValue = try ProtobufFields(pair)
            guard let key = keyValue.bytes(1), let value = keyValue.bytes(2) else { continue }
            let anyValue = try ProtobufFields(value)
            let text = anyValue.bytes(1).map { String(decoding: $0, as: UTF8.self) }
                ?? anyValue.varint(3).map { "\(Int64(bitPattern: $0))" } ?? anyValue.varint(2).map { $0 == 0 ? "false" : "true" } ?? "?"
            attributes[String(decoding: key, as: UTF8.self)] = text
        }
        let status = try fields.bytes(15).map { try ProtobufFields($0).varint(3) ?? 0 } ?? 0
        return ReceivedSpan(traceID: hex(1), spanID: hex(2), parentSpanID: hex(4), name: String(decoding: fields.bytes(5) ?? [], as: UTF8.self),
                            kind: Int(fields.varint(6) ?? 0), start: fields.fixed64(7) ?? 0, end: fields.fixed64(8) ?? 0,
                            attributes: attributes, statusCode: Int(status))
    }

    /// What the connections' handlers received, behind a lock (they run on the event loop, the test reads it).
    private final class Received: Sendable {
        let state = Mutex<(spans: [ReceivedSpan], requests: [String])>(([], []))

        func accept(request: String, body: [UInt8]) {
            let spans = (try? OTLPReceiver.spans(inExportRequest: body)) ?? []
            state.withLock {
                $0.requests.append(request)
                $0.spans += spans
            }
        }
    }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        private let received: Received
        private var head: HTTPRequestHead?
        private var body: [UInt8] = []

        init(received: Received) { self.received = received }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                self.head = head
                body = []
            case .body(let buffer):
                body += buffer.readableBytesView
            case .end:
                guard let head else { return }
                received.accept(
                    request: "\(head.method) \(head.uri) \(head.headers["content-type"].first ?? "-")", body: body)
                var headers = HTTPHeaders()
                headers.add(name: "content-type", value: "application/x-protobuf")
                headers.add(name: "content-length", value: "0")
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .ok, headers: headers))), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
                self.head = nil
            }
        }
    }
}

/// The fields of one protobuf message, by number (the wire format alone; no schema).
struct ProtobufFields {
    struct Malformed: Error {}
    private var varints: [Int: [UInt64]] = [:]
    private var fixed: [Int: [UInt64]] = [:]
    private var delimited: [Int: [[UInt8]]] = [:]

    init(_ bytes: [UInt8]) throws {
        var index = 0
        func varint() throws -> UInt64 {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                guard index < bytes.count, shift < 64 else { throw Malformed() }
                let byte = bytes[index]
                index += 1
                value |= UInt64(byte & 0x7F) << shift
                if byte & 0x80 == 0 { return value }
                shift += 7
            }
        }
        func fixedWidth(_ width: Int) throws -> UInt64 {
            guard index + width <= bytes.count else { throw Malformed() }
            defer { index += width }
            return (0..<width).reduce(UInt64(0)) { $0 | UInt64(bytes[index + $1]) << (8 * UInt64($1)) }
        }
        while index < bytes.count {
            let tag = try varint()
            let field = Int(tag >> 3)
            switch tag & 7 {
            case 0: varints[field, default: []].append(try varint())
            case 1: fixed[field, default: []].append(try fixedWidth(8))
            case 5: fixed[field, default: []].append(try fixedWidth(4))
            case 2:
                let length = Int(try varint())
                guard length >= 0, index + length <= bytes.count else { throw Malformed() }
                delimited[field, default: []].append(Array(bytes[index..<index + length]))
                index += length
            default: throw Malformed()
            }
        }
    }

    func messages(_ field: Int) -> [[UInt8]] { delimited[field] ?? [] }
    func bytes(_ field: Int) -> [UInt8]? { delimited[field]?.first }
    func varint(_ field: Int) -> UInt64? { varints[field]?.first }
    func fixed64(_ field: Int) -> UInt64? { fixed[field]?.first }
}
