/// How many pool slots are in each connection state.
public struct APNsConnectionStateCounts: Sendable, Hashable {
    /// Slots without a connection.
    public var idle = 0
    /// Slots waiting to reconnect.
    public var backoff = 0
    /// Slots connecting.
    public var connecting = 0
    /// Usable connections.
    public var ready = 0
    /// Ready connections the peer is closing (GOAWAY).
    public var goingAway = 0

    /// Creates all-zero counts.
    public init() {}

    /// The counts under the `state` names of the `apns_connections` gauge.
    public var byState: [(state: String, count: Int)] {
        [("idle", idle), ("backoff", backoff), ("connecting", connecting), ("ready", ready), ("going_away", goingAway)]
    }
}
