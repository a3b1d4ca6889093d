@testable import APNs
import Foundation
import TestSupport
import Testing

/// The payload check must accept and refuse exactly what a JSON parser does (it replaced
/// JSONSerialization on the send path), so each case is also run through JSONSerialization.
/// One deliberate difference: Foundation's parser accepts a trailing comma (`[1,]`, `{"a":1,}`),
/// which RFC 8259 does not; the scanner refuses it.
@Suite("Payload scanner agrees with JSONSerialization")
struct PayloadScannerTests {
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
        #expect(PayloadScanner.shape(of: bytes) == reference(bytes), "\(text)")
    }

    @Test("invalid UTF-8 and control bytes inside strings are refused")
    func invalidBytes() {
        for bad: [UInt8] in [[0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF5, 0x80, 0x80, 0x80], [0xE2, 0x82], [0x80], [0xF0, 0x82, 0x82, 0xAC], [0x1F]] {
            let bytes = Array(#"{"aps":{"a":""#.utf8) + bad + Array(#""}}"#.utf8)
            #expect(PayloadScanner.shape(of: bytes) == .invalid, "\(bad)")
            #expect(reference(bytes) == .invalid, "JSONSerialization also refuses \(bad)")
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
            let verdict = PayloadScanner.shape(of: bytes)
            let expected = reference(bytes)
            #expect(verdict == expected, "\(String(decoding: bytes, as: UTF8.self))")
            if verdict != expected { return }
        }
    }

    @Test("nesting deeper than the limit is refused, not a stack overflow")
    func deepNesting() {
        let deep = Array((String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)).utf8)
        #expect(PayloadScanner.shape(of: deep) == .invalid)
        let fine = Array(("{\"aps\":" + String(repeating: "[", count: 100) + String(repeating: "]", count: 100) + "}").utf8)
        #expect(PayloadScanner.shape(of: fine) == .object(aps: .array))
    }

    /// What JSONSerialization says, in the scanner's terms (RFC 8259 on trailing commas).
    private func reference(_ bytes: [UInt8]) -> PayloadScanner.Shape {
        if hasTrailingComma(bytes) { return .invalid }
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]) else { return .invalid }
        guard let dictionary = object as? [String: Any] else { return .notObject }
        guard let aps = dictionary["aps"] else { return .object(aps: nil) }
        switch aps {
        case is [String: Any]: return .object(aps: .object)
        case is [Any]: return .object(aps: .array)
        case is String: return .object(aps: .string)
        case is NSNull: return .object(aps: .null)
        default:
            // Foundation folds booleans into NSNumber: tell them apart by their type encoding.
            if let number = aps as? NSNumber, String(cString: number.objCType) == "c" { return .object(aps: .boolean) }
            return .object(aps: .number)
        }
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
