import APNsCore
import Foundation
import Testing

@Suite("apns-id text")
struct UUIDTextTests {
    @Test("formats like Foundation, lower-cased; parses either case; refuses anything else")
    func roundTrip() {
        for _ in 0..<1_000 {
            let uuid = UUID()
            let text = APNsUUIDText.format(uuid)
            #expect(text == uuid.uuidString.lowercased())
            #expect(APNsUUIDText.parse(text) == uuid)
            #expect(APNsUUIDText.parse(uuid.uuidString) == uuid)
        }
        for bad in ["", "not-a-uuid", "2b3a1a4e-9c0d-4e5f-8a6b-7c8d9e0f1a2", "2b3a1a4e-9c0d-4e5f-8a6b-7c8d9e0f1a2bc",
                    "2b3a1a4e9c0d-4e5f-8a6b-7c8d9e0f1a2bc", "2b3a1a4e-9c0d-4e5f-8a6b_7c8d9e0f1a2b", "2b3a1a4g-9c0d-4e5f-8a6b-7c8d9e0f1a2b",
                    "{2b3a1a4e-9c0d-4e5f-8a6b-7c8d9e0f1a}"] {
            #expect(APNsUUIDText.parse(bad) == nil, "\(bad)")
            #expect(UUID(uuidString: bad) == nil, "Foundation agrees on \(bad)")
        }
    }

    @Test("every byte value at every position of the text: a hex digit (either case) is read at its value, a dash only where it goes")
    func everyByteAtEveryPosition() {
        let text = Array("0123abcd-4567-89ef-ABCD-0123456789ab".utf8)
        let dashes: Set = [8, 13, 18, 23]
        let hexDigits = Set("0123456789abcdefABCDEF".utf8)
        var wrong: [String] = []
        for position in text.indices {
            for byte in UInt8.min...UInt8.max {
                var changed = text
                changed[position] = byte
                let parsed = changed.withUnsafeBufferPointer { APNsUUIDText.parse(utf8: $0) }
                let valid = dashes.contains(position) ? byte == UInt8(ascii: "-") : hexDigits.contains(byte)
                // Foundation reads the digits of a valid text; the value must be the same.
                let expected = valid ? UUID(uuidString: String(decoding: changed, as: UTF8.self)) : nil
                if parsed != expected || (valid && expected == nil) { wrong.append("byte \(byte) at \(position)") }
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(10))")
    }
}
