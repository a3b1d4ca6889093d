// The relay's two clocks, read together.

/// A moment as the relay's engine sees it: a monotonic reading for deadlines and ages (a wall
/// clock step must neither skip a seq gap early nor hold it late) and the wall clock for the
/// timestamps written into records.
public struct RelayTime: Sendable, Equatable, ExpressibleByIntegerLiteral {
    /// Milliseconds on a monotonic clock with an arbitrary origin.
    public var monotonic: Int64
    /// Milliseconds since the UNIX epoch.
    public var epoch: Int64

    /// Creates a reading.
    public init(monotonic: Int64, epoch: Int64) {
        self.monotonic = monotonic
        self.epoch = epoch
    }

    /// Both clocks at `value` (tests).
    public init(integerLiteral value: Int64) {
        self.init(monotonic: value, epoch: value)
    }

    /// Both clocks advanced by `milliseconds`.
    public static func + (time: RelayTime, milliseconds: Int64) -> RelayTime {
        RelayTime(monotonic: time.monotonic &+ milliseconds, epoch: time.epoch &+ milliseconds)
    }

    /// Advances both clocks by `milliseconds`.
    public static func += (time: inout RelayTime, milliseconds: Int64) { time = time + milliseconds }

    /// The epoch milliseconds of `monotonic`, a reading of this monotonic clock.
    public func epoch(ofMonotonic monotonic: Int64) -> Int64 { epoch &- (self.monotonic &- monotonic) }

    /// The reading of this monotonic clock at `epoch` milliseconds (for ages stored by another process).
    public func monotonic(ofEpoch epoch: Int64) -> Int64 { monotonic &- (self.epoch &- epoch) }
}
