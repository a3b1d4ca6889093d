import APNs
import Foundation
import TestSupport
import Testing

/// The payload check must accept and refuse exactly what a JSON parser does (it replaced
/// JSONSerialization on the send path), so each case is also run through JSONSerialization.
/// One deliberate difference: Foundation's parser accepts a trailing comma (`[1,]`, `{"a":1,}`),
/// which RFC 8259 does not; the scanner refuses it.
@Suite("Payload scanner agrees with JSONSerialization")
struct PayloadScannerDifferentialTests {
    static let cases: [String] = [
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

    @Test("hand-picked payloads", arguments: cases)
    func handPicked(_ text: String) {
        let bytes = Array(text.utf8)
        #expect(verdict(bytes) == reference(bytes), "\(text)")
    }

    @Test("invalid UTF-8 and control bytes inside strings are refused")
    func invalidBytes() {
        for bad: [UInt8] in [[0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF5, 0x80, 0x80, 0x80], [0xE2, 0x82], [0x80], [0xF0, 0x82, 0x82, 0xAC], [0x1F]] {
            let bytes = Array(#"{"aps":{"a":""#.utf8) + bad + Array(#""}}"#.utf8)
            #expect(verdict(bytes) == .notJSONObject, "\(bad)")
            #expect(reference(bytes) == .notJSONObject, "JSONSerialization also refuses \(bad)")
        }
    }

    @Test("random mutations of a real payload: same verdict as JSONSerialization")
    func mutations() {
        let seed = Array(#"{"aps":{"alert":{"title":"Hi","body":"Message 7 ✓"},"badge":12,"sound":"default"},"k":[1,2.5e3,true,null]}"#.utf8)
        let alphabet = Array(#"{}[]:,"\ 0123456789.eE+-tfnulaps"#.utf8)
        var generator = SeededGenerator(seed: 0x5EED)
        for _ in 0..<5_000 {
            var bytes = seed
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                let position = Int.random(in: 0..<bytes.count, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: bytes.remove(at: position)
                case 1: bytes.insert(alphabet.randomElement(using: &generator)!, at: position)
                default: bytes[position] = alphabet.randomElement(using: &generator)!
                }
                if bytes.isEmpty { break }
            }
            let got = verdict(bytes)
            let expected = reference(bytes)
            #expect(got == expected, "\(String(decoding: bytes, as: UTF8.self))")
            if got != expected { return }
        }
    }

    @Test("nesting deeper than the limit is refused, not a stack overflow")
    func deepNesting() {
        let deep = Array((String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)).utf8)
        #expect(verdict(deep) == .notJSONObject)
        let fine = Array(("{\"aps\":" + String(repeating: "[", count: 100) + String(repeating: "]", count: 100) + "}").utf8)
        #expect(verdict(fine) == .apsNotDictionary)
    }

    /// The scanner's answer, in the terms below.
    private func verdict(_ bytes: [UInt8]) -> Verdict {
        switch APNsPayloadScanner.scan(bytes) {
        case .valid: return .valid
        case .missingAps: return .missingAps
        case .apsNotDictionary: return .apsNotDictionary
        case .notJSONObject: return .notJSONObject
        }
    }

    enum Verdict: Equatable { case valid, missingAps, apsNotDictionary, notJSONObject }

    /// What JSONSerialization says, in the scanner's terms (RFC 8259 on trailing commas).
    private func reference(_ bytes: [UInt8]) -> Verdict {
        if hasTrailingComma(bytes) { return .notJSONObject }
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]),
              let dictionary = object as? [String: Any] else { return .notJSONObject }
        guard let aps = dictionary["aps"] else { return .missingAps }
        return aps is [String: Any] ? .valid : .apsNotDictionary
    }
}

/// A `,` followed (after whitespace) by `}` or `]`, outside strings.
private func hasTrailingComma(_ bytes: [UInt8]) -> Bool {
    var inString = false
    var escaped = false
    var pendingComma = false
    for byte in bytes {
        if inString {
            if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
            continue
        }
        switch byte {
        case UInt8(ascii: "\""): inString = true; pendingComma = false
        case UInt8(ascii: ","): pendingComma = true
        case UInt8(ascii: "}"), UInt8(ascii: "]"): if pendingComma { return true }
        case 0x20, 0x09, 0x0A, 0x0D: break
        default: pendingComma = false
        }
    }
    return false
}
