@testable import APNsCore
import Testing

struct TokenCase: Sendable, CustomStringConvertible {
    let hex: String
    let problem: APNsValidationError.Problem?
    var description: String { "\(hex.prefix(12))…(\(hex.count))" }
}

/// A device token as read from hex text: the length rules, every byte checked, and one token whatever its case.
@Suite("Device tokens")
struct APNsDeviceTokenTests {
    static let tokenCases: [TokenCase] = [
        TokenCase(hex: goodToken, problem: nil),
        TokenCase(hex: String(repeating: "AB", count: 32), problem: nil),
        TokenCase(hex: String(repeating: "0f", count: 100), problem: nil),
        TokenCase(hex: "", problem: .empty),
        TokenCase(hex: String(repeating: "a", count: 65), problem: .oddLength),
        TokenCase(hex: String(repeating: "zz", count: 32), problem: .notHex),
        TokenCase(hex: String(repeating: "ab", count: 31), problem: .tooShort(minimum: 64, actual: 62)),
        TokenCase(hex: String(repeating: "ab", count: 101), problem: .tooLong(maximum: 200, actual: 202)),
    ]

    @Test("device token rule", arguments: tokenCases)
    func deviceToken(_ testCase: TokenCase) {
        do throws(APNsValidationError) {
            let token = try APNsDeviceToken(hex: testCase.hex)
            #expect(testCase.problem == nil)
            #expect(token.bytes.count == testCase.hex.count / 2)
            #expect(token.hex == testCase.hex.lowercased())
        } catch {
            #expect(error == APNsValidationError(.deviceToken, testCase.problem ?? .empty))
        }
    }

    @Test("a token's every byte is checked: any byte but a hex digit, at any position of the digits read together or of the tail, is refused; either case is read")
    func everyByteOfATokenIsChecked() {
        let hexDigits = Set("0123456789abcdefABCDEF".utf8)
        for length in [64, 70] {
            for position in 0..<length {
                for byte in UInt8.min...UInt8.max {
                    var digits = Array(repeating: UInt8(ascii: "7"), count: length)
                    digits[position] = byte
                    let text = String(decoding: digits, as: UTF8.self)
                    do throws(APNsValidationError) {
                        let token = try APNsDeviceToken(hex: text)
                        #expect(hexDigits.contains(byte), "byte \(byte) at \(position)")
                        #expect(token.hex == text.lowercased())
                    } catch {
                        // A byte above 0x7f may decode to a longer replacement; any error but notHex is then its length.
                        #expect(!hexDigits.contains(byte) && (error == APNsValidationError(.deviceToken, .notHex) || byte >= 0x80),
                                "byte \(byte) at \(position): \(error)")
                    }
                }
            }
        }
    }

    @Test("a token is the same whatever the case it was written in: equal, the same bytes, the same stable hash (its connection)")
    func deviceTokenCase() throws {
        let lower = String(repeating: "0a1b2c3d", count: 8)
        let fromLower = try APNsDeviceToken(hex: lower)
        let fromUpper = try APNsDeviceToken(hex: lower.uppercased())
        let fromBytes = try APNsDeviceToken(bytes: Array(repeating: [0x0a, 0x1b, 0x2c, 0x3d], count: 8).flatMap { $0 })
        #expect(fromLower == fromUpper && fromLower == fromBytes)
        #expect(fromUpper.hex == lower && fromBytes.hex == lower)
        #expect(fromUpper.bytes == fromBytes.bytes && fromLower.bytes.prefix(4) == [0x0a, 0x1b, 0x2c, 0x3d])
        // FNV-1a over the 32 bytes, computed here independently: the same in every process and every form.
        var expected: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in fromBytes.bytes { expected = (expected ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        #expect(fromLower.stableHash == expected && fromUpper.stableHash == expected && fromBytes.stableHash == expected)
        // Every digit, in either case, read at its value.
        let everyDigit = String(repeating: "0123456789abcdef", count: 4)
        var everyDigitHash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in Array(repeating: [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef] as [UInt8], count: 4).joined() {
            everyDigitHash = (everyDigitHash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        #expect(try APNsDeviceToken(hex: everyDigit).stableHash == everyDigitHash)
        #expect(try APNsDeviceToken(hex: everyDigit.uppercased()).stableHash == everyDigitHash)
    }

}
