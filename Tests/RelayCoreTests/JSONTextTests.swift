import Testing

@testable import RelayCore

/// Random JSON values, and texts that spell them with random whitespace and escapes, as producers might.
struct NoisyJSON {
    var random: SeededGenerator

    /// Characters strings are made of: plain ASCII, the ones JSON escapes, controls, DEL, and two-, three- and
    /// four-byte UTF-8.
    static let characters: [Unicode.Scalar] = ["a", "Z", "0", " ", "/", "{", "}", "[", "]", ",", ":", "\"", "\\", "\u{0}", "\u{8}",
                                               "\u{9}", "\u{A}", "\u{C}", "\u{D}", "\u{1F}", "\u{7F}", "\u{E9}", "\u{301}", "\u{4E2D}",
                                               "\u{FFFF}", "\u{1F600}", "\u{10FFFF}"]
    static let numbers = ["0", "-0", "7", "-12", "3.25", "-0.5e-3", "1E+9", "2e10", "9223372036854775807", "-9223372036854775808",
                          "99999999999999999999", "0.0"]

    mutating func string(maximumLength: Int = 12) -> String {
        var text = ""
        for _ in 0..<Int.random(in: 0...maximumLength, using: &random) {
            text.unicodeScalars.append(Self.characters.randomElement(using: &random)!)
        }
        return text
    }

    mutating func value(depth: Int = 0) -> JSONValue {
        switch Int.random(in: 0..<(depth >= 4 ? 4 : 7), using: &random) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &random))
        case 2: return .number(Self.numbers.randomElement(using: &random)!)
        case 3: return .string(string())
        case 4: return .array((0..<Int.random(in: 0...4, using: &random)).map { _ in value(depth: depth + 1) })
        default:
            return .object((0..<Int.random(in: 0...4, using: &random)).map { _ in JSONMember(string(maximumLength: 4), value(depth: depth + 1)) })
        }
    }

    private mutating func whitespace() -> String {
        ["", "", " ", "\n", "\t", "\r\n  "].randomElement(using: &random)!
    }

    /// `text` as a JSON string literal, each character spelled plainly or escaped at random.
    mutating func literal(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\u{8}": out += Bool.random(using: &random) ? "\\b" : "\\u0008"
            case "\u{C}": out += Bool.random(using: &random) ? "\\f" : "\\u000C"
            case "\n": out += Bool.random(using: &random) ? "\\n" : "\\u000a"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "/" where Bool.random(using: &random): out += "\\/"
            default:
                if scalar.value < 0x20 || Int.random(in: 0..<4, using: &random) == 0 {
                    for unit in String(scalar).utf16 { out += "\\u" + hex4(unit) }
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    private mutating func hex4(_ unit: UInt16) -> String {
        let digits = String(unit, radix: 16)
        let padded = String(repeating: "0", count: 4 - digits.count) + digits
        return Bool.random(using: &random) ? padded.uppercased() : padded
    }

    mutating func text(_ value: JSONValue) -> String {
        var out = whitespace()
        switch value {
        case .null: out += "null"
        case .bool(let flag): out += flag ? "true" : "false"
        case .number(let literal): out += literal
        case .string(let text): out += literal(text)
        case .array(let elements):
            out += "[" + whitespace()
            out += elements.map { text($0) }.joined(separator: ",")
            out += whitespace() + "]"
        case .object(let members):
            out += "{" + whitespace()
            out += members.map { literal($0.key) + whitespace() + ":" + text($0.value) }.joined(separator: ",")
            out += whitespace() + "}"
        }
        return out + whitespace()
    }
}

@Suite("JSON text: a checked text read where it lies")
struct JSONTextTests {
    /// Runs `body` on the checked text of `json`; throws when it is not JSON.
    private func withText<Output>(_ json: String, _ body: (JSONText) -> Output) throws -> Output {
        try JSON.read(Array(json.utf8)) { checked in checked.map(body) }.get()
    }

    private func source(_ text: JSONText, _ span: Range<Int>) -> String {
        String(decoding: UnsafeBufferPointer(rebasing: text.bytes[span]), as: UTF8.self)
    }

    @Test("a value's kind is told by its first byte, for every kind, and the root span leaves the whitespace around it out")
    func kinds() throws {
        let cases: [(json: String, root: String, kind: JSONKind)] = [
            ("null", "null", .null), (" true", "true", .bool), ("false ", "false", .bool), ("-1", "-1", .number),
            ("\r\n0.5e3 ", "0.5e3", .number), (#""s""#, #""s""#, .string), ("\n[1]\t", "[1]", .array), ("{ }", "{ }", .object),
        ]
        for (json, root, kind) in cases {
            try withText(json) { text in
                #expect(text.kind(text.root) == kind, "\(json)")
                #expect(source(text, text.root) == root, "\(json)")
            }
        }
        #expect(JSONKind.object.typeName == "an object" && JSONKind.array.typeName == "an array" && JSONKind.null.typeName == "null")
    }

    @Test("an object's members come in document order, duplicates kept, key spans with their quotes, value spans whole however nested, whitespace left out")
    func members() throws {
        let json = #" { "a" : 1 , "b":{"x":[1,{"y":"}]"}],"z":"\"{"} ,"a" :"\u0041" , "e\"":[] , "n": null,"t":true } "#
        try withText(json) { text in
            var seen: [(String, String, JSONKind)] = []
            text.forEachMember(of: text.root) { key, value in seen.append((source(text, key), source(text, value), text.kind(value))) }
            #expect(seen.map { $0.0 } == [#""a""#, #""b""#, #""a""#, #""e\"""#, #""n""#, #""t""#])
            #expect(seen.map { $0.1 } == ["1", #"{"x":[1,{"y":"}]"}],"z":"\"{"}"#, #""\u0041""#, "[]", "null", "true"])
            #expect(seen.map { $0.2 } == [.number, .object, .string, .array, .null, .bool])
        }
        try withText(" { } ") { text in
            var calls = 0
            text.forEachMember(of: text.root) { _, _ in calls += 1 }
            #expect(calls == 0)
        }
    }

    @Test("an array's elements come in order, each span whole; an empty array has none")
    func elements() throws {
        try withText(#"[ 1,"a,b" ,[ [ ] ],{"k":[2,3]} , -4.5e+2,false ]"#) { text in
            var spans: [String] = []
            text.forEachElement(of: text.root) { spans.append(source(text, $0)) }
            #expect(spans == ["1", #""a,b""#, "[ [ ] ]", #"{"k":[2,3]}"#, "-4.5e+2", "false"])
        }
        try withText("[\n]") { text in
            var calls = 0
            text.forEachElement(of: text.root) { _ in calls += 1 }
            #expect(calls == 0)
        }
    }

    @Test("a walk stops at the first error its body throws, and the error comes out as thrown")
    func walkRethrows() throws {
        struct Stop: Error, Equatable { var at: String }
        try withText(#"{"a":1,"b":2,"c":3}"#) { text in
            var visited: [String] = []
            #expect(throws: Stop(at: #""b""#)) {
                try text.forEachMember(of: text.root) { (key, _) throws(Stop) in
                    visited.append(source(text, key))
                    if source(text, key) == #""b""# { throw Stop(at: source(text, key)) }
                }
            }
            #expect(visited == [#""a""#, #""b""#])
        }
    }

    @Test("a key is compared with a name as it reads once unescaped: plain or escaped spellings match, prefixes, extensions and other escapes do not")
    func keyComparison() throws {
        let cases: [(String, Bool)] = [
            (#""id""#, true), (#""\u0069d""#, true), (#""\u0069\u0064""#, true), (#""i\u0064""#, true), (#""\u0049d""#, false),
            (#""i""#, false), (#""idx""#, false), (#""Id""#, false), (#""\"id""#, false), (#""id\n""#, false), (#""""#, false),
        ]
        for (key, matches) in cases {
            try withText("{\(key):0}") { text in
                text.forEachMember(of: text.root) { span, _ in
                    #expect(text.string(span, is: "id") == matches, "\(key)")
                }
            }
        }
        try withText(#"{"":0}"#) { text in
            text.forEachMember(of: text.root) { span, _ in #expect(text.string(span, is: "")) }
        }
    }

    @Test("strings are unescaped, every escape and surrogate pair; written back as the writer writes them, raw when there was no escape")
    func strings() throws {
        let json = #"["plain", "\"\\\/\b\f\n\r\t", "\u00e9\u4E2D\ud83d\ude00", "é中😀", "\u0000\u001f\u007f", "a/b"]"#
        try withText(json) { text in
            var decoded: [String] = []
            var rewritten: [String] = []
            text.forEachElement(of: text.root) { span in
                decoded.append(text.string(span))
                var out: [UInt8] = []
                text.writeString(span, into: &out)
                rewritten.append(String(decoding: out, as: UTF8.self))
                var expected: [UInt8] = []
                JSON.writeString(text.string(span), into: &expected)
                #expect(out == expected)
            }
            #expect(decoded == ["plain", "\"\\/\u{8}\u{C}\n\r\t", "é中😀", "é中😀", "\u{0}\u{1F}\u{7F}", "a/b"])
            #expect(rewritten == [#""plain""#, #""\"\\/\u0008\u000c\n\r\t""#, #""é中😀""#, #""é中😀""#, "\"\\u0000\\u001f\u{7F}\"", #""a/b""#])
        }
    }

    @Test("an integer read in place is the literal's whole value (Int64 of its digits, times ten for e1) for random literals, nested anywhere; other kinds are no integer")
    func integersAgreeWithInt64() throws {
        var random = SeededGenerator(seed: 64)
        var literals: [String] = []
        var expected: [Int64?] = []
        for _ in 0..<2_000 {
            let digits = Int.random(in: 1...21, using: &random)
            var literal = Int.random(in: 0..<2, using: &random) == 0 ? "-" : ""
            literal += String(Int.random(in: 1...9, using: &random))
            for _ in 1..<digits { literal += String(Int.random(in: 0...9, using: &random)) }
            let whole = Int64(literal)
            switch Int.random(in: 0..<6, using: &random) {
            case 0:
                literal += ".0"
                expected.append(whole)
            case 1:
                literal += "e1"
                expected.append(whole.flatMap { value in
                    let (times10, overflow) = value.multipliedReportingOverflow(by: 10)
                    return overflow ? nil : times10
                })
            default:
                expected.append(whole)
            }
            literals.append(literal)
        }
        let json = "[" + literals.map { "{\"n\":[\($0)]}" }.joined(separator: ",") + "]"
        try withText(json) { text in
            var index = 0
            text.forEachElement(of: text.root) { object in
                text.forEachMember(of: object) { _, array in
                    text.forEachElement(of: array) { number in
                        #expect(text.integer(number) == expected[index], "\(literals[index])")
                        index += 1
                    }
                }
            }
            #expect(index == literals.count)
        }
        try withText(#"["5", true, null, [5], {"5":5}]"#) { text in
            text.forEachElement(of: text.root) { #expect(text.integer($0) == nil) }
        }
    }

    @Test("random texts with random whitespace and escapes: the tree read in place is the parsed tree, and the compact text is what the writer writes for it")
    func compactAgreesWithTheWriter() throws {
        var noisy = NoisyJSON(random: SeededGenerator(seed: 2_718))
        for round in 0..<1_500 {
            let value = noisy.value()
            let json = noisy.text(value)
            let (tree, compact) = try withText(json) { text in
                var out: [UInt8] = []
                text.writeCompact(text.root, into: &out)
                return (text.value(text.root), out)
            }
            #expect(tree == value, "round \(round): \(json)")
            #expect(compact == JSON.serialize(value), "round \(round): \(json)")
            #expect(try JSON.parse(compact) == value)
        }
    }

    @Test("a value's subtree read in place is the same as the parsed value's member")
    func subtrees() throws {
        let json = #"{"a":{"b":[1,"\u0032",{"c":null}]},"d":[true,false],"e":"f"}"#
        let parsed = try JSON.parse(Array(json.utf8))
        try withText(json) { text in
            text.forEachMember(of: text.root) { key, value in
                #expect(text.value(value) == parsed[text.string(key)])
            }
        }
    }
}
