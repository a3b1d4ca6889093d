// A checked JSON text read where it lies: the event decoder finds its fields and writes the payload
// template from the record's own bytes, with no tree of values in between.

import APNsCore

/// The kind of a JSON value, told by its first byte.
enum JSONKind: Equatable {
    case null, bool, number, string, array, object

    /// A short name of the kind, for error messages ("an object").
    var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

/// A JSON text that ``JSON/read(_:_:)`` checked. Values are spans of its bytes (from a value's first byte
/// to just past its last, whitespace around it left out); nothing is built until a caller asks for it.
/// Valid only while `read`'s body runs. No method checks the grammar again: every span it is given
/// must come from this text.
struct JSONText {
    let bytes: UnsafeBufferPointer<UInt8>
    /// The span of the top-level value.
    let root: Range<Int>

    func kind(_ span: Range<Int>) -> JSONKind {
        switch bytes[span.lowerBound] {
        case UInt8(ascii: "{"): .object
        case UInt8(ascii: "["): .array
        case UInt8(ascii: "\""): .string
        case UInt8(ascii: "t"), UInt8(ascii: "f"): .bool
        case UInt8(ascii: "n"): .null
        default: .number
        }
    }

    /// Calls `body` with each member's key span (quotes included) and value span, in document order.
    func forEachMember<Failure: Error>(of object: Range<Int>, _ body: (_ key: Range<Int>, _ value: Range<Int>) throws(Failure) -> Void) throws(Failure) {
        _ = try walkContainer(from: object.lowerBound, closing: UInt8(ascii: "}")) { (index) throws(Failure) in
            let keyEnd = end(ofStringAt: index)
            let valueStart = skipWhitespace(from: skipWhitespace(from: keyEnd) + 1)  // past the colon
            let valueEnd = end(ofValueAt: valueStart)
            try body(index..<keyEnd, valueStart..<valueEnd)
            return valueEnd
        }
    }

    /// Calls `body` with each element's span, in order.
    func forEachElement<Failure: Error>(of array: Range<Int>, _ body: (Range<Int>) throws(Failure) -> Void) throws(Failure) {
        _ = try walkContainer(from: array.lowerBound, closing: UInt8(ascii: "]")) { (index) throws(Failure) in
            let elementEnd = end(ofValueAt: index)
            try body(index..<elementEnd)
            return elementEnd
        }
    }

    /// Whether the string at `span` reads `name` once unescaped.
    func string(_ span: Range<Int>, is name: StaticString) -> Bool {
        let count = span.count - 2
        let expected = name.utf8CodeUnitCount
        // An escape only lengthens a spelling: a key shorter than the name is never it.
        guard count >= expected else { return false }
        // Each key of an event is compared with several names: by length first, then byte by byte.
        let content = bytes.baseAddress! + span.lowerBound + 1
        if count == expected {
            var index = 0
            while index < count && content[index] == name.utf8Start[index] { index += 1 }
            if index == count { return true }
        }
        // Spelled with escapes (`"\u0069d"` is `"id"`): rare enough to decode.
        return count > expected && UnsafeBufferPointer(start: content, count: count).contains(UInt8(ascii: "\\"))
            && string(span).utf8.elementsEqual(UnsafeBufferPointer(start: name.utf8Start, count: expected))
    }

    /// The string at `span`, unescaped.
    func string(_ span: Range<Int>) -> String {
        var checker = JSON.Checker(bytes: bytes, index: span.lowerBound)
        // The grammar already accepted this string, so decoding it cannot fail.
        guard let text = try? checker.decodeString() else { preconditionFailure("a string of a checked JSON text failed to decode") }
        return text
    }

    /// The number at `span` as an `Int64` when its value is whole and fits (``JSONWholeNumber``): plain digits are
    /// read in place, without making the literal a `String`.
    func integer(_ span: Range<Int>) -> Int64? {
        guard kind(span) == .number else { return nil }
        var index = span.lowerBound
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        var magnitude: UInt64 = 0
        while index < span.upperBound {
            let byte = bytes[index]
            // A fraction or an exponent: JSON Schema's rule, on the rare literal that needs it.
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return JSONWholeNumber.value(of: bytes[span]) }
            let (times10, overflow) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, carry) = times10.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
            guard !overflow, !carry else { return JSONWholeNumber.value(of: bytes[span]) }
            magnitude = sum
            index += 1
        }
        if negative { return magnitude <= UInt64(Int64.max) + 1 ? Int64(truncatingIfNeeded: 0 &- magnitude) : nil }
        return magnitude <= UInt64(Int64.max) ? Int64(magnitude) : nil
    }

    /// The value at `span` as a tree.
    func value(_ span: Range<Int>) -> JSONValue {
        build(at: span.lowerBound).value
    }

    /// Appends the value at `span` as ``JSON/serialize(_:)`` writes its tree: no insignificant whitespace,
    /// strings escaped by ``JSON/writeString(_:into:)``'s rules, numbers as written.
    func writeCompact(_ span: Range<Int>, into out: inout [UInt8]) {
        _ = writeCompact(at: span.lowerBound, into: &out)
    }

    /// Appends the string at `span` as ``JSON/writeString(_:into:)`` writes it once unescaped.
    func writeString(_ span: Range<Int>, into out: inout [UInt8]) {
        let content = bytes[span]
        // Without an escape the bytes are already what the writer would write: the grammar allows no raw
        // quote, backslash or control character inside a string.
        guard content.contains(UInt8(ascii: "\\")) else { return out.append(contentsOf: UnsafeBufferPointer(rebasing: content)) }
        JSON.writeString(string(span), into: &out)
    }

    // MARK: Walking a checked text

    private func skipWhitespace(from start: Int) -> Int {
        var index = start
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return index
            }
        }
        return index
    }

    /// Just past the closing quote of the string whose opening quote is at `start`.
    private func end(ofStringAt start: Int) -> Int {
        var index = ByteWord.endOfPlainJSONRun(in: bytes, from: start + 1)
        // A checked string: its closing quote comes; an escape's next byte is never it.
        while bytes[index] != UInt8(ascii: "\"") {
            index = ByteWord.endOfPlainJSONRun(in: bytes, from: index + (bytes[index] == UInt8(ascii: "\\") ? 2 : 1))
        }
        return index + 1
    }

    /// Just past the value that starts at `start`.
    private func end(ofValueAt start: Int) -> Int {
        switch bytes[start] {
        case UInt8(ascii: "\""):
            return end(ofStringAt: start)
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            var index = start
            while true {
                switch bytes[index] {
                case UInt8(ascii: "\""):
                    index = end(ofStringAt: index)
                    continue
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { return index + 1 }
                default:
                    break
                }
                index += 1
            }
        case UInt8(ascii: "t"), UInt8(ascii: "n"):
            return start + 4
        case UInt8(ascii: "f"):
            return start + 5
        default:
            var index = start + 1
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: "."),
                     UInt8(ascii: "e"), UInt8(ascii: "E"):
                    index += 1
                default:
                    return index
                }
            }
            return index
        }
    }

    /// The value that starts at `start`, and the index just past it: one walk, however deep.
    private func build(at start: Int) -> (value: JSONValue, end: Int) {
        switch bytes[start] {
        case UInt8(ascii: "{"):
            var members: [JSONMember] = []
            let after = walkContainer(from: start, closing: UInt8(ascii: "}")) { index in
                let keyEnd = end(ofStringAt: index)
                let (value, valueEnd) = build(at: skipWhitespace(from: skipWhitespace(from: keyEnd) + 1))
                members.append(JSONMember(string(index..<keyEnd), value))
                return valueEnd
            }
            return (.object(members), after)
        case UInt8(ascii: "["):
            var elements: [JSONValue] = []
            let after = walkContainer(from: start, closing: UInt8(ascii: "]")) { index in
                let (value, valueEnd) = build(at: index)
                elements.append(value)
                return valueEnd
            }
            return (.array(elements), after)
        case UInt8(ascii: "\""):
            let after = end(ofStringAt: start)
            return (.string(string(start..<after)), after)
        case UInt8(ascii: "t"): return (.bool(true), start + 4)
        case UInt8(ascii: "f"): return (.bool(false), start + 5)
        case UInt8(ascii: "n"): return (.null, start + 4)
        default:
            let after = end(ofValueAt: start)
            return (.number(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<after]), as: UTF8.self)), after)
        }
    }

    /// Writes the value that starts at `start` compactly; returns the index just past it.
    private func writeCompact(at start: Int, into out: inout [UInt8]) -> Int {
        switch bytes[start] {
        case UInt8(ascii: "{"):
            out.append(UInt8(ascii: "{"))
            var first = true
            let after = walkContainer(from: start, closing: UInt8(ascii: "}")) { index in
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                let keyEnd = end(ofStringAt: index)
                writeString(index..<keyEnd, into: &out)
                out.append(UInt8(ascii: ":"))
                return writeCompact(at: skipWhitespace(from: skipWhitespace(from: keyEnd) + 1), into: &out)
            }
            out.append(UInt8(ascii: "}"))
            return after
        case UInt8(ascii: "["):
            out.append(UInt8(ascii: "["))
            var first = true
            let after = walkContainer(from: start, closing: UInt8(ascii: "]")) { index in
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                return writeCompact(at: index, into: &out)
            }
            out.append(UInt8(ascii: "]"))
            return after
        case UInt8(ascii: "\""):
            let after = end(ofStringAt: start)
            writeString(start..<after, into: &out)
            return after
        default:
            let after = end(ofValueAt: start)
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<after]))
            return after
        }
    }

    /// Hands `item` the start of each member or element of the container at `start`; `item` returns the
    /// index just past what it read. Returns the index just past the container.
    private func walkContainer<Failure: Error>(from start: Int, closing: UInt8, _ item: (Int) throws(Failure) -> Int) throws(Failure) -> Int {
        var index = skipWhitespace(from: start + 1)
        while bytes[index] != closing {
            index = skipWhitespace(from: try item(index))
            if bytes[index] == UInt8(ascii: ",") { index = skipWhitespace(from: index + 1) }
        }
        return index + 1
    }
}
