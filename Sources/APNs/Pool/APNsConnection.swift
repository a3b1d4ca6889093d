public import NIOCore

/// Identifies one connection for the lifetime of a supervisor.
public struct APNsConnectionID: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The numeric id.
    public let rawValue: Int
    /// Creates an id.
    public init(_ rawValue: Int) { self.rawValue = rawValue }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { "conn-\(rawValue)" }
}

/// What a connection reports to the component that drives it (the supervisor).
///
/// Calls may arrive on any thread (typically a NIO event loop); implementations must be quick and
/// must not block.
public protocol APNsConnectionDelegate: Sendable {
    /// The peer changed how many streams may be open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS;
    /// a transport without multiplexing reports its window).
    func connection(_ id: APNsConnectionID, maxConcurrentStreamsChanged limit: Int)
    /// The peer announced that it is going away (HTTP/2 GOAWAY): no new work may be sent on this connection;
    /// work already sent will still complete or fail.
    func connectionGoingAway(_ id: APNsConnectionID)
    /// The connection is closed (for any reason: peer close, PING timeout, error, local close).
    func connectionClosed(_ id: APNsConnectionID)
}

/// One connection to APNs, whatever its transport. The supervisor drives it.
public protocol APNsConnection: Sendable {
    /// The id the supervisor gave it.
    var id: APNsConnectionID { get }
    /// Sends one notification and calls `completion` once with its outcome, at most at `deadline`. The call
    /// returns at once; `completion` runs on the connection's thread (an event loop) and must be quick.
    /// Every failure is an ``APNsAttemptResult/failure(_:)``.
    ///
    /// A callback rather than an `async` function: the supervisor sends most notifications without a task or a
    /// continuation of their own (see ``APNsSupervisor/submit(_:cancellation:completion:)``).
    func send(_ notification: APNsNotification, deadline: NIODeadline, completion: @escaping @Sendable (APNsAttemptResult) -> Void)
    /// Closes the connection. `graceful` announces the close first (HTTP/2 GOAWAY).
    func close(graceful: Bool) async
}

extension APNsConnection {
    /// Sends one notification and waits for its outcome, at most until `deadline`.
    public func send(_ notification: APNsNotification, deadline: NIODeadline) async -> APNsAttemptResult {
        await withCheckedContinuation { (continuation: CheckedContinuation<APNsAttemptResult, Never>) in
            send(notification, deadline: deadline) { continuation.resume(returning: $0) }
        }
    }
}

/// A newly established connection and the concurrency its peer allows.
public struct APNsEstablishedConnection: Sendable {
    /// The connection.
    public let connection: any APNsConnection
    /// The peer's initial limit of concurrent streams.
    public let maxConcurrentStreams: Int

    /// Creates the value.
    public init(connection: any APNsConnection, maxConcurrentStreams: Int) {
        self.connection = connection
        self.maxConcurrentStreams = maxConcurrentStreams
    }
}

/// Makes connections for the supervisor. The HTTP/2 transport is ``APNsHTTP2ConnectionFactory``; a legacy
/// binary transport plugs in behind the same protocol.
public protocol APNsConnectionFactory: Sendable {
    /// Establishes a connection (TCP, TLS, protocol handshake) and returns it once it can carry work.
    func makeConnection(id: APNsConnectionID, delegate: any APNsConnectionDelegate) async throws -> APNsEstablishedConnection
    /// The provider token its connections present (token auth), which the supervisor renews when APNs answers
    /// `ExpiredProviderToken`; `nil` for certificate auth.
    var tokenProvider: APNsTokenProvider? { get }
    /// Makes new connections with `certificate` (a renewed client certificate); returns `false` when this
    /// transport cannot (then a restart takes it). Throws, changing nothing, when it cannot be used.
    func replaceClientCertificate(_ certificate: APNsClientCertificate) throws -> Bool
}

extension APNsConnectionFactory {
    /// No provider token (certificate auth, the binary interface).
    public var tokenProvider: APNsTokenProvider? { nil }

    /// The certificate is kept for the factory's life.
    public func replaceClientCertificate(_ certificate: APNsClientCertificate) throws -> Bool { false }
}
