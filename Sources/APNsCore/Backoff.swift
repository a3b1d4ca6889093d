/// Exponential backoff with jitter: `base * 2^(n-1)`, capped, scaled by a jitter factor in `[0.5, 1]`.
///
/// The relay's one schedule of waits after failures: APNs reconnects (the pool) and retries in a spell (the
/// supervisor), and the relay's own retries of a publish, a restore or the device registry (`RetrySchedule`).
public struct Backoff: Sendable, Hashable {
    /// The first delay.
    public var base: Duration
    /// The largest delay.
    public var cap: Duration

    /// Creates a schedule.
    public init(base: Duration, cap: Duration) {
        self.base = base
        self.cap = cap
    }

    /// The delay before try number `failures + 1`; `jitter` is a random value in `[0, 1)` (clamped to it).
    public func delay(failures: Int, jitter: Double) -> Duration {
        let exponent = failures <= 1 ? 0 : min(failures - 1, 30)
        return min(base * (1 << exponent), cap) * (0.5 + 0.5 * min(max(jitter, 0), 1))
    }
}
