import Foundation
import Testing

@testable import RelayCore

@Suite("JSON object writer and the compact writer: what they write, and that every reader reads it back")
struct JSONObjectWriterTests {
    /// How a JSON string literal is written, spelled out byte by byte: `"` and `\` escaped, `\n` `\r` `\t` short,
    /// other controls as `\u00xx` (lower-case hex), everything else (DEL, `/`, non-ASCII) as it is.
    static func escaped(_ text: String) -> [UInt8] {
        var out: [UInt8] = [0x22]
        for byte in text.utf8 {
            switch byte {
            case 0x22: out += [0x5C, 0x22]
            case 0x5C: out += [0x5C, 0x5C]
            case 0x0A: out += Array(#"\n"#.utf8)
            case 0x0D: out += Array(#"\r"#.utf8)
            case 0x09: out += Array(#"\t"#.utf8)
            case 0x00..<0x20: out += Array(String(format: "\\u%04x", byte).utf8)
            default: out.append(byte)
            }
        }
        return out + [0x22]
    }

    /// What Foundation's reader makes of `bytes`.
    static func foundation(_ bytes: [UInt8]) throws -> Any {
        try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
    }

    @Test("an object with no member is {}, whatever room it was given")
    func empty() {
        for capacity in [0, 1, 16, 512] {
            var writer = JSONObjectWriter(capacity: capacity)
            #expect(writer.finish() == Array("{}".utf8))
        }
    }

    @Test("members are written in the order given, compactly: strings, integers, booleans, nulls for absent values, raw JSON as it is; a repeated name is written again")
    func members() {
        var writer = JSONObjectWriter()
        writer.string("id", "e-1")
        writer.integer("n", -5)
        writer.boolean("ok", true)
        writer.boolean("no", false)
        writer.string("user", nil)
        writer.integer("seq", nil)
        writer.raw("open", JSON.serialize(.array([.integer(1), .integer(2)])))
        writer.raw("obj", Array(#"{"a":{"b":null}}"#.utf8))
        writer.string("id", "")
        #expect(String(decoding: writer.finish(), as: UTF8.self)
            == #"{"id":"e-1","n":-5,"ok":true,"no":false,"user":null,"seq":null,"open":[1,2],"obj":{"a":{"b":null}},"id":""}"#)
    }

    @Test("every control character is escaped (short forms for tab, newline, return), quote and backslash too; DEL and slash are not; both readers read each back")
    func controlCharacters() throws {
        for byte in UInt8(0x00)...0x7F {
            let text = String(decoding: [UInt8(ascii: "a"), byte, UInt8(ascii: "z")], as: UTF8.self)
            var writer = JSONObjectWriter(capacity: 0)
            writer.string("s", text)
            let value = writer.finish()
            #expect(value == Array(#"{"s":"#.utf8) + Self.escaped(text) + [UInt8(ascii: "}")], "byte \(byte)")
            #expect(try JSON.parse(value)["s"] == .string(text), "byte \(byte)")
            let read = try #require(try Self.foundation(value) as? [String: Any])
            #expect((read["s"] as? String)?.utf8.elementsEqual(text.utf8) == true, "byte \(byte)")
        }
        var writer = JSONObjectWriter()
        writer.string("s", "\u{0}\u{1}\u{8}\u{9}\u{A}\u{B}\u{C}\u{D}\u{1B}\u{1F}\"\\/\u{7F}")
        #expect(String(decoding: writer.finish(), as: UTF8.self) == #"{"s":"\u0000\u0001\u0008\t\n\u000b\u000c\r\u001b\u001f\"\\/"# + "\u{7F}\"}")
    }

    @Test("non-ASCII text is written as its UTF-8 bytes, unescaped, and read back byte for byte")
    func nonASCII() throws {
        for text in ["caf\u{E9}", "cafe\u{301}", "\u{4E2D}\u{6587}", "\u{1F600}\u{1F1EB}\u{1F1F7}", "\u{FFFF}\u{10FFFF}", "\u{2028}\u{2029}", "\u{FEFF}x"] {
            var writer = JSONObjectWriter()
            writer.string("s", text)
            let value = writer.finish()
            #expect(value == Array(#"{"s":""#.utf8) + Array(text.utf8) + Array(#""}"#.utf8))
            guard case .string(let back)? = try JSON.parse(value)["s"] else {
                Issue.record("no string read back for \(text.debugDescription)")
                continue
            }
            #expect(back.utf8.elementsEqual(text.utf8))
            // Foundation's strings drop a leading byte-order mark: not a question of what was written.
            if text.hasPrefix("\u{FEFF}") { continue }
            let read = try #require(try Self.foundation(value) as? [String: Any])
            #expect((read["s"] as? String)?.utf8.elementsEqual(text.utf8) == true, "\(text.debugDescription)")
        }
    }

    @Test("integers are written as Int64's decimal text at every number of digits and at both ends of its range, and read back by both readers")
    func integers() throws {
        var values: [Int64] = [0, 1, -1, 9, -9, 10, -10, .max, .min, .max - 1, .min + 1]
        var power: Int64 = 1
        for _ in 0..<18 {
            power *= 10
            values += [power - 1, power, power + 1, -power + 1, -power, -power - 1]
        }
        var random = SeededGenerator(seed: 1_010)
        values += (0..<2_000).map { _ in Int64(bitPattern: random.next()) >> Int64.random(in: 0...63, using: &random) }
        for value in values {
            var writer = JSONObjectWriter(capacity: 0)
            writer.integer("n", value)
            let bytes = writer.finish()
            #expect(bytes == Array("{\"n\":\(value)}".utf8))
            #expect(try JSON.parse(bytes)["n"]?.integerValue == value)
            var appended = Array("x".utf8)
            JSON.writeInteger(value, into: &appended)
            #expect(appended == Array("x\(value)".utf8))
            let read = try #require(try Self.foundation(bytes) as? [String: Any])
            #expect((read["n"] as? NSNumber)?.int64Value == value, "\(value)")
        }
    }

    @Test("random records, past any room given up front: the same bytes as the serializer writes for the same members, and Foundation reads every member back")
    func randomRecordsAgreeWithTheSerializer() throws {
        var random = SeededGenerator(seed: 31_337)
        var noisy = NoisyJSON(random: SeededGenerator(seed: 31_338))
        let names: [StaticString] = ["id", "user", "token", "reason", "n", "ok", "raw"]
        for round in 0..<400 {
            var writer = JSONObjectWriter(capacity: Int.random(in: 0...64, using: &random))
            var members: [JSONMember] = []
            for _ in 0..<Int.random(in: 0...12, using: &random) {
                let index = Int.random(in: 0..<names.count, using: &random)
                let name = names[index]
                let key = "\(name)"
                switch index {
                case 0...3:
                    // Now and then long, so the writer outgrows its room mid-member.
                    let text: String? = Int.random(in: 0..<5, using: &random) == 0 ? nil
                        : Int.random(in: 0..<4, using: &random) == 0 ? String(repeating: noisy.string(), count: 40) : noisy.string()
                    writer.string(name, text)
                    members.append(JSONMember(key, text.map { .string($0) } ?? .null))
                case 4:
                    let value: Int64? = Bool.random(using: &random) ? Int64(bitPattern: random.next()) : nil
                    writer.integer(name, value)
                    members.append(JSONMember(key, value.map { .integer($0) } ?? .null))
                case 5:
                    let flag = Bool.random(using: &random)
                    writer.boolean(name, flag)
                    members.append(JSONMember(key, .bool(flag)))
                default:
                    let value = noisy.value()
                    writer.raw(name, JSON.serialize(value))
                    members.append(JSONMember(key, value))
                }
            }
            let bytes = writer.finish()
            #expect(bytes == JSON.serialize(.object(members)), "round \(round)")
            #expect(try JSON.parse(bytes) == .object(members), "round \(round)")
            // Foundation keeps the last of repeated names; strings must come back byte for byte.
            let read = try #require(try Self.foundation(bytes) as? [String: Any], "round \(round)")
            for member in members where members.last(where: { $0.key == member.key })?.value == member.value {
                if case .string(let text) = member.value {
                    #expect((read[member.key] as? String)?.utf8.elementsEqual(text.utf8) == true, "round \(round) \(member.key)")
                }
                if case .null = member.value { #expect(read[member.key] is NSNull, "round \(round) \(member.key)") }
            }
        }
    }

    @Test("the string writer escapes exactly as spelled out wherever the byte to escape falls around its eight-byte words, appending after what is there")
    func stringWriterAtEveryPosition() {
        let specials = ["\"", "\\", "\n", "\r", "\t", "\u{0}", "\u{7}", "\u{1F}", "\u{7F}", "/", "\u{E9}", "\u{1F600}"]
        for length in 0..<26 {
            for special in specials {
                for position in 0...length {
                    let text = String(repeating: "x", count: position) + special + String(repeating: "y", count: length - position)
                    var out = Array("prefix".utf8)
                    JSON.writeString(text, into: &out)
                    #expect(out == Array("prefix".utf8) + Self.escaped(text), "\(text.debugDescription)")
                }
            }
            // Nothing to escape: the text as it is, in quotes.
            var plain: [UInt8] = []
            JSON.writeString(String(repeating: "q", count: length), into: &plain)
            #expect(plain == [0x22] + Array(repeating: UInt8(ascii: "q"), count: length) + [0x22])
        }
        #expect(JSON.escapedBound(0) == 2 && JSON.escapedBound(10) == 62)
        // The bound holds at the worst case: every byte a control character.
        var worst: [UInt8] = []
        JSON.writeString(String(repeating: "\u{1}", count: 100), into: &worst)
        #expect(worst.count == JSON.escapedBound(100))
    }

    @Test("the serializer writes trees compactly, members in order, numbers as their literal text")
    func serializer() throws {
        let tree = JSONValue.object([
            JSONMember("b", .array([.null, .bool(true), .bool(false), .number("-0.5e-3"), .number("12"), .array([]), .object([])])),
            JSONMember("a", .string("x\"y")),
            JSONMember("b", .object([JSONMember("", .integer(.min))])),
        ])
        let bytes = JSON.serialize(tree)
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"b":[null,true,false,-0.5e-3,12,[],{}],"a":"x\"y","b":{"":-9223372036854775808}}"#)
        var appended = Array("[".utf8)
        JSON.write(tree, into: &appended)
        #expect(appended == Array("[".utf8) + bytes)
        #expect(JSON.serialize(.string("")) == Array(#""""#.utf8) && JSON.serialize(.null) == Array("null".utf8))
        #expect(try Self.foundation(bytes) is [String: Any])
    }
}
