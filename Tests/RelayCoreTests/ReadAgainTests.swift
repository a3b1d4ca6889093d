import Testing

@testable import RelayCore

@Suite("Read again: what a partition's next owner reads again after the layout changed")
struct ReadAgainTests {
    /// Parses `text` and decodes it as one `read_again` element.
    private func decoded(_ text: String) throws -> ReadAgain? {
        ReadAgain.decode(try JSON.parse(Array(text.utf8)))
    }

    @Test("without a marker, everything from the committed offset on is read again and nothing before it")
    func withoutMarker() {
        let readAgain = ReadAgain(partition: 3, committed: 100, progress: nil)
        #expect(!readAgain.includes(.min) && !readAgain.includes(99))
        #expect(readAgain.includes(100) && readAgain.includes(101) && readAgain.includes(.max))
        // Nothing committed yet: from offset 0.
        #expect(ReadAgain(partition: 0, committed: 0, progress: nil).includes(0) && !ReadAgain(partition: 0, committed: 0, progress: nil).includes(-1))
    }

    @Test("with a marker, the records it calls finished are not read again; its open ones and everything past it are, from the committed offset on")
    func withMarker() {
        let marker = ProgressMarker(through: 20, open: [3, 12, 13, 18])
        let readAgain = ReadAgain(partition: 1, committed: 10, progress: marker)
        let included = (0...25).filter { readAgain.includes(Int64($0)) }
        #expect(included == [12, 13, 18, 21, 22, 23, 24, 25])
        // An open record below the committed offset was committed: not read again.
        #expect(!readAgain.includes(3))
    }

    @Test("only which records were finished is kept: the marker's device lists are left out")
    func devicesDoneLeftOut() {
        let digest = DeviceDigest(token: token(1))
        let marker = ProgressMarker(through: 9, open: [4, 7], devicesDone: [4: [digest]])
        let readAgain = ReadAgain(partition: 2, committed: 0, progress: marker)
        #expect(readAgain.progress == ProgressMarker(through: 9, open: [4, 7]))
        #expect(readAgain.progress?.devicesDone(at: 4) == [])
        #expect(marker.devicesDone(at: 4) == [digest])
        // The same records read again either way.
        #expect((Int64(0)...12).allSatisfy { readAgain.includes($0) == ReadAgain(partition: 2, committed: 0, progress: ProgressMarker(through: 9, open: [4, 7])).includes($0) })
    }

    @Test("written and read back: partition, committed offset and marker come back, with and without a marker, at the extremes of partition and offset")
    func roundTrip() throws {
        let entries = [
            ReadAgain(partition: 0, committed: 0, progress: nil),
            ReadAgain(partition: Int32.max, committed: Int64.max, progress: nil),
            ReadAgain(partition: 7, committed: -1, progress: ProgressMarker(through: -1, open: [])),
            ReadAgain(partition: 5, committed: 40, progress: ProgressMarker(through: 5_000, open: Array(0..<1_500) + [4_000])),
            ReadAgain(partition: 6, committed: 12, progress: ProgressMarker(through: 12, open: [12], devicesDone: [12: [DeviceDigest(token: token(2))]])),
        ]
        for entry in entries {
            let value = entry.encoded(at: 1_700_000_000_000)
            let root = try JSON.parse(value)
            #expect(ReadAgain.decode(root) == entry, "\(String(decoding: value, as: UTF8.self).prefix(120))")
            #expect(root["partition"]?.integerValue == Int64(entry.partition) && root["from"]?.integerValue == entry.committed)
            #expect((root["progress"] == nil) == (entry.progress == nil))
        }
    }

    @Test("random entries round-trip and read again exactly the same offsets")
    func randomRoundTrips() throws {
        var random = SeededGenerator(seed: 515)
        for _ in 0..<300 {
            let through = Int64.random(in: -1...400, using: &random)
            let open = (0..<Int.random(in: 0...30, using: &random)).map { _ in Int64.random(in: 0...420, using: &random) }
            let marker = Bool.random(using: &random) ? ProgressMarker(through: through, open: open) : nil
            let entry = ReadAgain(partition: Int32.random(in: 0...500, using: &random), committed: Int64.random(in: 0...300, using: &random), progress: marker)
            let back = try #require(ReadAgain.decode(try JSON.parse(entry.encoded(at: 0))))
            #expect(back == entry)
            #expect((Int64(-2)...450).allSatisfy { back.includes($0) == entry.includes($0) })
        }
    }

    @Test("an explicit null marker reads as none; extra members are ignored")
    func lenientParts() throws {
        #expect(try decoded(#"{"partition":4,"from":9,"progress":null}"#) == ReadAgain(partition: 4, committed: 9, progress: nil))
        #expect(try decoded(#"{"from":9,"partition":4,"note":"x"}"#) == ReadAgain(partition: 4, committed: 9, progress: nil))
        #expect(try decoded(#"{"partition":4,"from":9,"progress":{"through":3,"open":[1]}}"#)
            == ReadAgain(partition: 4, committed: 9, progress: ProgressMarker(through: 3, open: [1])))
    }

    @Test("what is not a read_again element is refused: a partition out of Int32's non-negative range, a missing or non-integer offset, a marker that does not read")
    func refused() throws {
        let refused = [
            #"{"from":9}"#,
            #"{"partition":4}"#,
            #"{"partition":-1,"from":9}"#,
            #"{"partition":2147483648,"from":9}"#,
            #"{"partition":"4","from":9}"#,
            #"{"partition":4,"from":9.5}"#,
            #"{"partition":4.5,"from":9}"#,
            #"{"partition":4,"from":"9"}"#,
            #"{"partition":4,"from":9223372036854775808}"#,
            #"{"partition":4,"from":9,"progress":"marker"}"#,
            #"{"partition":4,"from":9,"progress":{"open":[1]}}"#,
            #"{"partition":4,"from":9,"progress":{"through":3,"open":["1"]}}"#,
            #"{"partition":4,"from":9,"progress":{"exact":{"through":3,"runs":[1]}}}"#,
            #"[4,9]"#,
            #"null"#,
        ]
        for text in refused { #expect(try decoded(text) == nil, "\(text)") }
        #expect(try decoded(#"{"partition":2147483647,"from":-9223372036854775808}"#) == ReadAgain(partition: .max, committed: .min, progress: nil))
        // A whole number however written (JSON Schema's integer).
        #expect(try decoded(#"{"partition":4.0,"from":9e0}"#) == ReadAgain(partition: 4, committed: 9, progress: nil))
    }
}
