import KafkaCore
import Testing

@testable import RelayCore

/// Priority classes and per-user shares through the engine: what a device and a user see, with APNs
/// holding every answer (a slow APNs is when waiting order matters).
@Suite("Priority and fair share in the engine")
struct RelayEngineFanOutTests {
    let events = TopicPartition("push.events", 0)

    func message(_ offset: Int64, _ value: String) -> KafkaMessage {
        KafkaMessage(topic: events.topic, partition: events.partition, offset: offset, key: nil, value: Array(value.utf8))
    }

    static func background(_ id: String, user: String, token: String) -> String {
        #"{"id":"\#(id)","user":"\#(user)","tokens":["\#(token)"],"apns":{"push_type":"background","payload":{"aps":{"content-available":1}}}}"#
    }

    static func alert(_ id: String, user: String, tokens: [String], seq: Int? = nil) -> String {
        let seqField = seq.map { #""seq":\#($0),"# } ?? ""
        return #"{"id":"\#(id)","user":"\#(user)",\#(seqField)"tokens":[\#(tokens.map { "\"\($0)\"" }.joined(separator: ","))],"apns":{"payload":{"aps":{"alert":"\#(id)"}}}}"#
    }

    /// An engine with `records` background pushes consumed (one user and device each) while APNs holds every answer.
    func floodedHarness(maxInFlight: Int, records: Int, seed: UInt64) -> EngineHarness {
        var harness = EngineHarness(configuration: .init(maxInFlight: maxInFlight), seed: seed)
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true
        for index in 0..<records {
            harness.run(harness.engine.consumed(message(Int64(index), Self.background("bg-\(index)", user: "b\(index)", token: token(index))),
                                                now: harness.now))
        }
        harness.settle()
        return harness
    }

    @Test("an alert read behind a flood of background pushes that fills the window is sent at once, before the flood's waiting sends")
    func alertPassesFlood() {
        var harness = floodedHarness(maxInFlight: 100, records: 300, seed: 21)
        #expect(harness.engine.parked.count == 210, "beyond the 90 records bulk may have in process, bulk records are set aside, decoded")
        let floodSent = harness.sent.count
        #expect(floodSent < 100, "background pushes fill the window up to the urgent reserve: \(floodSent) sent")
        harness.run(harness.engine.consumed(message(300, Self.alert("alert", user: "a", tokens: [token(1_000)])), now: harness.now))
        harness.settle()
        #expect(harness.sent.map(\.eventID).suffix(1) == ["alert"], "the alert is sent while 200 background pushes still wait")
        #expect(harness.engine.notificationsInFlight <= 100)
        harness.apnsSilent = false
        harness.settle()
        #expect(harness.results.filter { $0.status == .delivered }.count == 301)
    }

    @Test("one user with many devices and events holds at most its share of the window; other users' sends go at once")
    func hotUserHoldsItsShare() {
        var harness = EngineHarness(configuration: .init(maxInFlight: 100), seed: 22)
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true
        let hotDevices = (0..<20).map { token(5_000 + $0) }
        for seq in 1...50 {
            harness.run(harness.engine.consumed(message(Int64(seq - 1), Self.alert("hot-\(seq)", user: "hot", tokens: hotDevices, seq: seq)),
                                                now: harness.now))
        }
        for other in 0..<30 {
            harness.run(harness.engine.consumed(message(Int64(50 + other), Self.alert("o-\(other)", user: "o\(other)", tokens: [token(other)])),
                                                now: harness.now))
        }
        harness.settle()
        let othersSent = Set(harness.sent.map(\.eventID).filter { $0.hasPrefix("o-") })
        #expect(othersSent.count == 30, "every other user's alert is on the wire: \(othersSent.count)")
        #expect(harness.engine.notificationsInFlight <= 100)
        let hotInWindow = harness.engine.notificationsInFlight - 30
        #expect(hotInWindow <= 10, "the hot user holds \(hotInWindow), its share is 10")
        harness.apnsSilent = false
        harness.settle()
        #expect(harness.results.filter { $0.status == .delivered }.count == 50 * 20 + 30)
        for device in hotDevices {
            #expect(harness.received[device]?.count == 50, "every hot event reaches \(device)")
        }
        // Each device saw the hot user's alerts in seq order.
        let order = harness.sent.filter { $0.token == hotDevices[0] }.compactMap(\.seq)
        #expect(order == Array(1...50).map(Int64.init))
    }

    @Test("a user's urgent event takes the user's bulk events set aside along, in the order read; the device sees them in seq order")
    func urgentTakesItsUsersParkedRecords() {
        var feed = PartitionFeed(configuration: .init(maxInFlight: 10), seed: 23, partition: events)
        feed.harness.apnsSilent = true
        func consume(_ value: String) { feed.consume(value) }
        for index in 0..<20 { consume(Self.background("fill-\(index)", user: "f\(index)", token: token(index))) }
        let device = token(500)
        for seq in 1...3 {
            consume(#"{"id":"u-bg-\#(seq)","user":"u","seq":\#(seq),"badge":{"increment":1},"tokens":["\#(device)"],"apns":{"push_type":"background","priority":5,"payload":{"aps":{"content-available":1}}}}"#)
        }
        feed.harness.settle()
        #expect(feed.harness.engine.parked.hasRecords(of: "u"))
        consume(Self.alert("u-alert", user: "u", tokens: [device], seq: 4))
        feed.harness.settle()
        #expect(!feed.harness.engine.parked.hasRecords(of: "u"), "the user's records set aside started with its alert")
        feed.harness.apnsSilent = false
        feed.harness.settle()
        #expect(feed.harness.sent.filter { $0.token == device }.compactMap(\.seq) == [1, 2, 3, 4])
        #expect(feed.harness.received[device] == [1, 2, 3, nil], "badges in order (the alert carries none)")
        #expect(feed.harness.results.filter { $0.status == .delivered }.count == 24)
    }

    @Test("a revoke drops the records set aside: they stay open, the commit does not pass them")
    func revokeLeavesParkedRecordsOpen() {
        var harness = floodedHarness(maxInFlight: 5, records: 12, seed: 24)
        #expect(harness.engine.parked.count > 0)
        harness.apnsSilent = false
        harness.run(harness.engine.revokeRequested([events], id: 1, now: harness.now))
        harness.advance(by: 10_000)
        #expect(harness.engine.parked.isEmpty)
        #expect(harness.acknowledgedRevokes == [1])
        let delivered = harness.results.filter { $0.status == .delivered }.count
        #expect(delivered < 12, "records set aside were not sent by the leaving owner")
        #expect((harness.committed[events] ?? 0) <= Int64(delivered), "the commit stops at the first record left open")
    }

    @Test("records the sequencer holds for an earlier seq never keep that seq from starting: no gap is skipped for want of room")
    func heldRecordsDoNotBlockTheirGaps() {
        var harness = EngineHarness(configuration: .init(maxInFlight: 10), seed: 25)
        harness.run(harness.engine.assigned([events]))
        var offset: Int64 = 0
        func consume(user: String, seq: Int, device: String) {
            harness.run(harness.engine.consumed(message(offset, String(decoding: eventJSON(id: "\(user)-\(seq)", user: user, seq: seq, tokens: [device]), as: UTF8.self)),
                                                now: harness.now))
            offset += 1
        }
        // Nine users' seq 2 first: each held for its seq 1, as many as bulk may have in process.
        for user in 0..<9 { consume(user: "u\(user)", seq: 2, device: token(user)) }
        consume(user: "other", seq: 1, device: token(100))
        for user in 0..<9 { consume(user: "u\(user)", seq: 1, device: token(user)) }
        harness.settle()
        harness.advance(by: 500)
        #expect(harness.engine.counters.seqGapsSkipped == 0)
        for user in 0..<9 { #expect(harness.received[token(user)] == [1, 2], "u\(user)'s badges") }
        #expect(harness.engine.parked.isEmpty)
    }

    @Test("a bulk record of a user whose later seq the sequencer holds is not set aside behind a flood: it fills the gap within the reorder window, so its badge is applied in order")
    func parkedSeqIsNeverSkipped() {
        var feed = PartitionFeed(configuration: .init(reorderWindow: .seconds(2), maxInFlight: 10), seed: 26, partition: events)
        feed.harness.apnsSilent = true
        func consume(_ value: String) { feed.consume(value) }
        let device = token(700)
        consume(#"{"id":"u-1","user":"u","seq":1,"badge":{"set":5},"tokens":["\#(device)"]}"#)
        feed.harness.apnsSilent = false
        feed.harness.settle()
        feed.harness.apnsSilent = true
        // A flood of background pushes fills what bulk may have in process; more of it is set aside.
        for index in 0..<30 { consume(Self.background("fill-\(index)", user: "f\(index)", token: token(index))) }
        // Seq 3, an alert, is read before seq 2: held for it. Seq 2 clears the badge, a badge-only update (bulk).
        consume(#"{"id":"u-3","user":"u","seq":3,"badge":{"increment":1},"tokens":["\#(device)"],"apns":{"payload":{"aps":{"alert":"hi"}}}}"#)
        consume(#"{"id":"u-2","user":"u","seq":2,"badge":{"set":0},"tokens":["\#(device)"]}"#)
        feed.harness.settle()
        // APNs stays slow past the reorder window: the flood does not move.
        feed.harness.advance(by: 3_000)
        feed.harness.apnsSilent = false
        feed.harness.settle()
        feed.harness.advance(by: 3_000)
        #expect(feed.harness.engine.counters.seqGapsSkipped == 0, "seq 2 was skipped")
        #expect(feed.harness.received[device]?.last == 1, "the device's last badge: set 0, then +1 (got \(feed.harness.received[device] ?? []))")
        #expect(feed.harness.results.filter { $0.status == .delivered }.count == 33)
    }

    @Test("a record set aside keeps only its own bytes, not the 64 KiB chunk it was read in with its neighbours, and what it keeps is counted toward relay.read_ahead_bytes")
    func parkedRecordsKeepOnlyTheirBytes() {
        var harness = EngineHarness(configuration: .init(maxInFlight: 5), seed: 27)
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true
        // One read: 40 records packed in one shared chunk of 64 KiB, as the consumer packs them.
        let values = (0..<40).map { Array(Self.background("bg-\($0)", user: "b\($0)", token: token($0)).utf8) }
        var chunk: [UInt8] = []
        var bounds: [KafkaMessage.Bounds] = []
        for value in values {
            bounds.append(KafkaMessage.Bounds(start: chunk.count, count: value.count, present: true))
            chunk += value
        }
        chunk += [UInt8](repeating: 0, count: KafkaMessage.sharedBytesChunk - chunk.count)
        for (index, valueBounds) in bounds.enumerated() {
            let message = KafkaMessage(topic: events.topic, partition: events.partition, offset: Int64(index), bytes: chunk,
                                       keyBounds: .null, valueBounds: valueBounds, headers: [], timestamp: nil)
            harness.run(harness.engine.consumed(message, now: harness.now))
        }
        harness.settle()
        let parked = Array(harness.engine.parked.entries)
        #expect(parked.count > 20)
        #expect(parked.allSatisfy { $0.message.retainedBytes == ($0.message.value?.count ?? 0) }, "a record set aside keeps its chunk alive")
        #expect(parked.reduce(0) { $0 + $1.message.retainedBytes } <= harness.engine.parked.bytes, "what they keep is within what is counted")
        harness.apnsSilent = false
        harness.settle()
        #expect(harness.results.filter { $0.status == .delivered }.count == 40)
    }

    @Test("urgent records in process do not count toward bulk's share: with alerts filling the window, a background push read behind them is not set aside, and records set aside start as bulk ones finish")
    func urgentRecordsDoNotParkBulk() {
        var feed = PartitionFeed(configuration: .init(maxInFlight: 10), seed: 28, partition: events)
        feed.harness.apnsSilent = true
        for index in 0..<12 { feed.consume(Self.alert("alert-\(index)", user: "a\(index)", tokens: [token(index)])) }
        for index in 0..<3 { feed.consume(Self.background("bg-\(index)", user: "b\(index)", token: token(100 + index))) }
        feed.harness.settle()
        #expect(feed.harness.engine.parked.isEmpty, "bulk has nothing in process: its records start (\(feed.harness.engine.parked.count) set aside)")
        feed.harness.apnsSilent = false
        feed.harness.settle()
        #expect(feed.harness.results.filter { $0.status == .delivered }.count == 15)
    }

    @Test("property: bulk among urgent traffic (a tenth to nine tenths), read as a consumer reads it (nothing while paused), APNs answering in bursts: what is read ahead stays within relay.read_ahead_bytes plus one record, bulk set aside always gets going, and every record is delivered", arguments: UInt64(0)..<16)
    func readAheadHoldsOnTheEngine(seed: UInt64) {
        var random = SeededGenerator(seed: seed &* 104_729)
        let readAheadBytes = 12_000
        let bulkTenths = Int.random(in: 1...9, using: &random)
        var feed = PartitionFeed(configuration: .init(maxInFlight: 20, readAheadBytes: readAheadBytes), seed: seed, partition: events)
        let total = 300
        var consumed = 0
        var mostReadAhead = 0
        var bulk = 0
        while consumed < total {
            feed.harness.apnsSilent = Int.random(in: 0..<4, using: &random) != 0
            // A consumer reads a batch while the partitions are not paused.
            for _ in 0..<Int.random(in: 1...12, using: &random) where consumed < total && !feed.harness.engine.isPaused {
                let user = Int.random(in: 0..<40, using: &random)
                if Int.random(in: 0..<10, using: &random) < bulkTenths {
                    bulk += 1
                    feed.consume(Self.background("bg-\(consumed)", user: "b\(user)", token: token(1_000 + consumed)))
                } else {
                    feed.consume(Self.alert("al-\(consumed)", user: "a\(user)", tokens: [token(2_000 + consumed)]))
                }
                consumed += 1
                let engine = feed.harness.engine
                mostReadAhead = max(mostReadAhead, engine.fanOuts.waitingBytes + engine.parked.bytes)
            }
            feed.harness.settle()
            if feed.harness.apnsSilent && feed.harness.engine.isPaused && Int.random(in: 0..<2, using: &random) == 0 {
                feed.harness.apnsSilent = false
                feed.harness.settle()
            }
        }
        feed.harness.apnsSilent = false
        feed.harness.settle()
        feed.harness.advance(by: 5_000)
        #expect(mostReadAhead <= readAheadBytes + 8_192, "seed \(seed): read ahead \(mostReadAhead) bytes")
        #expect(feed.harness.engine.parked.isEmpty, "seed \(seed): records left set aside")
        #expect(feed.harness.results.filter { $0.status == .delivered }.count == total, "seed \(seed): \(bulk) bulk among \(total)")
    }

    @Test("a send-rate cap holds its app's background pushes to the rate, while alerts go at once; nothing fails, every push is delivered")
    func rateCap() {
        var configuration = RelayEngine.Configuration(maxInFlight: 1_000)
        configuration.rateLimits = [RateLimitRule(topic: nil, pushType: .background, perSecond: 20, burst: 5)]
        var harness = EngineHarness(configuration: configuration, seed: 26)
        harness.run(harness.engine.assigned([events]))
        for index in 0..<40 {
            harness.run(harness.engine.consumed(message(Int64(index), Self.background("bg-\(index)", user: "b\(index)", token: token(index))),
                                                now: harness.now))
        }
        harness.run(harness.engine.consumed(message(40, Self.alert("alert", user: "a", tokens: [token(1_000)])), now: harness.now))
        harness.settle()
        #expect(harness.sent.filter { $0.eventID.hasPrefix("bg-") }.count == 5, "the burst")
        #expect(harness.sent.contains { $0.eventID == "alert" }, "alerts are not capped, nor held behind the capped pushes")
        harness.advance(by: 1_000)
        let afterOneSecond = harness.sent.filter { $0.eventID.hasPrefix("bg-") }.count
        #expect(afterOneSecond >= 24 && afterOneSecond <= 25, "20 a second after the burst: \(afterOneSecond)")
        harness.advance(by: 1_000)
        #expect(harness.results.filter { $0.status == .delivered }.count == 41)
        #expect(harness.results.allSatisfy { $0.status == .delivered })
        #expect((harness.engine.counters.rateLimitWaits[RateLimitKey(topic: "com.example.app", pushType: .background)] ?? 0) > 0)
    }

    @Test("a broadcast in flight counts toward relay.max_in_flight: a fan-out behind it takes only the room left")
    func broadcastCountsInTheWindow() {
        var harness = EngineHarness(configuration: .init(maxInFlight: 3, urgentReserve: 0, maxInFlightPerUser: 3), seed: 27)
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true
        let channel = "AAECAwQFBgcICQoLDA0ODw=="
        harness.run(harness.engine.consumed(message(0, #"{"id":"b-1","apns":{"channel_id":"\#(channel)","push_type":"liveactivity","priority":5,"payload":{"aps":{"timestamp":1,"event":"update"}}}}"#),
                                            now: harness.now))
        harness.run(harness.engine.consumed(message(1, Self.alert("wide", user: "u", tokens: (0..<5).map(token))), now: harness.now))
        harness.settle()
        #expect(harness.sent.map(\.eventID) == ["b-1", "wide", "wide"], "the broadcast and two of the fan-out's five")
        #expect(harness.engine.notificationsInFlight == 3)
        harness.apnsSilent = false
        harness.settle()
        #expect(harness.results.filter { $0.status == .delivered }.count == 6)
    }
}

/// One events partition assigned to an engine harness, and its records consumed in offset order.
struct PartitionFeed {
    var harness: EngineHarness
    let partition: TopicPartition
    private var offset: Int64 = 0

    init(configuration: RelayEngine.Configuration, seed: UInt64, partition: TopicPartition) {
        harness = EngineHarness(configuration: configuration, seed: seed)
        self.partition = partition
        harness.run(harness.engine.assigned([partition]))
    }

    /// Consumes `value` at the next offset.
    mutating func consume(_ value: String) {
        let message = KafkaMessage(topic: partition.topic, partition: partition.partition, offset: offset, key: nil, value: Array(value.utf8))
        harness.run(harness.engine.consumed(message, now: harness.now))
        offset += 1
    }
}
