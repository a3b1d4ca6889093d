import APNsCore
import Foundation
import Testing

/// JSON string literals written by hand: what a JSON parser reads back is the text given.
@Suite("JSON string literals")
struct JSONStringTests {
    @Test("quotes, backslashes, line breaks, tabs and other control characters are escaped; the rest is kept as it is", arguments: [
        "plain", "", "a \"quoted\" word", "back\\slash", "line\nbreak\r\n", "tab\there", "bell\u{7} and nul\u{0}", "ünïcødé ✓ 🚀",
    ])
    func roundTrip(_ text: String) throws {
        let quoted = JSONString.quoted(text)
        #expect(quoted.hasPrefix("\"") && quoted.hasSuffix("\""))
        #expect(!quoted.unicodeScalars.contains { $0.value < 0x20 }, "no raw control character: \(quoted)")
        let decoded = try JSONSerialization.jsonObject(with: Data(quoted.utf8), options: .fragmentsAllowed) as? String
        #expect(decoded == text)
    }

    @Test("the escapes are RFC 8259's short forms where there is one, \\u00XX otherwise")
    func escapes() {
        #expect(JSONString.quoted("\"\\\n\r\t") == #""\"\\\n\r\t""#)
        #expect(JSONString.quoted("\u{1}\u{1f}") == #""\u0001\u001f""#)
    }
}
