import APNsCore
import Foundation
import Testing

/// The payload check that replaced JSONSerialization on the hot paths: strict JSON, an object with an `aps` object.
@Suite("APNs payload scanner")
struct PayloadScannerTests {
    static func scan(_ text: String) -> APNsPayloadScanner.Result { APNsPayloadScanner.scan(Array(text.utf8)) }

    @Test(
        "well-formed payloads with an aps object are valid",
        arguments: [
            #"{"aps":{}}"#, " \r\n\t{ \"aps\" : { } } \n", #"{"x":{"y":[[],{}]},"aps":{"alert":"hi"}}"#,
            #"{"aps":{"a":-0.5E+2,"b":"\"\\\/\b\f\n\r\t\u00FF\uD83D\uDE00","c":[true,false,null,0,-0,1e5,2.25]}}"#,
            #"{"aps":{"alert":"日本 😀"}}"#, #"{"aps":{"a":1e-400,"b":1.7e308}}"#, #"{"\u0061ps":{}}"#, #"{"a":"}","aps":{"b":"{"}}"#,
        ])
    func valid(text: String) {
        guard case .valid = Self.scan(text) else {
            Issue.record("\(text): \(Self.scan(text))")
            return
        }
    }

    @Test(
        "anything else is refused, with the reason",
        arguments: [
            ("", .notJSONObject), ("[]", .notJSONObject), ("\"aps\"", .notJSONObject), ("42", .notJSONObject),
            ("null", .notJSONObject), ("{", .notJSONObject), (#"{"aps":{}"#, .notJSONObject), (#"{"aps":{}}x"#, .notJSONObject),
            (#"{"aps":{}}{}"#, .notJSONObject), (#"{"aps":{},}"#, .notJSONObject), (#"{,"aps":{}}"#, .notJSONObject),
            (#"{"aps":{"a":}}"#, .notJSONObject), (#"{"aps":{'a':1}}"#, .notJSONObject), (#"{aps:{}}"#, .notJSONObject),
            (#"{"aps" {}}"#, .notJSONObject), (#"{"aps":{"a":01}}"#, .notJSONObject), (#"{"aps":{"a":1.}}"#, .notJSONObject),
            (#"{"aps":{"a":.5}}"#, .notJSONObject), (#"{"aps":{"a":-}}"#, .notJSONObject), (#"{"aps":{"a":1e}}"#, .notJSONObject),
            (#"{"aps":{"a":+1}}"#, .notJSONObject), (#"{"aps":{"a":1e999}}"#, .notJSONObject), (#"{"aps":{"a":-2E+400}}"#, .notJSONObject), (#"{"aps":{"a":tru}}"#, .notJSONObject), (#"{"aps":{"a":nul}}"#, .notJSONObject),
            (#"{"aps":{"a":"\x"}}"#, .notJSONObject), (#"{"aps":{"a":"\u12"}}"#, .notJSONObject),
            (#"{"aps":{"a":"\uD83D"}}"#, .notJSONObject), (#"{"aps":{"a":"\uDE00"}}"#, .notJSONObject),
            ("{\"aps\":{\"a\":\"\u{01}\"}}", .notJSONObject), (#"{"aps":{"a":[1,]}}"#, .notJSONObject), (#"{"aps":{"a":"x}}"#, .notJSONObject),
            ("{}", .missingAps), (#"{"a":1}"#, .missingAps), (#"{"x":{"aps":{}}}"#, .missingAps), (#"{"APS":{}}"#, .missingAps),
            (#"{"aps":1}"#, .apsNotDictionary), (#"{"aps":[]}"#, .apsNotDictionary), (#"{"aps":"x"}"#, .apsNotDictionary),
            (#"{"aps":null}"#, .apsNotDictionary), (#"{"aps":{},"aps":2}"#, .apsNotDictionary),
        ] as [(String, APNsPayloadScanner.Result)])
    func invalid(text: String, expected: APNsPayloadScanner.Result) {
        #expect(Self.scan(text) == expected, "payload \(text)")
    }

    @Test("bytes that are not UTF-8 are refused, inside strings and out")
    func notUTF8() {
        for bad: [UInt8] in [[0xFF], [0xC0, 0xAF], [0xE0, 0x80, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xE6, 0x97], [0x80]] {
            var inside = Array(#"{"aps":{"a":""#.utf8)
            inside += bad + Array(#""}}"#.utf8)
            #expect(APNsPayloadScanner.scan(inside) == .notJSONObject, "bytes \(bad)")
            #expect(APNsPayloadScanner.scan(Array(#"{"aps":{}}"#.utf8) + bad) == .notJSONObject, "bytes \(bad)")
        }
    }

    @Test("aps.badge is read when it is an integer; the last of duplicate members wins")
    func badge() {
        let cases: [(String, Int?)] = [
            (#"{"aps":{"badge":12}}"#, 12), (#"{"aps":{"badge":0}}"#, 0), (#"{"aps":{"badge":-3}}"#, -3),
            (#"{"aps":{"badge":1.5}}"#, nil), (#"{"aps":{"badge":"3"}}"#, nil), (#"{"aps":{"badge":true}}"#, nil),
            (#"{"aps":{"badge":99999999999999999999}}"#, nil), (#"{"aps":{"alert":{"badge":5}}}"#, nil),
            (#"{"badge":4,"aps":{}}"#, nil), (#"{"aps":{"badge":1,"badge":2}}"#, 2), (#"{"aps":{"b\u0061dge":7}}"#, 7),
            (#"{"aps":{"badge":9},"aps":{}}"#, nil),
        ]
        for (text, badge) in cases {
            #expect(Self.scan(text) == .valid(badge: badge), "payload \(text)")
        }
    }

    @Test("nesting deeper than the limit is refused instead of exhausting the stack")
    func depth() {
        let deep = #"{"aps":{},"x":"# + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "}"
        #expect(Self.scan(deep) == .notJSONObject)
        let fine = #"{"aps":{},"x":"# + String(repeating: "[", count: 100) + String(repeating: "]", count: 100) + "}"
        #expect(Self.scan(fine) == .valid(badge: nil))
    }

    /// What JSONSerialization says about the same bytes.
    static func foundationVerdict(_ bytes: [UInt8]) -> APNsPayloadScanner.Result {
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else { return .notJSONObject }
        guard let aps = object["aps"] else { return .missingAps }
        return aps is [String: Any] ? .valid(badge: nil) : .apsNotDictionary
    }

    /// Whether a `,` is followed (after whitespace) by `}` or `]` outside strings.
    static func hasTrailingComma(_ bytes: [UInt8]) -> Bool {
        var inString = false
        var escaped = false
        var afterComma = false
        for byte in bytes {
            if inString {
                if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true; afterComma = false
            case UInt8(ascii: ","): afterComma = true
            case UInt8(ascii: "}"), UInt8(ascii: "]"): if afterComma { return true }
            case 0x20, 0x0A, 0x0D, 0x09: break
            default: afterComma = false
            }
        }
        return false
    }

    @Test("agrees with JSONSerialization on 20,000 mutations of real payloads (seeded)")
    func differential() {
        let seeds = [
            #"{"aps":{"alert":{"title":"Hi","body":"You have mail"},"badge":1,"sound":"default"}}"#,
            #"{"aps":{"content-available":1},"data":{"id":12345,"tags":["a","b"],"score":-1.5e3,"ok":true,"none":null}}"#,
            #"{"aps":{"alert":"caf\u00e9 \"q\" \\ / 日本"},"x":[{"y":[]},{}]}"#,
        ].map { Array($0.utf8) }
        let alphabet = Array(#"{}[]:,"\ -+.eE0123456789abfnrtu"#.utf8) + [0x00, 0x1F, 0x7F, 0xC3, 0xA9, 0xFF]
        var random = SplitMix64(seed: 0x5EED)
        var disagreements: [String] = []
        for _ in 0..<20_000 {
            var bytes = seeds[Int(random.next() % UInt64(seeds.count))]
            for _ in 0..<(1 + Int(random.next() % 3)) {
                let position = Int(random.next() % UInt64(bytes.count))
                switch random.next() % 3 {
                case 0: bytes[position] = alphabet[Int(random.next() % UInt64(alphabet.count))]
                case 1: bytes.remove(at: position)
                default: bytes.insert(alphabet[Int(random.next() % UInt64(alphabet.count))], at: position)
                }
                if bytes.isEmpty { break }
            }
            var ours = APNsPayloadScanner.scan(bytes)
            if case .valid = ours { ours = .valid(badge: nil) }
            let theirs = Self.foundationVerdict(bytes)
            // Foundation on Linux accepts a trailing comma in objects and arrays; JSON (and so APNs) does not.
            if ours == .notJSONObject && Self.hasTrailingComma(bytes) { continue }
            if ours != theirs && disagreements.count < 10 {
                disagreements.append("\(String(decoding: bytes, as: UTF8.self).debugDescription): ours \(ours), JSONSerialization \(theirs)")
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.joined(separator: "\n"))")
    }
}

/// Hand-picked edge cases, each checked against JSONSerialization (RFC 8259 on trailing commas, which
/// Foundation on Linux accepts and the scanner refuses).
extension PayloadScannerTests {
    static let handPickedCases: [String] = [
        #"{"aps":{}}"#, #"{"aps":{"alert":"hi","badge":3}}"#, #" { "aps" : { } } "#, "{\n\t\"aps\":{}\r\n}",
        #"{"aps":[]}"#, #"{"aps":"x"}"#, #"{"aps":1}"#, #"{"aps":null}"#, #"{"aps":true}"#, #"{"other":{}}"#, "{}",
        #"{"\u0061ps":{}}"#, #"{"ap\u0073":1}"#, #"{"apss":{}}"#, #"{"ap":{}}"#, #"{"x":{"aps":{}}}"#, #"{"aps":1,"aps":{}}"#,
        #"{"aps":{},"aps":1}"#, "[]", "[1,2]", #""aps""#, "1", "null", "true", "", " ", "{", "}", #"{"aps":{}"#, #"{"aps":{}}}"#,
        #"{"aps":{}} x"#, #"{"aps":{},}"#, #"{,"aps":{}}"#, #"{"aps"{}}"#, #"{"aps":}"#, #"{aps:{}}"#, #"{'aps':{}}"#,
        #"{"aps":{"a":01}}"#, #"{"aps":{"a":-0}}"#, #"{"aps":{"a":1.}}"#, #"{"aps":{"a":.5}}"#, #"{"aps":{"a":1e}}"#,
        #"{"aps":{"a":1e+5}}"#, #"{"aps":{"a":-1.25E-3}}"#, #"{"aps":{"a":+1}}"#, #"{"aps":{"a":--1}}"#, #"{"aps":{"a":tru}}"#,
        #"{"aps":{"a":nul}}"#, #"{"aps":{"a":"\x"}}"#, #"{"aps":{"a":"\u12"}}"#, #"{"aps":{"a":"\uD83D\uDE00"}}"#,
        #"{"aps":{"a":"\uD83D"}}"#, #"{"aps":{"a":"\uDE00"}}"#, #"{"aps":{"a":"\uD83Dx"}}"#, "{\"aps\":{\"a\":\"\u{1}\"}}",
        #"{"aps":{"a":"é ✓ 😀"}}"#, #"{"aps":{"a":[1,[2,[3,{}]]]}}"#, #"{"aps":{"a":[1,]}}"#, #"{"aps":{"a":[,1]}}"#,
        #"{"aps":{"a":"\/\\\"\b\f\n\r\t"}}"#,
    ]

    @Test("a string's end is found wherever a quote, an escape, a control or a non-ASCII byte falls, in keys and values")
    func stringEndsAtEveryPosition() {
        var wrong: [String] = []
        for length in 0...19 {
            for position in 0...length {
                let before = String(repeating: "a", count: position), after = String(repeating: "b", count: length - position)
                for special in [#"\""#, #"\\"#, #"\n"#, #"\u0041"#, "é", "\u{7F}"] {
                    let text = before + special + after
                    let payload = Array(#"{"k\#(text)":1,"aps":{"alert":"\#(text)","badge":3}}"#.utf8)
                    if APNsPayloadScanner.scan(payload) != .valid(badge: 3) { wrong.append(text) }
                }
                // A raw control byte or a broken UTF-8 sequence is refused where it stands.
                for bad in [[0x01], [0xC3], [0xFF]] as [[UInt8]] {
                    let payload = Array(#"{"aps":{"alert":""#.utf8) + Array(before.utf8) + bad + Array(after.utf8) + Array(#""}}"#.utf8)
                    if APNsPayloadScanner.scan(payload) != .notJSONObject { wrong.append("\(bad) at \(position) of \(length)") }
                }
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(10))")
    }

    @Test("hand-picked edge cases: same verdict as JSONSerialization", arguments: handPickedCases)
    func handPicked(_ text: String) {
        let bytes = Array(text.utf8)
        var ours = APNsPayloadScanner.scan(bytes)
        if case .valid = ours { ours = .valid(badge: nil) }
        let expected = Self.hasTrailingComma(bytes) ? .notJSONObject : Self.foundationVerdict(bytes)
        #expect(ours == expected, "\(text)")
    }
}
