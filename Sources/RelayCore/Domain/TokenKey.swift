// A device token as the registry keys it: the common token without a heap string.

import APNsCore

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
            buffer[start + nibble] = APNsDeviceToken.hexDigit(UInt8(truncatingIfNeeded: word >> UInt64(60 - 4 * nibble)) & 0xF)
        }
    }

    /// The packed form of a 64-character hex token (upper-case digits too when `upperCase`), else nil. Checked eight
    /// digits at a time, then each digit's value computed: a fan-out looks up every device of its user by this key.
    private static func packed(_ token: String, upperCase: Bool) -> Storage? {
        guard token.utf8.count == 64 else { return nil }
        var token = token
        return token.withUTF8 { digits -> Storage? in
            let base = digits.baseAddress!
            for start in stride(from: 0, to: 64, by: 8) {
                guard ByteWord.hexDigits(of: ByteWord.load(base, at: start), upperCase: upperCase) == ByteWord.highBits else { return nil }
            }
            func word(at start: Int) -> UInt64 {
                var word: UInt64 = 0
                for offset in start..<(start + 16) {
                    word = word << 4 | UInt64(APNsDeviceToken.hexValue(base[offset]))
                }
                return word
            }
            return .packed(word(at: 0), word(at: 16), word(at: 32), word(at: 48))
        }
    }
}
