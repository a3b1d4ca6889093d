// A small JSON model and parser for the domain (its compact writer: JSON+Writing.swift).
//
// Why not JSONSerialization: on Linux it folds booleans and numbers into NSNumber, so
// `"seq": true` and `"seq": 1` cannot be told apart reliably, and it reorders object keys
// when writing. The relay must reject wrong types by name and must keep a payload's keys
// (and their order) when it injects the badge, so it parses and writes JSON itself.

import APNsCore

/// One member of a JSON object, in document order.
public struct JSONMember: Sendable, Equatable {
    /// The member's key.
    public var key: String
    /// The member's value.
    public var value: JSONValue

    /// Creates a member.
    public init(_ key: String, _ value: JSONValue) {
        self.key = key
        self.value = value
    }
}

/// A parsed JSON value. Numbers keep their literal text so that a payload is written back
/// exactly as the producer sent it; objects keep their members in document order.
public enum JSONValue: Sendable, Equatable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// The number's literal text as it appeared in the input (validated JSON number grammar).
    case number(String)
    /// A string, unescaped.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object, members in document order (duplicates kept; lookups take the last).
    case object([JSONMember])

    /// A number value from an integer.
    public static func integer(_ value: Int64) -> JSONValue { .number(String(value)) }

    /// The value as an `Int64` when it is a whole number that fits, however it is written (`3`, `3.0`, `3e0`: JSON
    /// Schema's `integer`).
    public var integerValue: Int64? {
        guard case .number(let literal) = self else { return nil }
        return Int64(literal) ?? JSONWholeNumber.value(of: literal.utf8)
    }

    /// The members when the value is an object.
    public var objectMembers: [JSONMember]? {
        guard case .object(let members) = self else { return nil }
        return members
    }

    /// The value of the last member named `key` when the value is an object (last one wins,
    /// as in most JSON readers).
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.last(where: { $0.key == key })?.value
    }

    /// A short name of the value's type, for error messages.
    public var typeName: String { kind.typeName }

    var kind: JSONKind {
        switch self {
        case .null: .null
        case .bool: .bool
        case .number: .number
        case .string: .string
        case .array: .array
        case .object: .object
        }
    }
}

/// Why a byte sequence is not JSON, with the byte offset where reading stopped.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, for a person.
    public let message: String
    /// Zero-based byte offset into the input.
    public let offset: Int

    /// "unexpected character 'x' at byte 12".
    public var description: String { "\(message) at byte \(offset)" }
}

/// Parses and writes JSON (RFC 8259) with strict UTF-8 and a nesting limit.
public enum JSON {
    /// Nesting deeper than this is refused, so hostile input cannot exhaust the stack.
    public static let maximumDepth = 64

    /// Parses one JSON value filling the whole input (surrounding whitespace allowed).
    public static func parse(_ bytes: some Collection<UInt8>) throws(JSONParseError) -> JSONValue {
        try read(bytes) { text in text.map { $0.value($0.root) } }.get()
    }

    /// Checks that `bytes` hold one JSON value (with the errors ``parse(_:)`` throws) and hands `body` the
    /// text to read in place, or the error. `body` builds only what it asks for; the text is valid only
    /// while `body` runs.
    static func read<Result>(_ bytes: some Collection<UInt8>, _ body: (Swift.Result<JSONText, JSONParseError>) -> Result) -> Result {
        // In place when the bytes are contiguous (an array, or a slice of a consumed batch's bytes).
        bytes.withContiguousStorageIfAvailable { body(validate($0)) }
            ?? Array(bytes).withUnsafeBufferPointer { body(validate($0)) }
    }

    private static func validate(_ buffer: UnsafeBufferPointer<UInt8>) -> Swift.Result<JSONText, JSONParseError> {
        var checker = Checker(bytes: buffer)
        checker.skipWhitespace()
        let start = checker.index
        do throws(JSONParseError) {
            try checker.checkValue(depth: 0)
            let end = checker.index
            checker.skipWhitespace()
            if checker.index != checker.bytes.count {
                throw checker.error("unexpected data after the JSON value")
            }
            return .success(JSONText(bytes: buffer, root: start..<end))
        } catch {
            return .failure(error)
        }
    }

    /// The grammar: checks a value where `index` stands and steps past it, building nothing but the
    /// rare string that needs decoding to be checked (escapes, non-ASCII). Reads `bytes` only while
    /// ``JSON/read(_:_:)`` lends them; every access is checked against `count` first.
    struct Checker {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        func error(_ message: String) -> JSONParseError {
            JSONParseError(message: message, offset: index)
        }

        func unexpected() -> JSONParseError {
            guard index < bytes.count else { return error("unexpected end of input") }
            let byte = bytes[index]
            if byte >= 0x20 && byte < 0x7F {
                return error("unexpected character '\(Character(Unicode.Scalar(byte)))'")
            }
            return error("unexpected byte 0x\(String(byte, radix: 16))")
        }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        mutating func checkValue(depth: Int) throws(JSONParseError) {
            guard depth < JSON.maximumDepth else { throw error("nesting deeper than \(JSON.maximumDepth) levels") }
            guard index < bytes.count else { throw unexpected() }
            switch bytes[index] {
            case UInt8(ascii: "{"): try checkObject(depth: depth)
            case UInt8(ascii: "["): try checkArray(depth: depth)
            case UInt8(ascii: "\""): try checkString()
            case UInt8(ascii: "t"): try expectLiteral("true")
            case UInt8(ascii: "f"): try expectLiteral("false")
            case UInt8(ascii: "n"): try expectLiteral("null")
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try checkNumber()
            default: throw unexpected()
            }
        }

        mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
            for expected in UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount) {
                guard index < bytes.count, bytes[index] == expected else { throw unexpected() }
                index += 1
            }
        }

        mutating func checkObject(depth: Int) throws(JSONParseError) {
            index += 1
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return
            }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw unexpected() }
                try checkString()
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw unexpected() }
                index += 1
                skipWhitespace()
                try checkValue(depth: depth + 1)
                skipWhitespace()
                guard index < bytes.count else { throw unexpected() }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "}") { index += 1; return }
                throw unexpected()
            }
        }

        mutating func checkArray(depth: Int) throws(JSONParseError) {
            index += 1
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return
            }
            while true {
                skipWhitespace()
                try checkValue(depth: depth + 1)
                skipWhitespace()
                guard index < bytes.count else { throw unexpected() }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "]") { index += 1; return }
                throw unexpected()
            }
        }

        mutating func checkNumber() throws(JSONParseError) {
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw unexpected() }
            if bytes[index] == UInt8(ascii: "0") {
                index += 1
            } else {
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard index < bytes.count, isDigit(bytes[index]) else { throw unexpected() }
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                guard index < bytes.count, isDigit(bytes[index]) else { throw unexpected() }
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
        }

        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

        /// The end of a plain string (ASCII, no escape, no control character) whose opening quote is at
        /// `index`: the index of its closing quote, or `nil` when it needs the full rules.
        func plainStringEnd() -> Int? {
            let end = ByteWord.endOfPlainJSONRun(in: bytes, from: index + 1)
            return end < bytes.count && bytes[end] == UInt8(ascii: "\"") ? end : nil
        }

        mutating func checkString() throws(JSONParseError) {
            // Most strings (keys, ids, tokens) are plain: checked by the scan alone, nothing built.
            if let end = plainStringEnd() {
                index = end + 1
                return
            }
            _ = try decodeString()
        }

        /// The string whose opening quote is at `index`, unescaped; steps past its closing quote.
        mutating func decodeString() throws(JSONParseError) -> String {
            // Plain strings are made straight from the input, with no buffer of their own and no generic
            // validation (`String(validating:)` looks up type metadata at run time on every call).
            if let end = plainStringEnd() {
                let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[(index + 1)..<end]), as: UTF8.self)
                index = end + 1
                return text
            }
            index += 1  // opening quote
            var utf8: [UInt8] = []
            while true {
                guard index < bytes.count else { throw error("unterminated string") }
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    guard let text = String(validating: utf8, as: UTF8.self) else {
                        throw error("string is not valid UTF-8")
                    }
                    return text
                case UInt8(ascii: "\\"):
                    index += 1
                    guard index < bytes.count else { throw error("unterminated string") }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""): utf8.append(UInt8(ascii: "\""))
                    case UInt8(ascii: "\\"): utf8.append(UInt8(ascii: "\\"))
                    case UInt8(ascii: "/"): utf8.append(UInt8(ascii: "/"))
                    case UInt8(ascii: "b"): utf8.append(0x08)
                    case UInt8(ascii: "f"): utf8.append(0x0C)
                    case UInt8(ascii: "n"): utf8.append(0x0A)
                    case UInt8(ascii: "r"): utf8.append(0x0D)
                    case UInt8(ascii: "t"): utf8.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalarValue = try parseHex4()
                        if (0xD800...0xDBFF).contains(scalarValue) {
                            // A high surrogate must be followed by an escaped low surrogate.
                            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                                  bytes[index + 1] == UInt8(ascii: "u") else {
                                throw error("unpaired UTF-16 surrogate in string")
                            }
                            index += 2
                            let low = try parseHex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired UTF-16 surrogate in string") }
                            scalarValue = 0x10000 + ((scalarValue - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let scalar = Unicode.Scalar(scalarValue) else {
                            throw error("unpaired UTF-16 surrogate in string")
                        }
                        utf8.append(contentsOf: String(Character(scalar)).utf8)
                    default:
                        index -= 1
                        throw error("invalid escape in string")
                    }
                case 0x00..<0x20:
                    throw error("control character in string")
                default:
                    utf8.append(byte)
                    index += 1
                }
            }
        }

        mutating func parseHex4() throws(JSONParseError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw error("unterminated string") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw error("invalid \\u escape in string")
                }
                value = value << 4 | digit
                index += 1
            }
            return value
        }
    }
}
