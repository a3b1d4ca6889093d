import Testing
@testable import RelayCore

@Suite struct TokenKeyTests {
    @Test func aLowerCaseSixtyFourCharacterTokenIsPackedAndComesBackAsWritten() {
        var random = SeededGenerator(seed: 64)
        let tokens = [String(repeating: "0", count: 64), String(repeating: "f", count: 64), String(repeating: "0123456789abcdef", count: 4), token(1)]
            + (0..<100).map { _ in randomHex(bytes: 32, using: &random) }
        for token in tokens {
            let key = TokenKey(token)
            #expect(key.isPacked, "\(token)")
            #expect(key.string == token)
            #expect(TokenKey(lowercasing: token) == key)
            #expect(TokenKey(lowercasing: token.uppercased()) == key)
            #expect(SlotIndex.hashBits(of: TokenKey(token)) == SlotIndex.hashBits(of: key))
        }
        #expect(TokenKey(token(1)) != TokenKey(token(2)))
    }

    @Test func everyByteValueAtEveryPositionOfASixtyFourCharacterToken() {
        let lowerHex = Set("0123456789abcdef".utf8)
        let upperHex = Set("ABCDEF".utf8)
        var wrong: [String] = []
        for position in 0..<64 {
            for byte in UInt8.min...UInt8.max {
                var digits = Array(String(repeating: "0123456789abcdef", count: 4).utf8)
                digits[position] = byte
                let text = String(decoding: digits, as: UTF8.self)
                let exact = TokenKey(text)
                let lowered = TokenKey(lowercasing: text)
                // Packed exactly when every byte is a hex digit (upper-case ones too when lower-casing), and always
                // the same text back.
                if exact.isPacked != lowerHex.contains(byte) || exact.string != text
                    || lowered.isPacked != (lowerHex.contains(byte) || upperHex.contains(byte)) || lowered.string != text.lowercased() {
                    wrong.append("byte \(byte) at \(position)")
                }
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(10))")
    }

    @Test func anyOtherStringIsKeptAsItIs() {
        var random = SeededGenerator(seed: 66)
        let long = [randomHex(bytes: 33, using: &random), randomHex(bytes: 64, using: &random), randomHex(bytes: 100, using: &random)]
        for token in long {
            #expect(!TokenKey(token).isPacked)
            #expect(TokenKey(token).string == token)
            #expect(TokenKey(lowercasing: token.uppercased()) == TokenKey(token))
        }
        // Upper case as given is another key (a String key was exact too); lower-casing finds the packed one.
        let upper = String(repeating: "AB", count: 32)
        #expect(!TokenKey(upper).isPacked)
        #expect(TokenKey(upper).string == upper)
        #expect(TokenKey(upper) != TokenKey(upper.lowercased()))
        #expect(TokenKey(lowercasing: upper).isPacked)
        #expect(TokenKey(lowercasing: upper).string == upper.lowercased())
        // 64 characters that are not all hex, and strings that are not tokens at all.
        for text in [String(repeating: "g", count: 64), String(repeating: "a", count: 63) + "\u{E9}", "", "ab", "not a token"] {
            #expect(!TokenKey(text).isPacked)
            #expect(TokenKey(text).string == text)
            #expect(TokenKey(lowercasing: text).string == text.lowercased())
        }
    }
}
