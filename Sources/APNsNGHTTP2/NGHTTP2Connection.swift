public import APNs
public import Logging
public import NIOCore
public import NIOPosix
import Synchronization

/// Makes TLS HTTP/2 connections to APNs whose HTTP/2 layer is nghttp2 (the C library h2load and curl use)
/// instead of swift-nio-http2: the relay's default client (`apns.http2_client: nghttp2`), cheaper per request.
///
/// The same settings, TLS (``APNsTLS/clientConfiguration(caFile:clientCertificate:applicationProtocols:)``: ALPN h2,
/// the server certificate verified), request headers and answer mapping as ``APNsHTTP2ConnectionFactory``; only the
/// framing, HPACK and stream state differ. The relay does not use it by default.
public struct APNsNGHTTP2ConnectionFactory: APNsConnectionFactory {
    private let bootstrap: APNsHTTP2ConnectionBootstrap

    /// Creates the factory; builds the TLS context once (fails on unreadable CA or key files).
    public init(configuration: APNsHTTP2ConnectionConfiguration, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger = Logger(label: "apns.nghttp2")) throws {
        self.bootstrap = try APNsHTTP2ConnectionBootstrap(configuration: configuration, group: group, logger: logger)
    }

    public func makeConnection(id: APNsConnectionID, delegate: any APNsConnectionDelegate) async throws -> APNsEstablishedConnection {
        // The shared bootstrap: TCP, or a CONNECT tunnel through `apns.proxy`, then TLS to the APNs host.
        try await bootstrap.connect(id: id, delegate: delegate, makeConnection: APNsNGHTTP2Connection.init) { channel, core in
            // No APNsFlushCoalescingHandler: the handler below already writes once per event-loop tick.
            let handler = NGHTTP2ConnectionHandler(core: core)
            try channel.pipeline.syncOperations.addHandler(handler)
            return handler
        }
    }

    public var tokenProvider: APNsTokenProvider? { bootstrap.tokenProvider }

    public func replaceClientCertificate(_ certificate: APNsClientCertificate) throws -> Bool {
        try bootstrap.replaceClientCertificate(certificate)
        return true
    }
}

/// One nghttp2 connection to APNs. Sendable because its state is the channel (thread safe), a handler that is
/// only touched on the channel's event loop (`NIOLoopBound` checks that) and an outbox behind a lock.
final class APNsNGHTTP2Connection: APNsConnection {
    private let established: APNsHTTP2EstablishedChannel<NGHTTP2ConnectionHandler>
    private let outbox = Mutex(Outbox())

    /// Requests on their way to the event loop. A send appends under the lock, and only the send that finds the
    /// outbox idle schedules a drain, which starts everything waiting at once: one event-loop task (and at most one
    /// wake-up) per batch instead of a task, its closure and a wake-up per request.
    private struct Outbox {
        var requests: [Outgoing] = []
        /// The last drain's array, emptied with its capacity kept: the next batch fills it without growing one.
        var spare: [Outgoing] = []
        var drainScheduled = false
    }

    private struct Outgoing {
        var request: NGHTTP2Request
        var completion: @Sendable (APNsAttemptResult) -> Void
    }

    init(_ established: APNsHTTP2EstablishedChannel<NGHTTP2ConnectionHandler>) {
        self.established = established
    }

    var id: APNsConnectionID { established.id }

    func send(_ notification: APNsNotification, deadline: NIODeadline, completion: @escaping @Sendable (APNsAttemptResult) -> Void) {
        var request = NGHTTP2Request(payload: notification.payload, deadline: deadline)
        // The same fields, in the same order and with the same indexing, as APNsHTTP2Connection sends: values
        // that differ per request stay out of the HPACK dynamic table so the repeated ones stay indexed.
        switch notification.recipient {
        case .device(let token):
            addRequestLine(path: { token.appendHex(prefixedBy: "/3/device/", to: &$0) }, to: &request)
            request.add("apns-topic", notification.topic)
            addDeliveryHeaders(of: notification, idHeader: "apns-id", to: &request)
        case .channel(let channel):
            addRequestLine(path: { $0.append(contentsOf: "/4/broadcasts/apps/".utf8); $0.append(contentsOf: notification.topic.utf8) },
                           to: &request)
            request.add("apns-channel-id", channel.value, indexed: false)
            addDeliveryHeaders(of: notification, idHeader: "apns-request-id", to: &request)
        }
        let outgoing = Outgoing(request: request, completion: completion)
        let scheduleDrain = outbox.withLock { outbox in
            outbox.requests.append(outgoing)
            defer { outbox.drainScheduled = true }
            return !outbox.drainScheduled
        }
        // Never started here, even on the event loop: a send made from an answer's completion would open a
        // stream while the handler's table is still finishing that answer.
        if scheduleDrain { established.channel.eventLoop.execute { self.drainOutbox() } }
    }

    /// Starts every request waiting in the outbox, in the order they were sent (on the event loop).
    private func drainOutbox() {
        var requests = outbox.withLock { outbox in
            var taken: [Outgoing] = []
            swap(&taken, &outbox.spare)
            swap(&taken, &outbox.requests)
            outbox.drainScheduled = false
            return taken
        }
        let handler = established.handler.value
        for outgoing in requests { handler.start(outgoing.request, completion: .attempt(outgoing.completion)) }
        requests.removeAll(keepingCapacity: true)
        outbox.withLock { outbox in
            if outbox.spare.capacity < requests.capacity { swap(&outbox.spare, &requests) }
        }
    }

    /// The pseudo-headers and `authorization`.
    private func addRequestLine(path: (inout [UInt8]) -> Void, to request: inout NGHTTP2Request) {
        request.add(":method", "POST")
        request.add(":scheme", "https")
        request.add(":path", indexed: false, writing: path)
        request.add(":authority", established.authority)
        guard case .token(let provider) = established.credential else { return }
        // Indexed: the connection is ours alone, and a ~200-byte JWT literal per stream is the largest header.
        request.add("authorization", provider.currentAuthorization().header)
    }

    private func addDeliveryHeaders(of notification: APNsNotification, idHeader: StaticString, to request: inout NGHTTP2Request) {
        request.add("apns-push-type", notification.pushType.rawValue)
        request.add("apns-priority", String(notification.priority.rawValue))
        request.add(idHeader, indexed: false) { APNsUUIDText.append(notification.apnsID, to: &$0) }
        if let expiration = notification.expiration {
            request.add("apns-expiration", String(expiration), indexed: false)
        }
        if let collapseID = notification.collapseID {
            request.add("apns-collapse-id", collapseID, indexed: false)
        }
        request.add("content-length", String(notification.payload.count), indexed: false)
    }

    func close(graceful: Bool) async {
        let handler = established.handler
        let eventLoop = established.channel.eventLoop
        let promise = eventLoop.makePromise(of: Void.self)
        eventLoop.execute { handler.value.close(graceful: graceful, promise: promise) }
        try? await promise.futureResult.get()
    }
}

/// One request as it travels to the event loop: its header fields as static names and values packed into one
/// byte array, the body and the deadline. The fields are stored inline, so the values are the request's only
/// allocation of its own.
struct NGHTTP2Request: Sendable {
    struct Field: Sendable {
        /// Lower-case, static: nghttp2 may point at it instead of copying (NGHTTP2_NV_FLAG_NO_COPY_NAME).
        var name: StaticString
        var valueStart: Int
        var valueCount: Int
        var indexed: Bool
    }

    /// Room for the most fields a request has: the four pseudo-headers, `authorization`, `apns-topic` or
    /// `apns-channel-id`, `apns-push-type`, `apns-priority`, the id, `apns-expiration`, `apns-collapse-id` and
    /// `content-length`; the first `fieldCount` are used.
    private(set) var fields = InlineArray<12, Field>(repeating: Field(name: "", valueStart: 0, valueCount: 0, indexed: false))
    private(set) var fieldCount = 0
    private(set) var values: [UInt8] = []
    var payload: [UInt8]
    var deadline: NIODeadline

    init(payload: [UInt8], deadline: NIODeadline) {
        self.payload = payload
        self.deadline = deadline
        values.reserveCapacity(512)
    }

    mutating func add(_ name: StaticString, _ value: String, indexed: Bool = true) {
        add(name, indexed: indexed) { $0.append(contentsOf: value.utf8) }
    }

    /// A field whose value `write` appends to the values (the path and the id: no string made for them first).
    mutating func add(_ name: StaticString, indexed: Bool = true, writing write: (inout [UInt8]) -> Void) {
        precondition(fieldCount < fields.count, "more header fields than an APNs request has")
        let start = values.count
        write(&values)
        fields[fieldCount] = Field(name: name, valueStart: start, valueCount: values.count - start, indexed: indexed)
        fieldCount += 1
    }
}
