// The engine counts time in whole milliseconds (``RelayTime``); these convert at its edges.

import Foundation

extension Date {
    /// The wall clock in milliseconds since the UNIX epoch (what records carry).
    static var nowMilliseconds: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}

extension Duration {
    /// Whole milliseconds (the engine's unit), for configuration values and the driver's clock readings.
    package var inMilliseconds: Int64 { components.seconds * 1_000 + components.attoseconds / 1_000_000_000_000_000 }
    /// Whole nanoseconds, for swift-metrics' timers.
    package var inNanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }
}
