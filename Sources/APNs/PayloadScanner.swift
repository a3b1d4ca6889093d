/// A strict JSON syntax check (RFC 8259) of a notification payload that reports only what APNs
/// validation needs: whether it is one JSON object and what kind of value its `aps` key holds.
///
/// Why not JSONSerialization: it builds a Foundation object graph for every notification just to
/// look at one key, which showed up as the relay's largest single cost after malloc. This scanner
/// allocates nothing and reads each byte once.
enum PayloadScanner {
    enum ValueKind: Equatable { case object, array, string, number, boolean, null }

    enum Shape: Equatable {
        /// Not JSON, or JSON followed by more than whitespace.
        case invalid
        /// Valid JSON whose top level is not an object.
        case notObject
        /// A JSON object; `aps` is the kind of its (last) `aps` member, `nil` when it has none.
        case object(aps: ValueKind?)
    }

    /// Deeper nesting is refused as invalid (it is never a real payload, and bounds the recursion).
    static let maximumDepth = 512

    static func shape(of payload: [UInt8]) -> Shape {
        payload.withUnsafeBufferPointer { bytes in
            var scanner = Scanner(bytes: bytes)
            scanner.skipWhitespace()
            guard let kind = scanner.value(depth: 0) else { return .invalid }
            scanner.skipWhitespace()
            guard scanner.index == bytes.count else { return .invalid }
            return kind == .object ? .object(aps: scanner.topLevelAps) : .notObject
        }
    }

    private struct Scanner {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0
        var topLevelAps: ValueKind?

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipWhitespace() {
            while let byte = current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { index += 1 }
        }

        /// One value at `index`; `nil` when it is not valid JSON.
        mutating func value(depth: Int) -> ValueKind? {
            guard let byte = current else { return nil }
            switch byte {
            case UInt8(ascii: "{"): return object(depth: depth + 1) ? .object : nil
            case UInt8(ascii: "["): return array(depth: depth + 1) ? .array : nil
            case UInt8(ascii: "\""): return string(isApsKey: nil) ? .string : nil
            case UInt8(ascii: "t"): return literal("true") ? .boolean : nil
            case UInt8(ascii: "f"): return literal("false") ? .boolean : nil
            case UInt8(ascii: "n"): return literal("null") ? .null : nil
            default: return number() ? .number : nil
            }
        }

        private mutating func object(depth: Int) -> Bool {
            guard depth <= PayloadScanner.maximumDepth else { return false }
            index += 1
            skipWhitespace()
            if current == UInt8(ascii: "}") { index += 1; return true }
            while true {
                guard current == UInt8(ascii: "\"") else { return false }
                var isAps = false
                guard string(isApsKey: &isAps) else { return false }
                skipWhitespace()
                guard current == UInt8(ascii: ":") else { return false }
                index += 1
                skipWhitespace()
                guard let kind = value(depth: depth) else { return false }
                if depth == 1 && isAps { topLevelAps = kind }
                skipWhitespace()
                switch current {
                case UInt8(ascii: ","): index += 1; skipWhitespace()
                case UInt8(ascii: "}"): index += 1; return true
                default: return false
                }
            }
        }

        private mutating func array(depth: Int) -> Bool {
            guard depth <= PayloadScanner.maximumDepth else { return false }
            index += 1
            skipWhitespace()
            if current == UInt8(ascii: "]") { index += 1; return true }
            while true {
                guard value(depth: depth) != nil else { return false }
                skipWhitespace()
                switch current {
                case UInt8(ascii: ","): index += 1; skipWhitespace()
                case UInt8(ascii: "]"): index += 1; return true
                default: return false
                }
            }
        }

        /// A string at `index` (on its opening quote). With `isApsKey`, also says whether its
        /// decoded text is exactly `aps` (escapes included, as a JSON parser would read it).
        private mutating func string(isApsKey: UnsafeMutablePointer<Bool>?) -> Bool {
            index += 1
            var decodedCount = 0
            var matchesAps = true
            func decoded(_ byte: UInt8) {
                let expected: UInt8 = decodedCount == 0 ? UInt8(ascii: "a") : decodedCount == 1 ? UInt8(ascii: "p") : UInt8(ascii: "s")
                if decodedCount >= 3 || byte != expected { matchesAps = false }
                decodedCount += 1
            }
            while let byte = current {
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    isApsKey?.pointee = matchesAps && decodedCount == 3
                    return true
                case UInt8(ascii: "\\"):
                    index += 1
                    guard let escaped = current else { return false }
                    index += 1
                    switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded(escaped)
                    case UInt8(ascii: "b"), UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"): decoded(0)
                    case UInt8(ascii: "u"):
                        guard let unit = hex4() else { return false }
                        if unit >= 0xD800 && unit <= 0xDBFF {
                            // A high surrogate must be followed by an escaped low one.
                            guard current == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u") else { return false }
                            index += 2
                            guard let low = hex4(), low >= 0xDC00 && low <= 0xDFFF else { return false }
                            decoded(0)
                        } else if unit >= 0xDC00 && unit <= 0xDFFF {
                            return false
                        } else {
                            decoded(unit < 0x80 ? UInt8(unit) : 0)
                        }
                    default: return false
                    }
                case 0x00..<0x20:
                    return false
                case 0x80...:
                    guard utf8Sequence() else { return false }
                    decoded(0)
                default:
                    index += 1
                    decoded(byte)
                }
            }
            return false
        }

        private mutating func hex4() -> UInt32? {
            guard index + 4 <= bytes.count else { return nil }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt32(digit)
                index += 1
            }
            return value
        }

        /// One well-formed multi-byte UTF-8 sequence (no overlongs, no surrogates, <= U+10FFFF).
        private mutating func utf8Sequence() -> Bool {
            let lead = bytes[index]
            let count: Int
            var secondRange: ClosedRange<UInt8> = 0x80...0xBF
            switch lead {
            case 0xC2...0xDF: count = 1
            case 0xE0: count = 2; secondRange = 0xA0...0xBF
            case 0xE1...0xEC, 0xEE...0xEF: count = 2
            case 0xED: count = 2; secondRange = 0x80...0x9F
            case 0xF0: count = 3; secondRange = 0x90...0xBF
            case 0xF1...0xF3: count = 3
            case 0xF4: count = 3; secondRange = 0x80...0x8F
            default: return false
            }
            guard index + count < bytes.count else { return false }
            guard secondRange.contains(bytes[index + 1]) else { return false }
            for offset in stride(from: 2, through: count, by: 1) where !(0x80...0xBF).contains(bytes[index + offset]) { return false }
            index += count + 1
            return true
        }

        private mutating func literal(_ text: StaticString) -> Bool {
            let count = text.utf8CodeUnitCount
            guard index + count <= bytes.count else { return false }
            for offset in 0..<count where bytes[index + offset] != text.utf8Start[offset] { return false }
            index += count
            return true
        }

        private mutating func number() -> Bool {
            if current == UInt8(ascii: "-") { index += 1 }
            guard let first = current, first >= UInt8(ascii: "0") && first <= UInt8(ascii: "9") else { return false }
            index += 1
            if first != UInt8(ascii: "0") { skipDigits() }
            if current == UInt8(ascii: ".") {
                index += 1
                guard digit() else { return false }
                skipDigits()
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                index += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
                guard digit() else { return false }
                skipDigits()
            }
            return true
        }

        private var isDigit: Bool { current.map { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") } ?? false }

        private mutating func digit() -> Bool {
            guard isDigit else { return false }
            index += 1
            return true
        }

        private mutating func skipDigits() { while isDigit { index += 1 } }
    }
}
