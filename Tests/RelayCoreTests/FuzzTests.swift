import Testing
@testable import RelayCore

/// Random inputs for the decoders: nothing crashes, and every refusal is a sentence that starts
/// with the name of the field (or `event`) it is about.
@Suite struct FuzzTests {
    private static let validEvent = Array("""
    {"id":"evt-7f3a","user":"u-42","seq":17,"tokens":["\(String(repeating: "a1", count: 32))"],"badge":{"increment":1},\
    "apns":{"topic":"com.example.app","push_type":"alert","priority":10,"expiration":1795000000,"collapse_id":"thread-9",\
    "payload":{"aps":{"alert":{"title":"Hi","body":"You have mail"},"sound":"default"},"thread":9}}}
    """.utf8)

    @Test func mutatedEventsAreDecodedOrRefusedByName() {
        let interesting = Array("{}[]\",:0123456789-.eE \\tnulfasr".utf8) + [0x00, 0xFF, 0xC3]
        var decodedCount = 0
        for seed in 0..<2_000 {
            var random = SeededGenerator(seed: UInt64(seed) &* 7_919)
            var bytes = Self.validEvent
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                let position = Int.random(in: 0..<bytes.count, using: &random)
                switch Int.random(in: 0..<3, using: &random) {
                case 0: bytes[position] = interesting.randomElement(using: &random) ?? 0
                case 1: bytes.remove(at: position)
                default: bytes.insert(interesting.randomElement(using: &random) ?? 0, at: position)
                }
                if bytes.isEmpty { bytes = [0x7B] }
            }
            do {
                let event = try PushEventDecoder().decode(bytes)
                decodedCount += 1
                #expect(!event.id.isEmpty && event.id.count <= 128, "seed \(seed)")
                #expect(event.badge != nil || event.apns != nil, "seed \(seed)")
            } catch {
                #expect(error.reason.hasPrefix(error.field.split(separator: "[").first.map(String.init) ?? error.field), "seed \(seed): \(error.reason)")
            }
        }
        #expect(decodedCount > 0)
    }

    private static func randomValue(depth: Int, using random: inout SeededGenerator) -> JSONValue {
        let choice = Int.random(in: 0..<(depth > 3 ? 4 : 6), using: &random)
        switch choice {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &random))
        case 2: return .integer(Int64.random(in: -1_000_000...1_000_000, using: &random))
        case 3:
            let scalars = (0..<Int.random(in: 0...8, using: &random)).compactMap { _ in
                Unicode.Scalar([0x22, 0x5C, 0x0A, 0x01, 0x41, 0xE9, 0x1F600, 0x7F][Int.random(in: 0..<8, using: &random)])
            }
            return .string(String(String.UnicodeScalarView(scalars)))
        case 4: return .array((0..<Int.random(in: 0...4, using: &random)).map { _ in randomValue(depth: depth + 1, using: &random) })
        default:
            return .object((0..<Int.random(in: 0...4, using: &random)).map { index in
                JSONMember("k\(index)", randomValue(depth: depth + 1, using: &random))
            })
        }
    }

    @Test func jsonWriteThenParseIsIdentity() throws {
        for seed in 0..<1_000 {
            var random = SeededGenerator(seed: UInt64(seed) &+ 99)
            let value = Self.randomValue(depth: 0, using: &random)
            #expect(try JSON.parse(JSON.serialize(value)) == value, "seed \(seed)")
        }
    }
}
