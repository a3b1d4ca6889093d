// The compact JSON object writer of the record encoders.

/// Builds a compact JSON object in a fixed key order; used by the record encoders (one per result, badge change and
/// dead letter, so it is on every notification's path).
///
/// Each member is written through a pointer into storage made room for first (its worst case: every byte of a string
/// escaped), rather than appended byte by byte to an array, each append checking the array's uniqueness and capacity.
/// The output is the same: ``JSON/writeString(_:into:)``'s escaping rules, integers in decimal.
struct JSONObjectWriter {
    /// Written up to `count`; the rest is room made ahead.
    private var bytes: [UInt8]
    private var count = 0

    /// `capacity`: room for a whole record up front (a ~300-byte result then never grows it).
    init(capacity: Int = 512) {
        bytes = [UInt8](repeating: 0, count: max(capacity, 16))
        bytes[0] = UInt8(ascii: "{")
        count = 1
    }

    mutating func string(_ name: StaticString, _ value: String?) {
        guard var value else { return null(name) }
        value.withUTF8 { text in
            member(name, valueBytesAtMost: Self.escapedBound(text.count)) { out in Self.writeString(text, to: out) }
        }
    }

    mutating func integer(_ name: StaticString, _ value: Int64?) {
        guard let value else { return null(name) }
        member(name, valueBytesAtMost: JSON.maximumIntegerBytes) { out in JSON.writeInteger(value, to: out) }
    }

    mutating func boolean(_ name: StaticString, _ value: Bool) {
        let literal: StaticString = value ? "true" : "false"
        member(name, valueBytesAtMost: literal.utf8CodeUnitCount) { out in Self.copy(literal, to: out) }
    }

    /// A member whose value is already serialized JSON.
    mutating func raw(_ name: StaticString, _ json: [UInt8]) {
        json.withUnsafeBufferPointer { json in
            member(name, valueBytesAtMost: json.count) { out in
                if let base = json.baseAddress { out.update(from: base, count: json.count) }
                return json.count
            }
        }
    }

    mutating func finish() -> [UInt8] {
        append(atMost: 1) { out in
            out.pointee = UInt8(ascii: "}")
            return 1
        }
        bytes.removeLast(bytes.count - count)
        return bytes
    }

    // MARK: Writing

    private mutating func null(_ name: StaticString) {
        member(name, valueBytesAtMost: 4) { out in Self.copy("null", to: out) }
    }

    /// Writes `,"name":` (no comma first) and the value `writeValue` writes, which is at most `bound` bytes.
    private mutating func member(_ name: StaticString, valueBytesAtMost bound: Int, _ writeValue: (UnsafeMutablePointer<UInt8>) -> Int) {
        let isFirst = count == 1
        append(atMost: name.utf8CodeUnitCount + 4 + bound) { out in
            var written = 0
            if !isFirst {
                out.pointee = UInt8(ascii: ",")
                written = 1
            }
            out[written] = UInt8(ascii: "\"")
            written += 1
            written += Self.copy(name, to: out + written)
            out[written] = UInt8(ascii: "\"")
            out[written + 1] = UInt8(ascii: ":")
            written += 2
            return written + writeValue(out + written)
        }
    }

    /// Makes room for `bound` more bytes, then lets `write` write them from the end of what is written; it returns how
    /// many it wrote (at most `bound`).
    private mutating func append(atMost bound: Int, _ write: (UnsafeMutablePointer<UInt8>) -> Int) {
        if count + bound > bytes.count {
            bytes.append(contentsOf: repeatElement(0, count: max(count + bound - bytes.count, bytes.count)))
        }
        let start = count
        let written = bytes.withUnsafeMutableBufferPointer { storage in write(storage.baseAddress! + start) }
        precondition(written <= bound, "a JSON member wrote more than the room it asked for")
        count += written
    }

    /// The most bytes a string of `count` UTF-8 bytes takes as a literal: quotes, and every byte as `\u00XX`.
    private static func escapedBound(_ count: Int) -> Int { count * 6 + 2 }

    private static func copy(_ literal: StaticString, to out: UnsafeMutablePointer<UInt8>) -> Int {
        out.update(from: literal.utf8Start, count: literal.utf8CodeUnitCount)
        return literal.utf8CodeUnitCount
    }

    /// `text` as a JSON string literal, escaped as ``JSON/writeString(_:into:)`` escapes it.
    private static func writeString(_ text: UnsafeBufferPointer<UInt8>, to out: UnsafeMutablePointer<UInt8>) -> Int {
        out[0] = UInt8(ascii: "\"")
        var written = 1
        // Ids, tokens and reasons rarely need escaping: those are copied whole.
        if !needsEscaping(text) {
            if let base = text.baseAddress { (out + 1).update(from: base, count: text.count) }
            written += text.count
        } else {
            let hex: StaticString = "0123456789abcdef"
            for byte in text {
                let escaped: UInt8
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): escaped = byte
                case 0x0A: escaped = UInt8(ascii: "n")
                case 0x0D: escaped = UInt8(ascii: "r")
                case 0x09: escaped = UInt8(ascii: "t")
                case 0x00..<0x20:
                    out[written] = UInt8(ascii: "\\")
                    out[written + 1] = UInt8(ascii: "u")
                    out[written + 2] = UInt8(ascii: "0")
                    out[written + 3] = UInt8(ascii: "0")
                    out[written + 4] = hex.utf8Start[Int(byte >> 4)]
                    out[written + 5] = hex.utf8Start[Int(byte & 0x0F)]
                    written += 6
                    continue
                default:
                    out[written] = byte
                    written += 1
                    continue
                }
                out[written] = UInt8(ascii: "\\")
                out[written + 1] = escaped
                written += 2
            }
        }
        out[written] = UInt8(ascii: "\"")
        return written + 1
    }

    /// Whether `text` has a byte JSON escapes: a control character, `"` or `\`. Eight bytes at a time (these strings
    /// are ids, tokens and reasons of 30-100 bytes, on every record).
    private static func needsEscaping(_ text: UnsafeBufferPointer<UInt8>) -> Bool {
        func has(_ word: UInt64, byte: UInt8) -> Bool { hasZeroByte(word ^ (0x0101_0101_0101_0101 &* UInt64(byte))) }
        // A zero byte in `word`: the classic test (the high bit of a byte that was zero survives the borrow).
        func hasZeroByte(_ word: UInt64) -> Bool { (word &- 0x0101_0101_0101_0101) & ~word & 0x8080_8080_8080_8080 != 0 }
        func hasControl(_ word: UInt64) -> Bool {
            // A byte below 0x20 borrows when 0x20 is taken from it; bytes of 0x80 and above (UTF-8) are excluded by `~word`.
            (word &- 0x2020_2020_2020_2020) & ~word & 0x8080_8080_8080_8080 != 0
        }
        guard let base = text.baseAddress else { return false }
        var index = 0
        while index + 8 <= text.count {
            let word = UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)
            if hasControl(word) || has(word, byte: UInt8(ascii: "\"")) || has(word, byte: UInt8(ascii: "\\")) { return true }
            index += 8
        }
        while index < text.count {
            let byte = text[index]
            if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return true }
            index += 1
        }
        return false
    }
}
