// The compact JSON writer: values, strings and integers as the relay's records and payloads write them.

import APNsCore

extension JSON {
    /// Writes `value` as compact JSON (no insignificant whitespace), keys in member order.
    public static func serialize(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(value, into: &out)
        return out
    }

    /// Appends the compact JSON of `value` to `out`.
    public static func write(_ value: JSONValue, into out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let flag): out.append(contentsOf: (flag ? "true" : "false").utf8)
        case .number(let literal): out.append(contentsOf: literal.utf8)
        case .string(let text): writeString(text, into: &out)
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (position, element) in elements.enumerated() {
                if position > 0 { out.append(UInt8(ascii: ",")) }
                write(element, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (position, member) in members.enumerated() {
                if position > 0 { out.append(UInt8(ascii: ",")) }
                writeString(member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                write(member.value, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Appends `value`'s decimal digits (with a `-` when negative), with no `String` in between.
    public static func writeInteger(_ value: Int64, into out: inout [UInt8]) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: maximumIntegerBytes) { buffer in
            let count = writeInteger(value, to: buffer.baseAddress!)
            out.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<count]))
        }
    }

    /// The most bytes ``writeInteger(_:to:)`` writes: a sign and 19 digits.
    static let maximumIntegerBytes = 20

    /// Writes `value`'s decimal digits (with a `-` when negative) at `out`; returns how many bytes it wrote.
    static func writeInteger(_ value: Int64, to out: UnsafeMutablePointer<UInt8>) -> Int {
        var written = 0
        if value < 0 {
            out[0] = UInt8(ascii: "-")
            written = 1
        }
        // From the back of a small buffer on the stack, then copied in order.
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: maximumIntegerBytes) { digits in
            var magnitude = value.magnitude
            var start = digits.count
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            let length = digits.count - start
            (out + written).update(from: digits.baseAddress! + start, count: length)
            return written + length
        }
    }

    /// Appends `text` as a JSON string literal; only `"`, `\` and control characters are escaped.
    public static func writeString(_ text: String, into out: inout [UInt8]) {
        var text = text
        text.withUTF8 { text in
            let start = out.count
            out.append(contentsOf: repeatElement(0, count: escapedBound(text.count)))
            let written = out.withUnsafeMutableBufferPointer { writeString(text, to: $0.baseAddress! + start) }
            out.removeLast(out.count - start - written)
        }
    }

    /// The most bytes ``writeString(_:to:)`` writes for `count` bytes of text: quotes, and every byte as `\u00XX`.
    static func escapedBound(_ count: Int) -> Int { count * 6 + 2 }

    /// Writes `text` (UTF-8) at `out` as a JSON string literal, escaping `"`, `\` and control characters; returns how
    /// many bytes it wrote (at most ``escapedBound(_:)``).
    static func writeString(_ text: UnsafeBufferPointer<UInt8>, to out: UnsafeMutablePointer<UInt8>) -> Int {
        out[0] = UInt8(ascii: "\"")
        var written = 1
        // Ids, tokens and reasons rarely need escaping: those are copied whole.
        if !needsEscaping(text) {
            if let base = text.baseAddress { (out + 1).update(from: base, count: text.count) }
            written += text.count
        } else {
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
                    out[written + 4] = APNsDeviceToken.hexDigit(byte >> 4)
                    out[written + 5] = APNsDeviceToken.hexDigit(byte & 0x0F)
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

    /// Whether `text` has a byte JSON escapes: a control character, `"` or `\`. Eight bytes at a time (ids, tokens and
    /// reasons of 30-100 bytes, on every record).
    private static func needsEscaping(_ text: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = text.baseAddress else { return false }
        var index = 0
        while index + 8 <= text.count {
            let word = ByteWord.load(base, at: index)
            let escaped = ByteWord.bytes(of: word, from: 0x00, through: 0x1F) | ByteWord.bytes(of: word, from: UInt8(ascii: "\""), through: UInt8(ascii: "\""))
                | ByteWord.bytes(of: word, from: UInt8(ascii: "\\"), through: UInt8(ascii: "\\"))
            if escaped != 0 { return true }
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
