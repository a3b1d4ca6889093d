// The compact JSON object writer of the record encoders.

/// Builds a compact JSON object in a fixed key order; used by the record encoders (one per result, badge change and
/// dead letter, so it is on every notification's path).
///
/// Each member is written through a pointer into storage made room for first (its worst case: every byte of a string
/// escaped), rather than appended byte by byte to an array, each append checking the array's uniqueness and capacity.
/// Strings are escaped by ``JSON/writeString(_:to:)``, integers written by ``JSON/writeInteger(_:to:)``.
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
            member(name, valueBytesAtMost: JSON.escapedBound(text.count)) { out in JSON.writeString(text, to: out) }
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

    private static func copy(_ literal: StaticString, to out: UnsafeMutablePointer<UInt8>) -> Int {
        out.update(from: literal.utf8Start, count: literal.utf8CodeUnitCount)
        return literal.utf8CodeUnitCount
    }
}
