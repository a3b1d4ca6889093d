// A user id as the relay compares it: by its UTF-8 bytes.

/// A user id compared and hashed as its UTF-8 bytes.
///
/// Kafka keys are bytes, so two ids that differ in bytes are two users, even when Swift's `String`
/// equality (canonical equivalence) calls them equal: "café" composed (NFC) and decomposed (NFD)
/// are different keys in `push.events` and `push.badge-state`, and must not share a badge count
/// or devices.
public struct UserKey: Hashable, Sendable, CustomStringConvertible {
    /// The id as text.
    public let id: String

    /// The key of `id`.
    public init(_ id: String) { self.id = id }

    public static func == (lhs: UserKey, rhs: UserKey) -> Bool { sameBytes(lhs.id, rhs.id) }

    /// True when the two strings are the same UTF-8 bytes.
    static func sameBytes(_ lhs: String, _ rhs: String) -> Bool {
        guard lhs.utf8.count == rhs.utf8.count else { return false }
        let contiguous = lhs.utf8.withContiguousStorageIfAvailable { left in
            rhs.utf8.withContiguousStorageIfAvailable { right in left.elementsEqual(right) }
        }
        return (contiguous ?? nil) ?? lhs.utf8.elementsEqual(rhs.utf8)
    }

    public func hash(into hasher: inout Hasher) {
        // Native strings are contiguous UTF-8; the fallback covers bridged or lazily built ones.
        if id.utf8.withContiguousStorageIfAvailable({ hasher.combine(bytes: UnsafeRawBufferPointer($0)) }) == nil {
            for byte in id.utf8 { hasher.combine(byte) }
        }
        hasher.combine(id.utf8.count)
    }

    public var description: String { id }
}
