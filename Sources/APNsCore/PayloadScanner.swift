/// A strict, allocation-free check that a payload is what APNs accepts: one JSON object (RFC 8259: exact number
/// grammar, valid escapes and UTF-8, no control characters in strings, nothing after the object) with an `aps`
/// member whose value is an object. It also reads `aps.badge`.
///
/// Why not `JSONSerialization`: it builds a dictionary of bridged objects for every payload, which costs more than
/// the rest of a request on both the simulator and the relay's hot path, only to be thrown away.
public enum APNsPayloadScanner {
    /// What the scan found.
    public enum Result: Sendable, Hashable {
        /// A JSON object with an `aps` object; `badge` is `aps.badge` when it is an integer that fits an `Int`.
        case valid(badge: Int?)
        /// Not a single well-formed JSON object.
        case notJSONObject
        /// A JSON object without an `aps` member.
        case missingAps
        /// `aps` is there but is not an object.
        case apsNotDictionary
    }

    /// Nesting deeper than this is refused (it keeps the recursive scan's stack small).
    static let maximumDepth = 512

    /// Scans `payload`.
    public static func scan(_ payload: [UInt8]) -> Result {
        payload.withUnsafeBufferPointer { bytes in
            var scanner = Scanner(bytes: bytes)
            return scanner.scanPayload()
        }
    }

    private struct Scanner {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        /// The kind of the value just scanned, and for an integer, its value.
        enum Value {
            case object, array, string, literal
            case number(integer: Int?)
        }

        mutating func scanPayload() -> Result {
            skipWhitespace()
            guard peek() == UInt8(ascii: "{") else { return .notJSONObject }
            index += 1
            var aps: Value?
            var badge: Int?
            let closed = scanMembers { scanner, key in
                guard key == .aps else { return scanner.scanValue(depth: 1) != nil }
                badge = nil
                guard scanner.peek() == UInt8(ascii: "{") else {
                    aps = scanner.scanValue(depth: 1)
                    return aps != nil
                }
                scanner.index += 1
                aps = .object
                return scanner.scanMembers { scanner, key in
                    let value = scanner.scanValue(depth: 2)
                    if key == .badge {
                        if case .number(let integer)? = value { badge = integer } else { badge = nil }
                    }
                    return value != nil
                }
            }
            guard closed else { return .notJSONObject }
            skipWhitespace()
            guard index == bytes.count else { return .notJSONObject }
            switch aps {
            case nil: return .missingAps
            case .object?: return .valid(badge: badge)
            default: return .apsNotDictionary
            }
        }

        /// Keys the scan looks for.
        enum Key { case aps, badge, other }

        /// Scans the members of an object whose `{` was consumed, through its `}`; `member` scans each value.
        mutating func scanMembers(_ member: (inout Scanner, Key) -> Bool) -> Bool {
            skipWhitespace()
            if peek() == UInt8(ascii: "}") {
                index += 1
                return true
            }
            while true {
                skipWhitespace()
                guard peek() == UInt8(ascii: "\""), let key = scanKey() else { return false }
                skipWhitespace()
                guard peek() == UInt8(ascii: ":") else { return false }
                index += 1
                skipWhitespace()
                guard member(&self, key) else { return false }
                skipWhitespace()
                switch peek() {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "}"):
                    index += 1
                    return true
                default: return false
                }
            }
        }

        mutating func scanValue(depth: Int) -> Value? {
            switch peek() {
            case UInt8(ascii: "{"):
                guard depth < maximumDepth else { return nil }
                index += 1
                return scanMembers { scanner, _ in scanner.scanValue(depth: depth + 1) != nil } ? .object : nil
            case UInt8(ascii: "["):
                guard depth < maximumDepth else { return nil }
                index += 1
                skipWhitespace()
                if peek() == UInt8(ascii: "]") {
                    index += 1
                    return .array
                }
                while true {
                    skipWhitespace()
                    guard scanValue(depth: depth + 1) != nil else { return nil }
                    skipWhitespace()
                    switch peek() {
                    case UInt8(ascii: ","): index += 1
                    case UInt8(ascii: "]"):
                        index += 1
                        return .array
                    default: return nil
                    }
                }
            case UInt8(ascii: "\""):
                var unused: [UInt8]? = nil
                return scanString(decoded: &unused, decode: false) ? .string : nil
            case UInt8(ascii: "t"): return scanLiteral("true")
            case UInt8(ascii: "f"): return scanLiteral("false")
            case UInt8(ascii: "n"): return scanLiteral("null")
            default: return scanNumber()
            }
        }

        mutating func scanLiteral(_ literal: StaticString) -> Value? {
            let count = literal.utf8CodeUnitCount
            guard bytes.count - index >= count else { return nil }
            for offset in 0..<count where bytes[index + offset] != literal.utf8Start[offset] { return nil }
            index += count
            return .literal
        }

        /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`; an integer's value when it fits an `Int`.
        mutating func scanNumber() -> Value? {
            let start = index
            let negative = peek() == UInt8(ascii: "-")
            if negative { index += 1 }
            guard let first = peek(), isDigit(first) else { return nil }
            var integer: Int? = 0
            repeat {
                let digit = Int(bytes[index] - UInt8(ascii: "0"))
                if let value = integer {
                    let (shifted, overflow1) = value.multipliedReportingOverflow(by: 10)
                    let (next, overflow2) = negative ? shifted.subtractingReportingOverflow(digit) : shifted.addingReportingOverflow(digit)
                    integer = overflow1 || overflow2 ? nil : next
                }
                index += 1
            } while first != UInt8(ascii: "0") && peek().map(isDigit) == true
            if peek() == UInt8(ascii: ".") {
                index += 1
                guard let digit = peek(), isDigit(digit) else { return nil }
                skipDigits()
                integer = nil
            }
            if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
                index += 1
                if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
                guard let digit = peek(), isDigit(digit) else { return nil }
                skipDigits()
                integer = nil
                // Like JSONSerialization (and so most servers), refuse a number no Double can hold.
                guard let value = Double(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)), value.isFinite
                else { return nil }
            } else if index - start > 308 {
                return nil  // more digits than the largest finite Double has
            }
            return .number(integer: integer)
        }

        /// Scans a key; recognises `aps` and `badge` also when spelt with escapes.
        mutating func scanKey() -> Key? {
            let start = index
            var decoded: [UInt8]? = nil
            guard scanString(decoded: &decoded, decode: true) else { return nil }
            func key(_ name: UnsafeBufferPointer<UInt8>) -> Key {
                func spells(_ known: StaticString) -> Bool {
                    name.count == known.utf8CodeUnitCount && name.elementsEqual(UnsafeBufferPointer(start: known.utf8Start, count: name.count))
                }
                return spells("aps") ? .aps : spells("badge") ? .badge : .other
            }
            return decoded.map { $0.withUnsafeBufferPointer(key) } ?? key(UnsafeBufferPointer(rebasing: bytes[(start + 1)..<(index - 1)]))
        }

        /// Scans a string whose `"` is next. With `decode`, a string with escapes is decoded into `decoded`
        /// (one without stays `nil`: its bytes are the string).
        mutating func scanString(decoded: inout [UInt8]?, decode: Bool) -> Bool {
            index += 1
            let contentStart = index
            while index < bytes.count {
                // A plain run is skipped eight bytes at a time, unless its bytes are being decoded.
                if decoded == nil { index = ByteWord.endOfPlainJSONRun(in: bytes, from: index) }
                guard index < bytes.count else { break }
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    return true
                case UInt8(ascii: "\\"):
                    if decode && decoded == nil { decoded = Array(bytes[contentStart..<index]) }
                    guard scanEscape(into: &decoded) else { return false }
                case 0..<0x20:
                    return false
                case 0x80...:
                    let start = index
                    guard scanUTF8Sequence() else { return false }
                    decoded?.append(contentsOf: bytes[start..<index])
                default:
                    decoded?.append(byte)
                    index += 1
                }
            }
            return false
        }

        /// Scans `\x` or `\uXXXX` (a surrogate pair as two); appends the UTF-8 it stands for to `decoded`, if any.
        mutating func scanEscape(into decoded: inout [UInt8]?) -> Bool {
            index += 1
            guard let byte = peek() else { return false }
            index += 1
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded?.append(byte)
            case UInt8(ascii: "b"): decoded?.append(0x08)
            case UInt8(ascii: "f"): decoded?.append(0x0C)
            case UInt8(ascii: "n"): decoded?.append(0x0A)
            case UInt8(ascii: "r"): decoded?.append(0x0D)
            case UInt8(ascii: "t"): decoded?.append(0x09)
            case UInt8(ascii: "u"):
                guard let unit = scanHex4() else { return false }
                var scalar = UInt32(unit)
                if (0xD800...0xDBFF).contains(unit) {
                    guard peek() == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u") else { return false }
                    index += 2
                    guard let low = scanHex4(), (0xDC00...0xDFFF).contains(low) else { return false }
                    scalar = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(unit) {
                    return false
                }
                if decoded != nil, let value = Unicode.Scalar(scalar) { decoded?.append(contentsOf: UTF8.encode(value)!) }
            default: return false
            }
            return true
        }

        mutating func scanHex4() -> UInt16? {
            guard bytes.count - index >= 4 else { return nil }
            var value: UInt16 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt16(digit)
                index += 1
            }
            return value
        }

        /// One well-formed UTF-8 sequence of 2 to 4 bytes (no overlong forms, no surrogates, at most U+10FFFF).
        mutating func scanUTF8Sequence() -> Bool {
            let lead = bytes[index]
            let length: Int
            var lower: UInt8 = 0x80
            var upper: UInt8 = 0xBF
            switch lead {
            case 0xC2...0xDF: length = 2
            case 0xE0: length = 3; lower = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED: length = 3; upper = 0x9F
            case 0xF0: length = 4; lower = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4: length = 4; upper = 0x8F
            default: return false
            }
            guard bytes.count - index >= length else { return false }
            guard (lower...upper).contains(bytes[index + 1]) else { return false }
            for offset in 2..<max(2, length) where !(0x80...0xBF).contains(bytes[index + offset]) { return false }
            index += length
            return true
        }

        func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

        mutating func skipDigits() {
            while let byte = peek(), isDigit(byte) { index += 1 }
        }

        mutating func skipWhitespace() {
            while let byte = peek(), byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { index += 1 }
        }
    }
}
