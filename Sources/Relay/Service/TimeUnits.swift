import Foundation

extension Date {
    static var nowMilliseconds: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}

extension Duration {
    /// Whole milliseconds (the engine's unit).
    var inMilliseconds: Int64 { components.seconds * 1_000 + components.attoseconds / 1_000_000_000_000_000 }
}
