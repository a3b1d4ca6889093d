import Testing

@testable import RelayCore

@Suite("Progress marker: how far a partition's previous owner got")
struct ProgressMarkerTests {
    private func decode(_ text: String) throws(EventRejection) -> ProgressMarker {
        try ProgressMarker.decode(Array(text.utf8))
    }

    /// The marker an older relay reads from `value`: its `through` and `open` alone.
    private func legacyView(of value: [UInt8]) throws -> ProgressMarker {
        let root = try JSON.parse(value)
        let legacy = JSONValue.object([JSONMember("through", try #require(root["through"])), JSONMember("open", try #require(root["open"]))])
        return try ProgressMarker.decode(JSON.serialize(legacy))
    }

    @Test("open offsets in any order, repeated, or above through become ascending disjoint runs within through")
    func runsFromOffsets() {
        let marker = ProgressMarker(through: 20, open: [9, 3, 4, 3, 5, 20, 21, 30, 11, 10])
        #expect(marker.open == [3...5, 9...11, 20...20])
        #expect(marker.openCount == 7)
        #expect(ProgressMarker(through: 2, open: [3, 4]).open.isEmpty)
        #expect(ProgressMarker.runs(of: []) == [])
        #expect(ProgressMarker.runs(of: [1, 1, 2, 2, 4]) == [1...2, 4...4])
        #expect(ProgressMarker.runs(of: [.min, .min + 1, .max - 1, .max]) == [.min ... .min + 1, .max - 1 ... .max])
    }

    @Test("runs given overlapping or touching are merged, and clipped at through")
    func runsMergedAndClipped() {
        let marker = ProgressMarker(through: 50, runs: [1...3, 4...6, 5...9, 12...12, 13...20, 40...60, 70...80])
        #expect(marker.open == [1...9, 12...20, 40...50])
        #expect(ProgressMarker(through: .max, runs: [0...(.max)]).open == [0...(.max)])
        #expect(ProgressMarker(through: .max, runs: [0...5, 7...(.max)]).open == [0...5, 7...(.max)])
    }

    @Test("finished means at or below through and not open, at the edges of every run")
    func finished() {
        let marker = ProgressMarker(through: 100, open: [0, 10, 11, 12, 100])
        let finished = (-2...102).filter { marker.isFinished(Int64($0)) }
        #expect(finished == [-2, -1] + Array(1...9) + Array(13...99))
        let none = ProgressMarker(through: -1, open: [])
        #expect(!none.isFinished(0) && none.isFinished(-1) && none.isFinished(.min))
    }

    @Test("device lists are kept only for open records and only when not empty")
    func devicesDoneFiltered() {
        let one = DeviceDigest(token: token(1)), two = DeviceDigest(token: token(2))
        let marker = ProgressMarker(through: 10, open: [2, 5], devicesDone: [2: [one, two], 5: [], 7: [one], 11: [two]])
        #expect(marker.devicesDone == [2: [one, two]])
        #expect(marker.devicesDone(at: 2) == [one, two] && marker.devicesDone(at: 5) == [] && marker.devicesDone(at: 7) == [])
    }

    @Test("random markers round-trip exactly, open records and device lists, and agree with a set of open offsets")
    func randomRoundTrips() throws {
        var random = SeededGenerator(seed: 1_234)
        for round in 0..<300 {
            let through = Int64.random(in: -1...3_000, using: &random)
            // Sparse, dense or clustered open offsets, some above through.
            let density = [0.0, 0.01, 0.3, 0.9][round % 4]
            let open = (Int64(0)...through + 50).filter { _ in Double.random(in: 0..<1, using: &random) < density }
            var done: [Int64: [DeviceDigest]] = [:]
            for offset in open where Int.random(in: 0..<4, using: &random) == 0 {
                done[offset] = (0..<Int.random(in: 1...3, using: &random)).map { _ in DeviceDigest(token: randomHex(bytes: 32, using: &random)) }
            }
            let marker = ProgressMarker(through: through, open: open.shuffled(using: &random), devicesDone: done)
            let encoded = marker.encodedMeasured(at: Int64(round))
            #expect(encoded.droppedDeviceLists == 0 && encoded.loweredThrough == nil)
            let back = try ProgressMarker.decode(encoded.value)
            #expect(back == marker, "round \(round)")
            let openSet = Set(open.filter { $0 <= through })
            #expect(marker.openCount == Int64(openSet.count))
            #expect((Int64(-3)...through + 60).allSatisfy { marker.isFinished($0) == ($0 <= through && !openSet.contains($0)) }, "round \(round)")
            #expect(try JSON.parse(encoded.value)["updated_at"]?.integerValue == Int64(round))
            // An older relay reading the same value never calls finished what is not.
            let legacy = try legacyView(of: encoded.value)
            #expect((Int64(-3)...through + 60).allSatisfy { !legacy.isFinished($0) || marker.isFinished($0) }, "round \(round)")
        }
    }

    @Test("the older shape holds up to 1,000 open offsets as they are; from the 1,001st on, through is lowered just below it")
    func legacyShapeLimit() throws {
        let exactly = ProgressMarker(through: 5_000, open: (0..<1_000).map { Int64($0) * 3 })
        let exactRoot = try JSON.parse(exactly.encoded(at: 0))
        #expect(exactRoot["through"]?.integerValue == 5_000)
        #expect(try legacyView(of: exactly.encoded(at: 0)) == exactly)
        let oneMore = ProgressMarker(through: 5_000, open: (0..<1_001).map { Int64($0) * 3 })
        let legacy = try legacyView(of: oneMore.encoded(at: 0))
        #expect(legacy.through == 2_999 && legacy.openCount == 1_000)
        #expect(try decode(String(decoding: oneMore.encoded(at: 0), as: UTF8.self)) == oneMore)
    }

    @Test("a marker written by an older relay, or with a null exact part, is read from through and open alone")
    func olderShapes() throws {
        #expect(try decode(#"{"through":8,"open":[8,2,3]}"#) == ProgressMarker(through: 8, open: [2, 3, 8]))
        #expect(try decode(#"{"through":8,"open":[],"exact":null,"updated_at":1}"#) == ProgressMarker(through: 8, open: []))
        #expect(try decode(#"{"through":-1}"#) == ProgressMarker(through: -1, open: []))
        // The exact part wins over the older fields when both are there.
        #expect(try decode(#"{"through":3,"open":[],"exact":{"through":9,"runs":[4,2]}}"#) == ProgressMarker(through: 9, open: [4, 5]))
    }

    @Test("the exact part's runs: a start, then lengths and gaps (a zero gap joins the run before); a first start may be negative; done lists for offsets not open are dropped")
    func exactRuns() throws {
        #expect(try decode(#"{"exact":{"through":30,"runs":[2,3,1,1,10,2]}}"#).open == [2...4, 6...6, 17...18])
        #expect(try decode(#"{"exact":{"through":30,"runs":[2,3,0,1,10,2]}}"#).open == [2...5, 16...17])
        #expect(try decode(#"{"exact":{"through":5,"runs":[-3,2]}}"#).open == [-3 ... -2])
        #expect(try decode(#"{"exact":{"through":5,"runs":[]}}"#) == ProgressMarker(through: 5, open: []))
        let digest = DeviceDigest(token: token(9))
        let marker = try decode(#"{"exact":{"through":9,"runs":[1,1],"done":[[1,"\#(digest.text)"],[4,"\#(digest.text)"]]}}"#)
        #expect(marker.devicesDone == [1: [digest]])
        // Runs past through are clipped.
        #expect(try decode(#"{"exact":{"through":5,"runs":[4,10]}}"#).open == [4...5])
    }

    @Test("malformed markers are refused with a rejection of the progress field", arguments: [
        "", "not json", "[]", "null", #"{"open":[1]}"#, #"{"through":"5","open":[]}"#, #"{"through":5.5,"open":[]}"#,
        #"{"through":5,"open":[1,"2"]}"#, #"{"through":5,"open":[1.5]}"#, #"{"through":5,"open":[null]}"#,
        #"{"exact":{"runs":[1,1]}}"#, #"{"exact":{"through":5}}"#, #"{"exact":{"through":5,"runs":{}}}"#,
        #"{"exact":{"through":5,"runs":[1]}}"#, #"{"exact":{"through":5,"runs":[1,0]}}"#, #"{"exact":{"through":5,"runs":[1,-1]}}"#,
        #"{"exact":{"through":5,"runs":[1,1,-1,1]}}"#, #"{"exact":{"through":5,"runs":[1,"1"]}}"#,
        #"{"exact":{"through":5,"runs":[9223372036854775807,2]}}"#, #"{"exact":{"through":5,"runs":[1,1,9223372036854775806,1]}}"#,
        #"{"exact":{"through":5,"runs":[1,1],"done":[1]}}"#, #"{"exact":{"through":5,"runs":[1,1],"done":[[]]}}"#,
        #"{"exact":{"through":5,"runs":[1,1],"done":[["1","00000000000000ab"]]}}"#,
        #"{"exact":{"through":5,"runs":[1,1],"done":[[1,"ab"]]}}"#, #"{"exact":{"through":5,"runs":[1,1],"done":[[1,"00000000000000abc"]]}}"#,
        #"{"exact":{"through":5,"runs":[1,1],"done":[[1,"000000000000000g"]]}}"#, #"{"exact":{"through":5,"runs":[1,1],"done":[[1,171]]}}"#,
        #"{"exact":"yes"}"#,
        // A gap of Int64.max wraps past the runs before it (a marker that would claim records finished it never listed).
        #"{"exact":{"through":100,"runs":[3,1,9223372036854775807,1,5,2]}}"#,
        // The older shape's open offsets, present but not a list.
        #"{"through":5,"open":5}"#, #"{"through":5,"open":null}"#, #"{"through":5,"open":{}}"#,
    ])
    func refused(text: String) {
        let rejection = #expect(throws: EventRejection.self) { try decode(text) }
        #expect(rejection?.field == "progress")
    }

    @Test("device digests: 16 lower-case hex digits with leading zeros, read back in either case; anything else is not one")
    func deviceDigestText() {
        var random = SeededGenerator(seed: 16)
        let values: [UInt64] = [0, 1, 0xAB, .max, 1 << 63] + (0..<200).map { _ in random.next() >> (random.next() % 64) }
        for value in values {
            let digest = DeviceDigest(token: token(Int(value % 1_000)))
            #expect(DeviceDigest(text: digest.text) == digest)
            let text = String(value, radix: 16)
            let padded = String(repeating: "0", count: 16 - text.count) + text
            let read = DeviceDigest(text: padded)
            #expect(read?.value == value && read?.text == padded, "\(value)")
            #expect(DeviceDigest(text: padded.uppercased())?.value == value)
        }
        for text in ["", "0", String(repeating: "0", count: 15), String(repeating: "0", count: 17), "000000000000000g", "0x00000000000000", " 000000000000000",
                     "+fffffffffffffff", "-000000000000000", "+000000000000001"] {
            #expect(DeviceDigest(text: text) == nil, "\(text)")
        }
        #expect(DeviceDigest(text: "0000000000000001")! < DeviceDigest(text: "0000000000000002")!)
    }

    @Test("the open-record limit: the runs budget over two numbers of through's digits and two commas; negative through counts as one digit")
    func openRecordLimit() {
        #expect(ProgressMarker.openRecordLimit(through: 9, runsBudget: 400) == 100)
        #expect(ProgressMarker.openRecordLimit(through: 10, runsBudget: 400) == 66)
        #expect(ProgressMarker.openRecordLimit(through: -50, runsBudget: 400) == 100)
        #expect(ProgressMarker.openRecordLimit(through: .max, runsBudget: 400) == 10)
        #expect(ProgressMarker.openRecordLimit(through: 9_999_999) == ProgressMarker.runsBudget / 16)
    }

    @Test("a marker with as many isolated open records as the limit allows, spread up to through, keeps its runs and through")
    func limitFits() throws {
        let through: Int64 = 9_999_999
        let limit = ProgressMarker.openRecordLimit(through: through)
        let step = through / Int64(limit)
        let open = (0..<Int64(limit)).map { $0 * step + step / 2 }
        let marker = ProgressMarker(through: through, open: open)
        let encoded = marker.encodedMeasured(at: 0)
        #expect(encoded.loweredThrough == nil && encoded.value.count <= ProgressMarker.maximumBytes)
        #expect(try ProgressMarker.decode(encoded.value) == marker)
    }
}
