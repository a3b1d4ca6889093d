// The engine counts time in whole milliseconds (``RelayTime``); these convert at its edges.

extension Duration {
    /// Whole milliseconds (the engine's unit), for configuration values and the driver's clock readings.
    package var inMilliseconds: Int64 { components.seconds * 1_000 + components.attoseconds / 1_000_000_000_000_000 }
    /// Whole nanoseconds, for swift-metrics' timers.
    package var inNanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }
}
