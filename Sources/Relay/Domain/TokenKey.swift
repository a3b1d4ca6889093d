// A device token as the registry keys it: the common token without a heap string.

/// A device token as ``DeviceRegistry`` keys it.
///
/// The common APNs token, 64 lower-case hex characters (32 bytes), is packed into four words, so
/// a million of them need no heap allocation; any other string is kept as it is (longer tokens,
/// and whatever a caller registers directly). A key is exact, as a `String` key was: `"AB…"` and
/// `"ab…"` are two keys; ``init(lowercasing:)`` is for the case-blind lookups.
struct TokenKey: Hashable, Sendable {
    private enum Storage: Hashable, Sendable {
        /// The 32 bytes, big-endian in each word, so the words compare as the hex text does.
        case packed(UInt64, UInt64, UInt64, UInt64)
        /// Any string that is not 64 lower-case hex characters.
        case text(String)
    }

    private let storage: Storage

    /// The key of `token`, exactly as written.
    init(_ token: String) {
        storage = Self.packed(token, upperCase: false) ?? .text(token)
    }

    /// The key of `token.lowercased()`, without building the lower-cased string for a hex token.
    init(lowercasing token: String) {
        self = Self.packed(token, upperCase: true).map { TokenKey(storage: $0) } ?? TokenKey(token.lowercased())
    }

    private init(storage: Storage) { self.storage = storage }

    /// True for a 64-character lower-case hex token (stored in four words).
    var isPacked: Bool {
        if case .packed = storage { true } else { false }
    }

    /// The token as text: lower-case hex for a packed token, else the string as given.
    var string: String {
        switch storage {
        case .text(let text):
            return text
        case .packed(let first, let second, let third, let fourth):
            return String(unsafeUninitializedCapacity: 64) { buffer in
                Self.writeHex(first, into: buffer, at: 0)
                Self.writeHex(second, into: buffer, at: 16)
                Self.writeHex(third, into: buffer, at: 32)
                Self.writeHex(fourth, into: buffer, at: 48)
                return 64
            }
        }
    }

    /// Writes `word` as 16 lower-case hex digits, most significant first.
    private static func writeHex(_ word: UInt64, into buffer: UnsafeMutableBufferPointer<UInt8>, at start: Int) {
        for nibble in 0..<16 {
            let value = UInt8(truncatingIfNeeded: word >> UInt64(60 - 4 * nibble)) & 0xF
            buffer[start + nibble] = value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") - 10 + value
        }
    }

    /// The packed form of a 64-character hex token (upper-case digits too when `upperCase`), else nil.
    private static func packed(_ token: String, upperCase: Bool) -> Storage? {
        guard token.utf8.count == 64 else { return nil }
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        var word: UInt64 = 0
        var index = 0
        for byte in token.utf8 {
            let nibble: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F") where upperCase: nibble = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            word = word << 4 | UInt64(nibble)
            index += 1
            guard index % 16 == 0 else { continue }
            switch index / 16 {
            case 1: words.0 = word
            case 2: words.1 = word
            case 3: words.2 = word
            default: words.3 = word
            }
            word = 0
        }
        return .packed(words.0, words.1, words.2, words.3)
    }
}
