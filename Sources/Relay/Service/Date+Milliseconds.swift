// The driver reads the wall clock in the engine's unit, whole milliseconds (``RelayTime``).

import Foundation
import RelayCore

extension Date {
    /// The wall clock in milliseconds since the UNIX epoch (what records carry).
    static var nowMilliseconds: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}
