public import NIOCore

/// Identifies one queued or dispatched request inside the pool.
public struct APNsRequestID: Sendable, Hashable, CustomStringConvertible {
    /// The numeric id.
    public let rawValue: UInt64
    /// Creates an id.
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "req-\(rawValue)" }
}

/// Pool settings.
public struct APNsPoolConfiguration: Sendable, Hashable {
    /// Connections per endpoint (`apns.connections`).
    public var connections: Int
    /// The most requests that may wait for a stream; beyond that `enqueue` fails with `.overloaded`.
    public var maxQueued: Int
    /// Minimum time between two connection attempts (Apple treats churn as an attack).
    public var minimumConnectSpacing: Duration
    /// Reconnect backoff.
    public var backoff: Backoff
    /// When true, ``APNsPoolStateMachine/start(now:)`` opens nothing: the pool opens its connections when the
    /// first request arrives, and keeps them from then on. For an endpoint that may never be used (the APNs
    /// environment other than the configured one), so an idle relay holds no connection to it.
    public var connectsOnDemand: Bool

    /// Creates settings.
    public init(connections: Int = 2, maxQueued: Int = 10_000, minimumConnectSpacing: Duration = .milliseconds(100), backoff: Backoff = Backoff(base: .milliseconds(200), cap: .seconds(30)), connectsOnDemand: Bool = false) {
        self.connections = max(1, connections)
        self.maxQueued = max(1, maxQueued)
        self.minimumConnectSpacing = minimumConnectSpacing
        self.backoff = backoff
        self.connectsOnDemand = connectsOnDemand
    }
}
