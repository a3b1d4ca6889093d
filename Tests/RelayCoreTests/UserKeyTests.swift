import Testing

@testable import RelayCore

@Suite("User keys: user ids compared and hashed as their UTF-8 bytes")
struct UserKeyTests {
    @Test("ids that Swift's String calls equal (NFC and NFD, composed and decomposed Hangul) are different keys, in sets and dictionaries too")
    func canonicalEquivalentsDiffer() {
        let pairs = [("caf\u{E9}", "cafe\u{301}"), ("\u{D55C}", "\u{1112}\u{1161}\u{11AB}"), ("\u{212B}", "\u{C5}")]
        for (first, second) in pairs {
            #expect(first == second, "String equality is canonical equivalence")
            #expect(UserKey(first) != UserKey(second))
            #expect(!UserKey.sameBytes(first, second))
            #expect(Set([UserKey(first), UserKey(second)]).count == 2)
            var badges: [UserKey: Int] = [:]
            badges[UserKey(first)] = 1
            badges[UserKey(second)] = 2
            #expect(badges[UserKey(first)] == 1 && badges[UserKey(second)] == 2)
        }
    }

    @Test("the same bytes are the same key with the same hash, however the string was made")
    func sameBytesSameKey() {
        let id = "user-\u{1F600}-42"
        let made = [
            String(decoding: Array(id.utf8), as: UTF8.self),
            String(("xx" + id).dropFirst(2)),
            "user-" + "\u{1F600}" + "-" + String(42),
            String(id.unicodeScalars.map(Character.init)),
        ]
        for other in made {
            #expect(UserKey(other) == UserKey(id))
            #expect(UserKey(other).hashValue == UserKey(id).hashValue)
            #expect(UserKey.sameBytes(other, id))
        }
    }

    @Test("keys differ when their bytes do: by length, by one byte, by case, by a trailing NUL; the empty id is a key of its own")
    func differentBytes() {
        let ids = ["", "a", "A", "ab", "a\u{0}", "ba", "\u{0}", "u-1", "u-10", "u-01"]
        for first in ids {
            for second in ids {
                #expect((UserKey(first) == UserKey(second)) == (first.utf8.elementsEqual(second.utf8)), "\(first.debugDescription) \(second.debugDescription)")
            }
        }
        #expect(Set(ids.map(UserKey.init)).count == ids.count)
    }

    @Test("random ids: equal keys exactly when their bytes are equal, and equal keys hash alike")
    func randomIds() {
        var random = SeededGenerator(seed: 9)
        // A small alphabet of one- to four-byte characters, so equal and near-equal ids come up often.
        let alphabet: [String] = ["a", "b", "\u{E9}", "e", "\u{301}", "\u{4E2D}", "\u{1F600}"]
        let ids = (0..<400).map { _ in
            (0..<Int.random(in: 0...3, using: &random)).map { _ in alphabet.randomElement(using: &random)! }.joined()
        }
        for (index, first) in ids.enumerated() {
            let second = ids[(index * 7 + 3) % ids.count]
            let equal = first.utf8.elementsEqual(second.utf8)
            #expect((UserKey(first) == UserKey(second)) == equal)
            if equal { #expect(UserKey(first).hashValue == UserKey(second).hashValue) }
        }
        #expect(Set(ids.map(UserKey.init)).count == Set(ids.map { Array($0.utf8) }).count)
    }

    @Test("a key describes itself as its id")
    func description() {
        #expect(UserKey("cafe\u{301}").description == "cafe\u{301}")
        #expect("\(UserKey("u-7"))" == "u-7")
        #expect(UserKey("u-7").id == "u-7")
    }
}
