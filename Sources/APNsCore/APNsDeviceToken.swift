/// An APNs device token: 32 to 100 bytes, written as 64 to 200 hex digits.
///
/// Held as its lower-case hex text, the form the HTTP/2 request path and the relay's records use: a token that
/// arrives as lower-case text (as the relay's do) is kept without a copy, and only the legacy binary interface
/// reads it as bytes.
public struct APNsDeviceToken: Sendable, Hashable, CustomStringConvertible {
    /// Lower-case hex, as APNs expects in the request path.
    public let hex: String

    /// The raw token bytes.
    public var bytes: [UInt8] {
        var hex = hex
        return hex.withUTF8 { digits in
            [UInt8](unsafeUninitializedCapacity: digits.count / 2) { bytes, initialized in
                for index in 0..<digits.count / 2 { bytes[index] = Self.byte(at: index, of: digits) }
                initialized = digits.count / 2
            }
        }
    }

    /// Parses a hex token (either case). Throws `APNsValidationError` naming `.deviceToken`.
    public init(hex: some StringProtocol) throws(APNsValidationError) {
        try self.init(hex: String(hex))
    }

    /// Parses a hex token (either case). Throws `APNsValidationError` naming `.deviceToken`.
    ///
    /// The `String` form is not generic, so callers in other modules (the simulator, per request) do not run the
    /// unspecialised generic code, which looks up type metadata for every character. It reads the string's own
    /// UTF-8 in place; lower-case text is kept as it is (no allocation).
    public init(hex: String) throws(APNsValidationError) {
        var text = hex
        let isLowerCase = try text.withUTF8 { digits in Result { () throws(APNsValidationError) in try Self.validate(hexDigits: digits) } }.get()
        self.hex = isLowerCase ? hex : hex.lowercased()
    }

    /// The rules in the order a person fixes them: the length, then the characters, then the pairing. Returns
    /// whether every letter is lower-case.
    private static func validate(hexDigits utf8: UnsafeBufferPointer<UInt8>) throws(APNsValidationError) -> Bool {
        if utf8.isEmpty { throw APNsValidationError(.deviceToken, .empty) }
        if utf8.count < 64 { throw APNsValidationError(.deviceToken, .tooShort(minimum: 64, actual: utf8.count)) }
        if utf8.count > 200 { throw APNsValidationError(.deviceToken, .tooLong(maximum: 200, actual: utf8.count)) }
        var isLowerCase = true
        var index = 0
        // Eight digits at a time (one token per notification).
        while index + 8 <= utf8.count {
            let word = ByteWord.load(utf8.baseAddress!, at: index)
            if ByteWord.hexDigits(of: word, upperCase: false) != ByteWord.highBits {
                guard ByteWord.hexDigits(of: word, upperCase: true) == ByteWord.highBits else {
                    throw APNsValidationError(.deviceToken, .notHex)
                }
                isLowerCase = false
            }
            index += 8
        }
        for character in utf8[index...] {
            switch character {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): continue
            case UInt8(ascii: "A")...UInt8(ascii: "F"): isLowerCase = false
            default: throw APNsValidationError(.deviceToken, .notHex)
            }
        }
        if utf8.count % 2 != 0 { throw APNsValidationError(.deviceToken, .oddLength) }
        return isLowerCase
    }

    /// Wraps raw token bytes (32...100 bytes).
    public init(bytes: [UInt8]) throws(APNsValidationError) {
        if bytes.isEmpty { throw APNsValidationError(.deviceToken, .empty) }
        if bytes.count < 32 { throw APNsValidationError(.deviceToken, .tooShort(minimum: 64, actual: bytes.count * 2)) }
        if bytes.count > 100 { throw APNsValidationError(.deviceToken, .tooLong(maximum: 200, actual: bytes.count * 2)) }
        self.hex = Self.hexText(of: bytes)
    }

    /// The lower-case hex text of `bytes`, two digits per byte (a token's text; the collapse id's digest).
    public static func hexText(of bytes: [UInt8]) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            for (index, byte) in bytes.enumerated() {
                out[2 * index] = hexDigit(byte >> 4)
                out[2 * index + 1] = hexDigit(byte & 0x0F)
            }
            return bytes.count * 2
        }
    }

    /// `prefix` followed by the lower-case hex (the request `:path` is one per notification).
    package func hex(prefixedBy prefix: StaticString) -> String {
        var text = String(decoding: UnsafeBufferPointer(start: prefix.utf8Start, count: prefix.utf8CodeUnitCount), as: UTF8.self)
        text += hex
        return text
    }

    /// Appends `prefix` and the token's lower-case hex to `out` (a request's header block), with no string between.
    package func appendHex(prefixedBy prefix: StaticString, to out: inout [UInt8]) {
        out.append(contentsOf: UnsafeBufferPointer(start: prefix.utf8Start, count: prefix.utf8CodeUnitCount))
        var hex = hex
        hex.withUTF8 { out.append(contentsOf: $0) }
    }

    /// The byte written by the digits at `2 * index` and `2 * index + 1` of `digits` (valid lower-case hex).
    @inline(__always)
    private static func byte(at index: Int, of digits: UnsafeBufferPointer<UInt8>) -> UInt8 {
        hexValue(digits[2 * index]) << 4 | hexValue(digits[2 * index + 1])
    }

    /// A shortened form for logs (first 8 hex digits).
    public var shortDescription: String { Self.shortened(hex: hex) }

    /// The form of a token every log line uses: its first 8 hex digits and "…", never the whole token
    /// (contract, guarantee 6). For tokens held as text (the relay, the simulator, the CLI).
    public static func shortened(hex: some StringProtocol) -> String {
        String(hex.prefix(8)).lowercased() + "…"
    }

    public var description: String { shortDescription }

    /// A stable 64-bit hash (FNV-1a) of the token bytes, identical in every process.
    public var stableHash: UInt64 {
        var hex = hex
        return hex.withUTF8 { digits in
            // Once per notification (the pool picks its connection by it): each byte computed from its digits.
            (0..<digits.count / 2).reduce(FNV1a.offsetBasis) { hash, index in FNV1a.step(hash, Self.byte(at: index, of: digits)) }
        }
    }

    /// The value of a byte known to be a hex digit (either case): its low four bits, plus 9 for a letter (bit 6 set).
    @inlinable @inline(__always)
    public static func hexValue(_ digit: UInt8) -> UInt8 {
        (digit & 0x0F) &+ 9 &* (digit >> 6)
    }

    /// The lower-case hex digit of `value` (0-15), the inverse of ``hexValue(_:)``.
    @inlinable @inline(__always)
    public static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") &+ value : UInt8(ascii: "a") &- 10 &+ value
    }
}

/// 64-bit FNV-1a: a hash that is the same in every process (Swift's `Hasher` is seeded per process).
enum FNV1a {
    static var offsetBasis: UInt64 { 0xcbf2_9ce4_8422_2325 }

    static func hash(_ bytes: some Sequence<UInt8>) -> UInt64 {
        bytes.reduce(offsetBasis, step)
    }

    /// The hash after one more byte.
    @inline(__always)
    static func step(_ hash: UInt64, _ byte: UInt8) -> UInt64 {
        (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
    }
}
