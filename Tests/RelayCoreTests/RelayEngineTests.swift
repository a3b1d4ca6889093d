import APNsCore
import KafkaCore
import Testing

@testable import RelayCore

@Suite("Relay engine")
struct RelayEngineTests {
    let events = TopicPartition("push.events", 0)

    @Test("the flicker burst: a device sees non-decreasing badges ending at 10, every event has a result, the commit reaches the end", arguments: 0..<20)
    func flicker(seed: Int) {
        var harness = EngineHarness(seed: UInt64(seed))
        let device = token(7)
        _ = harness.engine.deviceRecord(key: slice(Array(device.utf8)), value: slice(registrationValue(user: "u-1")))
        harness.run(harness.engine.assigned([events]))
        for (offset, seq) in [1, 3, 2, 4, 10, 8, 5, 6, 7, 9].enumerated() {
            let message = KafkaMessage(topic: events.topic, partition: 0, offset: Int64(offset), key: Array("u-1".utf8), value: eventJSON(id: "e\(seq)", user: "u-1", seq: seq))
            harness.run(harness.engine.consumed(message, now: harness.now))
            if seed % 2 == 0 { harness.settle() }
        }
        harness.settle()
        let badges = harness.received[device, default: []].compactMap { $0 }
        #expect(badges == badges.sorted(), "non-decreasing: \(badges)")
        #expect(badges.last == 10)
        #expect(Set(harness.results.map(\.eventID)).count == 10)
        #expect(harness.results.allSatisfy { $0.status == .delivered || $0.status == .superseded })
        #expect(harness.committed[events] == 10)
        // The newest event applied to the user is seq 9's record, offset 9 (seq 10 waited at offset 4).
        #expect(harness.changelog.last?.record == BadgeStateRecord(badge: 10, seq: 10, offset: 9, updatedAt: harness.now.epoch))
    }

    @Test("duplicates, malformed events, no devices, explicit tokens and a dead token")
    func outcomes() {
        var harness = EngineHarness(seed: 42)
        let live = token(1)
        let dead = token(2)
        harness.deadTokens = [dead]
        _ = harness.engine.deviceRecord(key: slice(Array(live.utf8)), value: slice(registrationValue(user: "u-1")))
        _ = harness.engine.deviceRecord(key: slice(Array(dead.utf8)), value: slice(registrationValue(user: "u-1")))
        harness.run(harness.engine.assigned([events]))
        let inputs: [[UInt8]] = [
            eventJSON(id: "a", user: "u-1", seq: 1),
            eventJSON(id: "a-again", user: "u-1", seq: 1),
            Array("{not json".utf8),
            eventJSON(id: "b", user: "u-nobody", seq: 1),
            eventJSON(id: "c", user: "u-2", seq: nil, tokens: [token(3)]),
        ]
        for (offset, value) in inputs.enumerated() {
            harness.run(harness.engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: Int64(offset), key: nil, value: value), now: harness.now))
            harness.settle()
        }
        let byEvent = Dictionary(grouping: harness.results, by: \.eventID)
        #expect(Set(byEvent["a"]?.map(\.status) ?? []) == [.delivered, .unregistered])
        #expect(byEvent["a-again"]?.map(\.status) == [.duplicate])
        #expect(byEvent["b"]?.map(\.status) == [.noDevices])
        #expect(byEvent["c"]?.map(\.status) == [.delivered])
        #expect(byEvent["offset-2"]?.map(\.status) == [.invalid])
        #expect(harness.deadLetters.count == 1)
        #expect(harness.failedTokens.map(\.token) == [dead])
        #expect(harness.failedTokens.first?.user == "u-1")
        // The dead token no longer receives the user's later events.
        harness.run(harness.engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: 5, key: nil, value: eventJSON(id: "d", user: "u-1", seq: 2)), now: harness.now))
        harness.settle()
        #expect(harness.results.filter { $0.eventID == "d" }.map(\.token) == [live])
        #expect(harness.committed[events] == 6)
        #expect(harness.engine.counters.eventsDuplicate == 1)
        #expect(harness.engine.counters.eventsInvalid == 1)
    }

    @Test("delivered in the other environment: the result names it, the token stays registered, and a wrong-environment record names who was wrong")
    func deliveredInTheOtherEnvironment() {
        var harness = EngineHarness(configuration: RelayEngine.Configuration(defaultTopic: "com.example.app"), seed: 4)
        let registered = token(1)
        let given = token(2)
        harness.otherEnvironmentTokens = [registered, given]
        _ = harness.engine.deviceRecord(key: slice(Array(registered.utf8)), value: slice(registrationValue(user: "u-1")))
        harness.run(harness.engine.assigned([events]))
        for (offset, value) in [eventJSON(id: "a", user: "u-1", seq: 1), eventJSON(id: "b", user: "u-2", seq: 1, tokens: [given])].enumerated() {
            harness.run(harness.engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: Int64(offset), key: nil, value: value), now: harness.now))
            harness.settle()
        }
        #expect(harness.results.map(\.status) == [.delivered, .delivered])
        #expect(harness.results.allSatisfy { $0.environment == .sandbox && $0.apnsUniqueID == "log-1" && $0.attempts == 2 })
        #expect(harness.failedTokens.isEmpty)
        #expect(harness.engine.registry.registration(for: registered)?.environment == .production, "the registry is its owner's to correct")
        let records = Dictionary(harness.wrongEnvironment.map { ($0.token, $0) }) { first, _ in first }
        #expect(records[registered] == WrongEnvironmentRecord(token: registered, user: "u-1", topic: "com.example.app", environment: .sandbox,
                                                              wrongEnvironment: .production, source: .registration, eventID: "a", at: harness.now.epoch))
        #expect(records[given] == WrongEnvironmentRecord(token: given, user: "u-2", topic: "com.example.app", environment: .sandbox,
                                                         wrongEnvironment: .production, source: .event, eventID: "b", at: harness.now.epoch))
        #expect(harness.committed[events] == 2)
    }

    @Test("a notification breaking Apple's rules is an invalid result at fan-out, naming the field; nothing is sent")
    func appleRulesAtFanOut() {
        var harness = EngineHarness(configuration: RelayEngine.Configuration(defaultTopic: "com.example.app"), seed: 3)
        harness.run(harness.engine.assigned([events]))
        // VoIP needs a topic ending in .voip; the configured one has none.
        let voip = Array("{\"id\":\"v\",\"tokens\":[\"\(token(1))\"],\"apns\":{\"push_type\":\"voip\",\"payload\":{\"aps\":{}}}}".utf8)
        let alert = Array("{\"id\":\"a\",\"tokens\":[\"\(token(2))\"],\"apns\":{\"payload\":{\"aps\":{}}}}".utf8)
        for (offset, value) in [voip, alert].enumerated() {
            harness.run(harness.engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: Int64(offset), key: nil, value: value), now: harness.now))
            harness.settle()
        }
        #expect(harness.results.map(\.status) == [.invalid, .delivered])
        #expect(harness.results.first?.reason == "apns-topic must end with .voip for this push type")
        #expect(harness.results.first?.token == token(1))
        #expect(harness.sent.map(\.token) == [token(2)])
        #expect(harness.sent.first?.notification.topic == "com.example.app")
        #expect(harness.committed[events] == 2)
    }

    @Test("an event's payload is rendered once for all its devices: one buffer shared by their notifications; over the limit, one invalid result per device")
    func payloadRenderedOncePerEvent() {
        var harness = EngineHarness(configuration: RelayEngine.Configuration(defaultTopic: "com.example.app"), seed: 5)
        harness.run(harness.engine.assigned([events]))
        let shared = Array("{\"id\":\"s\",\"tokens\":[\"\(token(1))\",\"\(token(2))\",\"\(token(3))\"],\"apns\":{\"payload\":{\"aps\":{\"alert\":\"hi\"}}}}".utf8)
        harness.run(harness.engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: 0, key: nil, value: shared), now: harness.now))
        let payloads = harness.sent.map(\.notification.payload)
        #expect(payloads.count == 3)
        #expect(Set(payloads.map { String(decoding: $0, as: UTF8.self) }) == [#"{"aps":{"alert":"hi"}}"#])
        #expect(Set(payloads.map { $0.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) } }).count == 1)
        harness.settle()
        // 4,096 bytes with the provisional badge 0 the decoder checks; the count 10 makes it 4,097 at fan-out, for
        // every device alike.
        let tooLarge = Array("{\"id\":\"l\",\"user\":\"u-big\",\"seq\":1,\"badge\":{\"increment\":10},\"tokens\":[\"\(token(4))\",\"\(token(5))\"],\"apns\":{\"payload\":{\"aps\":{\"alert\":\"\(String(repeating: "x", count: 4_066))\"}}}}".utf8)
        harness.run(harness.engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: 1, key: nil, value: tooLarge), now: harness.now))
        harness.settle()
        let rejected = harness.results.filter { $0.eventID == "l" }
        #expect(rejected.map(\.token) == [token(4), token(5)])
        #expect(rejected.allSatisfy { $0.status == .invalid && $0.reason == "apns.payload is 4,097 bytes, the limit for push_type alert is 4,096" })
    }

    @Test("without a topic in the event, the registration or the configuration, the result is invalid and says where to set one")
    func noTopicAnywhere() throws {
        let event = try PushEventDecoder().decode(Array("{\"id\":\"e\",\"tokens\":[\"\(token(1))\"],\"apns\":{\"payload\":{\"aps\":{}}}}".utf8))
        #expect(throws: EventRejection(field: "apns.topic", reason: "no apns-topic: set apns.topic in the event, the device registration or the configuration")) {
            try event.render(for: token(1), badge: nil, defaultTopic: nil)
        }
        let notification = try event.render(for: token(1), badge: nil, defaultTopic: "com.example.app")
        #expect(notification.topic == "com.example.app" && notification.token?.hex == token(1))
    }

    @Test("events wait for the partition's restore and continue from the restored state")
    func restoreFirst() {
        var engine = RelayEngine(configuration: RelayEngine.Configuration().withTestTopic)
        let effects = engine.assigned([events])
        #expect(effects.contains { if case .restore(events, _) = $0 { return true } else { return false } })
        // An event arriving during restore waits: no changelog append yet.
        let waiting = engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: 0, key: nil, value: eventJSON(id: "x", user: "u-1", seq: 4)), now: 0)
        #expect(!waiting.contains { if case .appendChangelog = $0 { return true } else { return false } })
        let state = BadgeStateRecord(badge: 3, seq: 3, updatedAt: 0).encoded()
        let after = engine.restored(events, records: [(key: Array("u-1".utf8), value: state)], now: 0)
        let appended = after.compactMap { effect -> BadgeStateRecord? in
            if case .appendChangelog(_, let record, _, _) = effect { return record } else { return nil }
        }
        #expect(appended == [BadgeStateRecord(badge: 4, seq: 4, offset: 0, updatedAt: 0)])
    }

    @Test("a stored change fans out without copying the partition's offset table (one copy per record made each record cost the whole window)")
    func changeloggedUpdatesOffsetsInPlace() {
        var engine = RelayEngine(configuration: RelayEngine.Configuration().withTestTopic)
        _ = engine.assigned([events])
        _ = engine.restored(events, records: [], now: 0)
        // 64 users' first events: each waits for its badge change to be stored.
        var tokens: [UInt64] = []
        for offset in 0..<64 {
            let effects = engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: Int64(offset), key: nil,
                value: eventJSON(id: "e\(offset)", user: "u-\(offset)", seq: 1, tokens: [String(format: "%064x", offset + 1)])), now: 0)
            tokens += effects.compactMap { if case .appendChangelog(_, _, _, let token) = $0 { return token } else { return nil } }
        }
        #expect(tokens.count == 64)
        let before = engine.offsetTableAddress(of: events)
        #expect(before != nil)
        // Offset 0 stays pending, so nothing passes the commit point and the table neither grows nor moves.
        var dispatches: [DeviceDispatch<PendingNotification>] = []
        for token in tokens.dropFirst() {
            dispatches += engine.changelogged(token, now: 0).compactMap { if case .send(let dispatch) = $0 { return dispatch } else { return nil } }
            #expect(engine.offsetTableAddress(of: events) == before, "the offset table was copied to fan out an event")
        }
        #expect(dispatches.count == 63)
        // Nor to answer a send, nor to finish a published result.
        for dispatch in dispatches {
            let published = engine.sent(dispatch, outcome: .delivered(), now: 0)
                .compactMap { if case .publishResult(_, let reference) = $0 { return reference } else { return nil } }
            #expect(engine.offsetTableAddress(of: events) == before, "the offset table was copied to answer a send")
            for reference in published { _ = engine.published(reference, now: 0) }
            #expect(engine.offsetTableAddress(of: events) == before, "the offset table was copied to finish a result")
        }
    }

    @Test("after a crash a redelivered record at or below its user's offset is sent again with the current badge; beyond it a seq at or below the last is a duplicate")
    func redeliveriesAfterCrash() {
        var engine = RelayEngine(configuration: RelayEngine.Configuration().withTestTopic)
        _ = engine.assigned([events])
        // The previous owner applied seqs 1...5 of u-1 (badge 5), the newest at offset 4, and
        // crashed before its results; no progress marker covers them. The new owner reads seqs 3,
        // 6, 5 at offsets 2...4, then a producer's duplicate of 5 at offset 5.
        let state = BadgeStateRecord(badge: 5, seq: 5, offset: 4, updatedAt: 0).encoded()
        _ = engine.restored(events, records: [(key: Array("u-1".utf8), value: state)], now: 0)
        func consume(_ offset: Int64, seq: Int) -> [RelayEffect] {
            engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: offset, key: nil,
                                         value: eventJSON(id: "e\(seq)", user: "u-1", seq: seq, tokens: ["aa" + String(repeating: "0", count: 62)])), now: 0)
        }
        func sentBadges(_ effects: [RelayEffect]) -> [Int64?] {
            effects.compactMap { if case .send(let dispatch) = $0 { return dispatch.notification.badge } else { return nil } }
        }
        func results(_ effects: [RelayEffect]) -> [DeliveryStatus] {
            effects.compactMap { if case .publishResult(let record, _) = $0 { return record.status } else { return nil } }
        }
        // seq 3: applied before; not applied again: the user's state is written unchanged, and
        // once that is stored it is sent again with the current badge (in order behind the user's
        // changes still being stored).
        let replay3 = consume(2, seq: 3)
        let rewritten = replay3.compactMap { effect -> (BadgeStateRecord, UInt64)? in
            if case .appendChangelog(_, let record, _, let token) = effect { return (record, token) } else { return nil }
        }
        #expect(rewritten.map(\.0) == [BadgeStateRecord(badge: 5, seq: 5, offset: 4, updatedAt: 0)])
        #expect(sentBadges(replay3).isEmpty)
        #expect(sentBadges(engine.changelogged(rewritten[0].1, now: 0)) == [5])
        // seq 6 was never applied (it waited for 5 at the previous owner): applied now.
        let new6 = consume(3, seq: 6)
        #expect(new6.contains { if case .appendChangelog(_, let record, _, _) = $0 { return record.seq == 6 } else { return false } })
        // seq 5 at offset 4 (the user's offset): applied before; it waits behind the device's
        // notification in flight, so no send effect yet, and no duplicate result.
        let replay5 = consume(4, seq: 5)
        #expect(results(replay5).isEmpty)
        #expect(engine.counters.eventsReplayed == 2)
        #expect(engine.counters.eventsDuplicate == 0)
        // Beyond the user's offset, a seq at or below the last is a producer's duplicate.
        let duplicate = consume(5, seq: 5)
        #expect(results(duplicate) == [.duplicate])
        #expect(engine.counters.eventsDuplicate == 1)
        #expect(engine.counters.eventsApplied == 1)
        // Every record read is unfinished (sends in flight or waiting), so the marker claims none.
        #expect(engine.progress(of: events) == ProgressMarker(through: 5, open: [2, 3, 4, 5]))
    }

    @Test("the progress marker never claims a record held for a seq gap: applied after the marker and then lost in a crash, it is processed again")
    func progressMarkerCoversHeldRecords() throws {
        var harness = EngineHarness(configuration: .init(), seed: 3)
        harness.run(harness.engine.assigned([events]))  // restores at once (empty changelog)
        let now = harness.now
        func consume(_ offset: Int64, user: String, seq: Int) -> [RelayEffect] {
            harness.engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: offset, key: nil,
                                                 value: eventJSON(id: "\(user)-\(seq)", user: user, seq: seq, tokens: [token(user == "u-1" ? 7 : 8)])), now: now)
        }
        // Offset 0: u-1 seq 2, held for seq 1. Offset 1: u-2 seq 1, applied, sent and published.
        harness.run(consume(0, user: "u-1", seq: 2))
        harness.run(consume(1, user: "u-2", seq: 1))
        harness.settle()
        #expect(harness.progress[0] == ProgressMarker(through: 1, open: [0]))
        #expect(harness.progress[0]?.isFinished(0) == false)
        #expect(harness.progress[0]?.isFinished(1) == true)
        // Once applied and published, the marker moves past it.
        harness.run(consume(2, user: "u-1", seq: 1))
        harness.settle()
        #expect(harness.progress[0] == ProgressMarker(through: 2, open: []))
        #expect(try ProgressMarker.decode(ProgressMarker(through: 9, open: [3, 5]).encoded(at: 1)) == ProgressMarker(through: 9, open: [3, 5]))
    }

    @Test("the progress marker describes any number of open records exactly, and still reads (and writes for older relays) the shape with at most 1,000")
    func progressMarkerShapes() throws {
        // 1,500 open records, then finished ones up to 5,000: exact in the current shape.
        let long = ProgressMarker(through: 5_000, open: Array(0..<1_500))
        #expect(long.open == [0...1_499] && !long.isFinished(1_499) && long.isFinished(1_500) && long.isFinished(5_000))
        let stored = long.encoded(at: 1)
        #expect(try ProgressMarker.decode(stored) == long)
        // The shape older relays read from the same record: at most 1,000 offsets, `through` lowered below the rest.
        let root = try JSON.parse(stored)
        #expect(root["through"]?.integerValue == 999)
        if case .array(let legacyOpen)? = root["open"] { #expect(legacyOpen.count == 1_000) } else { Issue.record("no open list") }
        // A marker written by an older relay is read as it says.
        let old = try ProgressMarker.decode(Array(#"{"through":40,"open":[12,17,13],"updated_at":5}"#.utf8))
        #expect(old == ProgressMarker(through: 40, open: [12, 13, 17]))
        #expect(old.open == [12...13, 17...17] && !old.isFinished(13) && old.isFinished(14) && !old.isFinished(41))
        // 100,000 isolated open records (every other offset), 5,000 of them with two devices done: exact, below Kafka's 1 MB.
        let isolated = (0..<100_000).map { Int64($0) * 2 }
        var done: [Int64: [DeviceDigest]] = [:]
        for offset in isolated.prefix(5_000) { done[offset] = [DeviceDigest(token: token(Int(offset))), DeviceDigest(token: token(Int(offset) + 1))] }
        let wide = ProgressMarker(through: 200_001, open: isolated, devicesDone: done)
        let (value, dropped) = { ($0.value, $0.droppedDeviceLists) }(wide.encodedMeasured(at: 1))
        #expect(value.count < 1_000_000 && dropped == 0, "\(value.count) bytes")
        #expect(try ProgressMarker.decode(value) == wide)
        #expect(wide.openCount == 100_000 && !wide.isFinished(199_998) && wide.isFinished(199_999))
        // Device lists past the bound are left out, the longest first; the open records stay exact.
        var many = done
        for offset in isolated.prefix(40_000) { many[offset] = (0..<Int(offset % 3 + 1)).map { DeviceDigest(token: token(Int(offset) + $0)) } }
        let crowded = ProgressMarker(through: 200_001, open: isolated, devicesDone: many)
        let (crowdedValue, crowdedDropped) = { ($0.value, $0.droppedDeviceLists) }(crowded.encodedMeasured(at: 1))
        let readBack = try ProgressMarker.decode(crowdedValue)
        #expect(crowdedValue.count <= ProgressMarker.maximumBytes && crowdedDropped > 0, "\(crowdedValue.count) bytes")
        #expect(readBack.open == crowded.open && readBack.devicesDone.count == 40_000 - crowdedDropped)
        #expect(readBack.devicesDone.values.allSatisfy { $0.count <= 2 })
    }

    @Test("a progress marker fits Kafka's record size for any number of open records: past its bound it claims less (through lowered below the first run left out), never more")
    func progressMarkerSizeBound() throws {
        // 250,000 isolated open records, 1,000 offsets apart: their runs alone would take about 1.5 MB.
        let isolated = (0..<250_000).map { Int64($0) * 1_000 }
        var done: [Int64: [DeviceDigest]] = [:]
        for offset in isolated.prefix(1_000) + isolated.suffix(1_000) { done[offset] = [DeviceDigest(token: token(Int(offset)))] }
        let marker = ProgressMarker(through: 250_000_000, open: isolated, devicesDone: done)
        let encoded = marker.encodedMeasured(at: 1)
        #expect(encoded.value.count <= ProgressMarker.maximumBytes, "\(encoded.value.count) bytes")
        let stored = try ProgressMarker.decode(encoded.value)
        let loweredThrough = encoded.loweredThrough
        try #require(loweredThrough != nil, "a marker this wide claims less")
        let lowered = loweredThrough ?? 0
        #expect(stored.through == lowered && lowered < marker.through)
        // Never more: every offset the stored marker calls finished is finished.
        for offset in stride(from: Int64(0), through: 250_000_100, by: 250) where stored.isFinished(offset) {
            guard marker.isFinished(offset) else { Issue.record("claims \(offset) finished"); break }
        }
        #expect(stored.open == marker.open.filter { $0.upperBound <= lowered }, "what it keeps is exact")
        #expect(stored.devicesDone.keys.allSatisfy { $0 <= lowered } && !stored.devicesDone.isEmpty)
        // The older shape read from the same record claims no more either.
        let root = try JSON.parse(encoded.value)
        #expect((root["through"]?.integerValue ?? .max) <= lowered)
    }

    @Test("one event fanning out to more devices than the window holds: the window stays at its bound, the rest waits unrendered, read ahead; the partitions pause once waiting fan-outs hold relay.read_ahead_bytes",
          arguments: [64 << 20, 1_000])
    func fanOutBeyondTheWindowReadsAhead(readAheadBytes: Int) {
        var harness = EngineHarness(configuration: .init(maxInFlight: 4, maxInFlightPerUser: 4, readAheadBytes: readAheadBytes), seed: 2)
        harness.run(harness.engine.assigned([events]))
        // One record, six devices: the fan-out stops at the bound of 4 (the other two wait, unrendered).
        let tokens = (0..<6).map { token(100 + $0) }
        harness.run(harness.engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: 0, key: nil,
                                                         value: eventJSON(id: "fan", user: "u-1", seq: 1, tokens: tokens)), now: 0))
        while let changelogToken = harness.changelogQueue.first {
            harness.changelogQueue.removeFirst()
            harness.run(harness.engine.changelogged(changelogToken, now: 0))
        }
        #expect(harness.engine.notificationsInFlight == 4)
        // The waiting fan-out (1 KiB and more, as counted) fills a small read-ahead at once, before the next record.
        #expect(harness.engine.isPaused == (readAheadBytes < 2_000))
    }

    @Test("backpressure pauses at max in flight and resumes below half")
    func backpressure() {
        var harness = EngineHarness(configuration: .init(maxInFlight: 4), seed: 1)
        harness.run(harness.engine.assigned([events]))
        var pauses = 0
        for offset in 0..<4 {
            let effects = harness.engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: Int64(offset), key: nil,
                                                               value: eventJSON(id: "e\(offset)", user: "u-\(offset)", seq: 1, tokens: [token(offset)])), now: 0)
            pauses += effects.filter { if case .pause = $0 { return true } else { return false } }.count
            harness.run(effects)
        }
        #expect(pauses == 1)
        var resumed = false
        while !harness.pending.isEmpty || !harness.changelogQueue.isEmpty {
            if let changelogToken = harness.changelogQueue.first {
                harness.changelogQueue.removeFirst()
                harness.run(harness.engine.changelogged(changelogToken, now: 0))
                continue
            }
            let completion = harness.pending.removeFirst()
            let effects: [RelayEffect]
            switch completion {
            case .published(let reference): effects = harness.engine.published(reference, now: harness.now)
            case .sent(let dispatch): effects = harness.engine.sent(dispatch, outcome: .delivered(), now: 0)
            case .publishFailed(let effect, let failure): effects = harness.engine.publishFailed(effect, failure: failure, now: 0)
            }
            resumed = resumed || effects.contains { if case .resume = $0 { return true } else { return false } }
            harness.run(effects)
        }
        #expect(resumed)
        #expect(harness.engine.pendingRecordCount == 0)
    }
}
