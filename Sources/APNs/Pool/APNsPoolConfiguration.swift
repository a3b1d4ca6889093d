public import NIOCore

/// Identifies one queued or dispatched request inside the pool.
public struct APNsRequestID: Sendable, Hashable, CustomStringConvertible {
    /// The numeric id.
    public let rawValue: UInt64
    /// Creates an id.
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "req-\(rawValue)" }
}

/// Exponential backoff with jitter: `base * 2^(n-1)`, capped, scaled by a jitter factor in `[0.5, 1]`.
public struct APNsBackoff: Sendable, Hashable {
    /// The first delay.
    public var base: Duration
    /// The largest delay.
    public var cap: Duration

    /// Creates a policy.
    public init(base: Duration, cap: Duration) {
        self.base = base
        self.cap = cap
    }

    /// The delay before try number `failures + 1`; `jitter` is a random value in `[0, 1)`.
    public func delay(failures: Int, jitter: Double) -> TimeAmount {
        let exponent = max(0, min(failures - 1, 30))
        let raw = min(Double(TimeAmount(base).nanoseconds) * Double(1 << exponent), Double(TimeAmount(cap).nanoseconds))
        let factor = 0.5 + 0.5 * min(max(jitter, 0), 1)
        return .nanoseconds(Int64(raw * factor))
    }
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
    public var backoff: APNsBackoff
    /// When true, ``APNsPoolStateMachine/start(now:)`` opens nothing: the pool opens its connections when the
    /// first request arrives, and keeps them from then on. For an endpoint that may never be used (the APNs
    /// environment other than the configured one), so an idle relay holds no connection to it.
    public var connectsOnDemand: Bool

    /// Creates settings.
    public init(connections: Int = 2, maxQueued: Int = 10_000, minimumConnectSpacing: Duration = .milliseconds(100), backoff: APNsBackoff = APNsBackoff(base: .milliseconds(200), cap: .seconds(30)), connectsOnDemand: Bool = false) {
        self.connections = max(1, connections)
        self.maxQueued = max(1, maxQueued)
        self.minimumConnectSpacing = minimumConnectSpacing
        self.backoff = backoff
        self.connectsOnDemand = connectsOnDemand
    }
}
