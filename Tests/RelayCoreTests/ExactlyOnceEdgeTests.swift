import Kafka
import Testing

@testable import RelayCore

/// The exactly-once edges: extreme seqs, seq-less events across crashes, upstream duplicates,
/// graceful handovers whose commit was refused, late events, look-alike user ids, tiny bounds.
@Suite("Exactly once at the edges")
struct ExactlyOnceEdgeTests {
    static let events = TopicPartition("push.events", 0)

    static func message(_ offset: Int64, _ value: [UInt8], key: String? = nil) -> KafkaMessage {
        KafkaMessage(topic: events.topic, partition: 0, offset: offset, key: key.map { Array($0.utf8) }, value: value)
    }

    static func sentBadges(_ effects: [RelayEffect]) -> [Int64?] {
        effects.compactMap { if case .send(let dispatch) = $0 { return dispatch.notification.badge } else { return nil } }
    }

    @Test("every seq up to 2^63-1 works: a first event near Int64.max, then the last two seqs", arguments: [true, false])
    func extremeSeqs(viaGap: Bool) {
        var harness = EngineHarness(seed: 5)
        harness.run(harness.engine.assigned([Self.events]))
        let device = token(9)
        var offset: Int64 = 0
        func consume(_ seq: Int64, id: String, user: String = "u") {
            harness.run(harness.engine.consumed(Self.message(offset, eventJSON(id: id, user: user, seq: nil, tokens: [device], rawSeq: seq)), now: harness.now))
            offset += 1
            harness.settle()
        }
        if viaGap {
            // Two users whose first seqs skip gaps of ~2^63 each: the skipped counts add past Int64.max.
            consume(Int64.max - 10, id: "other", user: "v")
            consume(Int64.max - 10, id: "first")
            harness.now += 10_000
            harness.run(harness.engine.tick(now: harness.now))
            harness.settle()
            consume(Int64.max - 20, id: "stale")  // below a huge skipped gap
        }
        consume(Int64.max - 2, id: "a")
        harness.now += 10_000
        harness.run(harness.engine.tick(now: harness.now))
        harness.settle()
        consume(Int64.max - 1, id: "b")
        consume(Int64.max, id: "c")
        consume(Int64.max, id: "c-again")
        let statuses = Dictionary(grouping: harness.results, by: \.eventID).mapValues { $0.map(\.status) }
        #expect(statuses["a"] == [.delivered])
        #expect(statuses["b"] == [.delivered])
        #expect(statuses["c"] == [.delivered])
        #expect(statuses["c-again"] == [.duplicate])
        #expect(harness.engine.counters.seqGapsSkipped > 0)
    }

    @Test("seq-less increments are applied once across three crashes")
    func seqLessAcrossCrashes() {
        for seed in UInt64(0)..<20 {
            var world = CrashWorld(seed: seed)
            let device = token(1)
            for index in 0..<30 {
                world.produce(eventJSON(id: "inc-\(index)", user: "u", seq: nil, tokens: [device]))
            }
            world.run(crashes: 3)
            world.runToEnd()
            #expect(world.finalBadge(of: "u") == 30, "seed \(seed)")
            #expect(world.lastSentBadge(to: device) == 30, "seed \(seed)")
        }
    }

    @Test("upstream duplicates produced around a crash are reported duplicate, not sent again")
    func upstreamDuplicatesAfterCrash() {
        for seed in UInt64(0)..<20 {
            var world = CrashWorld(seed: seed)
            let device = token(2)
            for seq in 1...10 { world.produce(eventJSON(id: "e\(seq)", user: "u", seq: seq, tokens: [device])) }
            world.run(crashes: 1)
            // The producer retries e3...e7 after the relay restarted.
            for seq in 3...7 { world.produce(eventJSON(id: "e\(seq)", user: "u", seq: seq, tokens: [device])) }
            world.run(crashes: 1)
            world.runToEnd()
            #expect(world.finalBadge(of: "u") == 10, "seed \(seed)")
            // The retried copies (offsets 10...14) are duplicates: their results say so, none is sent.
            for offset in Int64(10)...14 {
                let statuses = world.results(ofRecord: offset).map(\.status)
                #expect(!statuses.isEmpty && statuses.allSatisfy { $0 == .duplicate }, "seed \(seed) offset \(offset): \(statuses)")
            }
            #expect(world.sends.allSatisfy { $0.offset < 10 }, "seed \(seed)")
        }
    }

    @Test("a graceful handover whose commit is refused resends nothing and republishes no dead letter")
    func gracefulHandoverWithRefusedCommit() {
        var world = CrashWorld(seed: 1)
        let device = token(3)
        for seq in 1...10 { world.produce(eventJSON(id: "e\(seq)", user: "u", seq: seq, tokens: [device])) }
        world.processAll()
        // From here the group refuses commits (a rebalance under way), the revoke's included.
        world.refuseCommits = true
        for seq in 11...20 { world.produce(eventJSON(id: "e\(seq)", user: "u", seq: seq, tokens: [device])) }
        world.produce(Array("{not json".utf8))
        world.produce(eventJSON(id: "x1", user: "v", seq: nil, tokens: [token(4)]))
        world.processAll()
        world.handOver(commitRefused: true)
        let sendsBefore = world.sends.count
        let lettersBefore = world.deadLetters.count
        world.processAll()
        #expect(world.sends.count == sendsBefore)
        #expect(world.deadLetters.count == lettersBefore)
        #expect(world.resultsAfterLastRestart.isEmpty)
        #expect(world.finalBadge(of: "u") == 20)
        #expect(world.finalBadge(of: "v") == 1)
    }

    @Test("a handover in the middle of the work: the old owner sends nothing new, the next sends the rest; each notification once")
    func handoverMidway() {
        for seed in UInt64(0)..<30 {
            var world = CrashWorld(seed: seed)
            for user in 0..<4 {
                for seq in 1...8 { world.produce(eventJSON(id: "u\(user)-e\(seq)", user: "u\(user)", seq: seq, tokens: [token(20 + user)])) }
            }
            world.produce(Array("{not json".utf8))
            world.refuseCommits = seed % 2 == 0
            world.handOverMidway(steps: Int(seed % 7) * 10 + 5)
            world.processAll()
            for user in 0..<4 { #expect(world.finalBadge(of: "u\(user)") == 8, "seed \(seed)") }
            let sentTwice = Dictionary(grouping: world.sends, by: \.apnsID).filter { $0.value.count > 1 }
            #expect(sentTwice.isEmpty, "seed \(seed): \(sentTwice.values.map { $0[0].eventID })")
            #expect(world.deadLetters.count == 1, "seed \(seed)")
            for user in 0..<4 { #expect(world.lastSentBadge(to: token(20 + user)) == 8, "seed \(seed)") }
        }
    }

    @Test("a seq that arrives after its gap was skipped is applied once at arrival and delivered with the current badge")
    func lateEventAfterSkip() {
        var harness = EngineHarness(seed: 8)
        harness.run(harness.engine.assigned([Self.events]))
        let device = token(5)
        harness.run(harness.engine.consumed(Self.message(0, eventJSON(id: "e1", user: "u", seq: 1, tokens: [device])), now: harness.now))
        harness.run(harness.engine.consumed(Self.message(1, eventJSON(id: "e3", user: "u", seq: 3, tokens: [device])), now: harness.now))
        harness.settle()
        harness.now += 5_000
        harness.run(harness.engine.tick(now: harness.now))
        harness.settle()
        #expect(harness.received[device]?.last == 2)
        harness.run(harness.engine.consumed(Self.message(2, eventJSON(id: "e2", user: "u", seq: 2, tokens: [device])), now: harness.now))
        harness.settle()
        let late = harness.results.filter { $0.eventID == "e2" }
        #expect(late.map(\.status) == [.delivered])
        #expect(late.first?.badge == 3)
        #expect(late.first?.late == true)
        #expect(late.first?.reason == "late")
        #expect(String(decoding: late.first!.encoded(), as: UTF8.self).hasSuffix(#","late":true}"#))
        #expect(harness.engine.counters.eventsLate == 1)
        #expect(harness.received[device]?.last == 3)
        // Once applied, a second copy is a duplicate.
        harness.run(harness.engine.consumed(Self.message(3, eventJSON(id: "e2", user: "u", seq: 2, tokens: [device])), now: harness.now))
        harness.settle()
        #expect(harness.results.filter { $0.eventID == "e2" }.map(\.status) == [.delivered, .duplicate])
        #expect(harness.received[device]?.last == 3)
    }

    @Test("user ids that look alike but differ in bytes are different users (NFC and NFD)")
    func lookAlikeUsers() {
        var harness = EngineHarness(seed: 9)
        let composed = "caf\u{E9}"
        let decomposed = "cafe\u{301}"
        #expect(composed == decomposed)  // Swift's String equality: canonical equivalence
        _ = harness.engine.deviceRecord(key: slice(Array(token(10).utf8)), value: slice(registrationValue(user: composed)))
        _ = harness.engine.deviceRecord(key: slice(Array(token(11).utf8)), value: slice(registrationValue(user: decomposed)))
        harness.run(harness.engine.assigned([Self.events]))
        harness.run(harness.engine.consumed(Self.message(0, eventJSON(id: "a", user: composed, seq: 1)), now: harness.now))
        harness.run(harness.engine.consumed(Self.message(1, eventJSON(id: "b", user: decomposed, seq: 1)), now: harness.now))
        harness.settle()
        #expect(harness.received[token(10)] == [1])
        #expect(harness.received[token(11)] == [1])
        #expect(harness.results.map(\.status).sorted { $0.rawValue < $1.rawValue } == [.delivered, .delivered])
    }

    @Test("a graceful hand-over while one device is slow re-sends nothing delivered and publishes no result twice", arguments: 0..<10)
    func handOverWithSlowDevice(seed: UInt64) {
        var world = CrashWorld(seed: seed)
        let slow = token(500)
        for user in 0..<10 {
            for seq in 1...3 {
                world.produce(eventJSON(id: "u\(user)-e\(seq)", user: "u\(user)", seq: seq, tokens: [token(100 + user), user == 0 ? slow : token(200 + user)]))
            }
        }
        world.slowTokens = [slow]
        world.processWithoutTime()
        world.gracefulHandOver()
        world.slowTokens = []
        world.processAll()
        #expect(world.resentNotifications.isEmpty, "seed \(seed)")
        #expect(world.republishedResults.isEmpty, "seed \(seed)")
        for user in 0..<10 {
            #expect(world.finalBadge(of: "u\(user)") == 3, "seed \(seed)")
            #expect(world.lastSentBadge(to: token(100 + user)) == 3, "seed \(seed)")
        }
        #expect(world.lastSentBadge(to: slow) == 3, "seed \(seed)")
        #expect(world.results.count == 60, "seed \(seed): one result per (event, device)")
    }

    @Test("a graceful hand-over with 1,200 records held for seq gaps: the 300 finished after them are not sent or published again")
    func handOverWithManyHeldRecords() {
        var world = CrashWorld(seed: 3)
        // Seq 2 of 1,200 users, whose seq 1 never comes: each waits out its reorder window.
        for user in 0..<1_200 { world.produce(eventJSON(id: "held-\(user)", user: "h\(user)", seq: 2, tokens: [token(1_000 + user)])) }
        for index in 0..<300 { world.produce(eventJSON(id: "done-\(index)", user: "d\(index)", seq: nil, tokens: [token(5_000 + index)])) }
        world.processWithoutTime()
        #expect(world.sends.count == 300)
        world.gracefulHandOver()
        world.processAll()
        #expect(world.resentNotifications.isEmpty)
        #expect(world.republishedResults.isEmpty)
        #expect(world.sends.count == 1_500)
        #expect(world.results.count == 1_500)
    }

    @Test("a rolling upgrade: a changelog written by the previous version (its marker {through, open}, its badge states) is restored and continued exactly")
    func restoresTheOlderShape() {
        var harness = EngineHarness(seed: 12)
        let device = token(15)
        // What the previous version wrote for partition 0: u at seq 3 (offset 2), v at seq 1 (offset 3);
        // records 0-3 and 5 finished, 4 open (held for a seq gap).
        let older: [(key: [UInt8], value: [UInt8]?)] = [
            (Array("u".utf8), Array(#"{"badge":3,"seq":3,"offset":2,"updated_at":1}"#.utf8)),
            (Array("v".utf8), Array(#"{"badge":1,"seq":1,"offset":3,"updated_at":1}"#.utf8)),
            (ProgressMarker.key, Array(#"{"through":5,"open":[4],"updated_at":1}"#.utf8)),
        ]
        harness.run(harness.engine.assigned([Self.events]).filter { if case .restore = $0 { false } else { true } })
        harness.run(harness.engine.restored(Self.events, records: older, now: harness.now))
        let log: [(Int64, [UInt8])] = [
            (0, eventJSON(id: "u1", user: "u", seq: 1, tokens: [device])),
            (1, eventJSON(id: "u2", user: "u", seq: 2, tokens: [device])),
            (2, eventJSON(id: "u3", user: "u", seq: 3, tokens: [device])),
            (3, eventJSON(id: "v1", user: "v", seq: 1, tokens: [token(16)])),
            (4, eventJSON(id: "u5", user: "u", seq: 5, tokens: [device])),
            (5, eventJSON(id: "w1", user: "w", seq: 1, tokens: [token(17)])),
            (6, eventJSON(id: "u4", user: "u", seq: 4, tokens: [device])),
        ]
        for (offset, value) in log { harness.run(harness.engine.consumed(Self.message(offset, value), now: harness.now)) }
        harness.settle()
        // Only the open record (4) and the one beyond the marker (6) run: u applies 4 then 5.
        #expect(harness.received[device] == [4, 5])
        #expect(harness.received[token(16)] == nil && harness.received[token(17)] == nil)
        #expect(harness.engine.counters.recordsAlreadyFinished == 5)
        #expect(harness.changelog.last { $0.user == "u" }?.record.badge == 5)
    }

    @Test("look-alike user ids stay two users across a restart: the restore keys the changelog by bytes")
    func lookAlikeUsersAcrossRestart() {
        let composed = "caf\u{E9}-3"
        let decomposed = "cafe\u{301}-3"
        let composedDevice = token(13)
        let decomposedDevice = token(14)
        var world = CrashWorld(seed: 2)
        for seq in 1...5 { world.produce(eventJSON(id: "c\(seq)", user: composed, seq: seq, tokens: [composedDevice])) }
        for seq in 1...2 { world.produce(eventJSON(id: "d\(seq)", user: decomposed, seq: seq, tokens: [decomposedDevice])) }
        world.processAll()
        world.crash()
        world.produce(eventJSON(id: "c6", user: composed, seq: 6, tokens: [composedDevice]))
        world.produce(eventJSON(id: "d3", user: decomposed, seq: 3, tokens: [decomposedDevice]))
        world.processAll()
        #expect(world.finalBadge(of: composed) == 6)
        #expect(world.finalBadge(of: decomposed) == 3)
        #expect(world.sends.filter { $0.token == composedDevice }.compactMap(\.badge) == [1, 2, 3, 4, 5, 6])
        #expect(world.sends.filter { $0.token == decomposedDevice }.compactMap(\.badge) == [1, 2, 3])
    }

    @Test("reorder deadlines follow the monotonic clock: a wall-clock step forward skips no gap early, a step back holds none")
    func wallClockSteps() {
        var harness = EngineHarness(configuration: .init(reorderWindow: .seconds(2)), seed: 4)
        harness.run(harness.engine.assigned([Self.events]))
        let device = token(12)
        harness.run(harness.engine.consumed(Self.message(0, eventJSON(id: "e1", user: "u", seq: 1, tokens: [device])), now: harness.now))
        harness.run(harness.engine.consumed(Self.message(1, eventJSON(id: "e3", user: "u", seq: 3, tokens: [device])), now: harness.now))
        harness.settle()
        // The wall clock jumps an hour ahead (NTP, a VM resumed); 10 ms pass.
        harness.now = RelayTime(monotonic: harness.now.monotonic + 10, epoch: harness.now.epoch + 3_600_000)
        harness.run(harness.engine.tick(now: harness.now))
        harness.settle()
        #expect(harness.received[device] == [1], "seq 3 still waits for seq 2")
        // Seq 2 comes in time: all in order, nothing skipped.
        harness.run(harness.engine.consumed(Self.message(2, eventJSON(id: "e2", user: "u", seq: 2, tokens: [device])), now: harness.now))
        harness.settle()
        #expect(harness.engine.counters.seqGapsSkipped == 0)
        // A new gap, then the wall clock jumps back an hour while the window passes: released on time.
        harness.run(harness.engine.consumed(Self.message(3, eventJSON(id: "e5", user: "u", seq: 5, tokens: [device])), now: harness.now))
        harness.settle()
        harness.now = RelayTime(monotonic: harness.now.monotonic + 2_000, epoch: harness.now.epoch - 3_600_000)
        harness.run(harness.engine.tick(now: harness.now))
        harness.settle()
        #expect(harness.engine.counters.seqGapsSkipped == 1)
        #expect(harness.received[device]?.last == 4)
    }

    @Test("relay.max_in_flight 1 pauses and resumes")
    func maxInFlightOne() {
        var harness = EngineHarness(configuration: .init(maxInFlight: 1), seed: 3)
        harness.run(harness.engine.assigned([Self.events]))
        let first = harness.engine.consumed(Self.message(0, eventJSON(id: "a", user: "u", seq: 1, tokens: [token(6)])), now: harness.now)
        #expect(first.contains { if case .pause = $0 { return true } else { return false } })
        harness.run(first)
        var resumed = false
        while !harness.pending.isEmpty || !harness.changelogQueue.isEmpty {
            if let changelogToken = harness.changelogQueue.first {
                harness.changelogQueue.removeFirst()
                harness.run(harness.engine.changelogged(changelogToken, now: harness.now))
                continue
            }
            let effects: [RelayEffect]
            switch harness.pending.removeFirst() {
            case .published(let reference): effects = harness.engine.published(reference, now: harness.now)
            case .sent(let dispatch): effects = harness.engine.sent(dispatch, outcome: .delivered(), now: harness.now)
            case .publishFailed(let effect, let failure): effects = harness.engine.publishFailed(effect, failure: failure, now: harness.now)
            }
            resumed = resumed || effects.contains { if case .resume = $0 { return true } else { return false } }
            harness.run(effects)
        }
        #expect(resumed)
    }
}

/// Random interleavings through the whole engine, checked against a model that knows only what
/// was produced: seq'd and seq-less users, producer duplicates, seqs held back until after their
/// gap may have been skipped, and crashes at random points (state dropped, unacknowledged work
/// lost, the engine restored from the changelog records it wrote).
@Suite("Exactly once: random crashes against a model")
struct ExactlyOnceModelTests {
    static func alertEvent(id: String, user: String, seq: Int?, token: String) -> [UInt8] {
        let seqField = seq.map { "\"seq\":\($0)," } ?? ""
        return Array(#"{"id":"\#(id)","user":"\#(user)",\#(seqField)"tokens":["\#(token)"],"badge":{"increment":1},"apns":{"payload":{"aps":{"alert":"\#(id)"}}}}"#.utf8)
    }

    /// One seed's events: per user (1...4) a device and 1...12 increments with an alert, seq'd (in shuffled
    /// groups of three) or seq-less; some producer retries; some seqs held back to arrive after the rest.
    struct Scenario {
        var users: Int
        var log: [[UInt8]] = []
        var heldBack: [[UInt8]] = []
        var model: [Int]
        var eventIDs: [Set<String>]

        init(seed: UInt64) {
            var random = SeededGenerator(seed: seed &* 7_919)
            users = Int.random(in: 1...4, using: &random)
            model = [Int](repeating: 0, count: users)
            eventIDs = Array(repeating: [], count: users)
            for user in 0..<users {
                let seqLess = Int.random(in: 0..<3, using: &random) == 0
                let count = Int.random(in: 1...12, using: &random)
                var seqs = Array(1...count)
                for start in stride(from: 0, to: count, by: 3) { seqs[start..<min(count, start + 3)].shuffle(using: &random) }
                for seq in seqs {
                    let id = "u\(user)-\(seq)"
                    let value = ExactlyOnceModelTests.alertEvent(id: id, user: "u\(user)", seq: seqLess ? nil : seq, token: token(40 + user))
                    model[user] += 1
                    eventIDs[user].insert(id)
                    if !seqLess && Int.random(in: 0..<100, using: &random) < 10 {
                        heldBack.append(value)  // arrives after the rest: late, or in time after all
                    } else {
                        log.append(value)
                    }
                    if !seqLess && Int.random(in: 0..<100, using: &random) < 15 { log.append(value) }  // a producer's retry
                }
            }
            log.shuffle(using: &random)  // users interleave; each user's relative order is shuffled too (reordering)
        }

        /// Every user's count exact, every device's badges only going up and ending at it, every alert delivered.
        func check(_ world: CrashWorld, seed: UInt64) {
            for user in 0..<users {
                let device = token(40 + user)
                #expect(world.finalBadge(of: "u\(user)") == Int64(model[user]), "seed \(seed) user \(user)")
                let badges = world.sends.filter { $0.token == device }.compactMap(\.badge)
                #expect(badges == badges.sorted(), "seed \(seed) user \(user): \(badges)")
                #expect(badges.last == Int64(model[user]), "seed \(seed) user \(user)")
                #expect(Set(world.sends.filter { $0.token == device }.map(\.eventID)) == eventIDs[user], "seed \(seed) user \(user): an alert lost")
            }
        }
    }

    @Test("every user's count is exact, every device's badges only go up and end at it, every event reaches its device")
    func randomCrashes() {
        for seed in UInt64(0)..<300 {
            var random = SeededGenerator(seed: seed &* 104_729)
            let scenario = Scenario(seed: seed)
            var world = CrashWorld(seed: seed)
            for value in scenario.log { world.produce(value) }
            world.run(crashes: Int.random(in: 0...3, using: &random))
            for value in scenario.heldBack { world.produce(value) }
            world.run(crashes: Int.random(in: 0...2, using: &random))
            world.runToEnd()
            scenario.check(world, seed: seed)
        }
    }

    @Test("the same under freezes that come back (a frozen owner thawed after the group moved on) and graceful hand-overs while a device is slow: nothing goes back, nothing delivered is sent again by a hand-over")
    func randomFreezesAndSlowHandOvers() {
        var configuration = RelayEngine.Configuration()
        configuration.sessionTimeout = .seconds(6)
        for seed in UInt64(0)..<200 {
            var random = SeededGenerator(seed: seed &* 104_723)
            let scenario = Scenario(seed: seed)
            var world = CrashWorld(configuration: configuration, seed: seed)
            for value in scenario.log { world.produce(value) }
            // Per graceful hand-over: the (event, device) pairs whose result the owner handing over published, and
            // where the sends after it begin. None of those may be sent again, whatever comes later. (Results of
            // an owner that crashed before may be sent again: only a crash may re-send.)
            var handOvers: [(published: Set<String>, sendsBefore: Int)] = []
            for round in 0..<Int.random(in: 1...4, using: &random) {
                for _ in 0..<Int.random(in: 0...(4 * scenario.log.count), using: &random) { world.step() }
                switch Int.random(in: 0..<3, using: &random) {
                case 0:
                    world.freezeAndThaw(newOwnerSteps: Int.random(in: 0...(2 * scenario.log.count), using: &random))
                case 1:
                    // One device answers nothing while its partition is handed over.
                    world.slowTokens = [token(40 + Int.random(in: 0..<scenario.users, using: &random))]
                    handOvers.append((Set(world.resultsAfterLastRestart.map { "\($0.eventID)/\($0.token ?? "-")" }), world.sends.count))
                    world.gracefulHandOver()
                    world.slowTokens = []
                default:
                    world.crash()
                }
                if round == 0 { for value in scenario.heldBack { world.produce(value) } }
            }
            world.runToEnd()
            scenario.check(world, seed: seed)
            for (published, sendsBefore) in handOvers {
                let resent = world.sends[sendsBefore...].filter { published.contains("\($0.eventID)/\($0.token)") }.map(\.eventID)
                #expect(resent.isEmpty, "seed \(seed): sent again after a graceful hand-over, though published before it: \(resent)")
            }
        }
    }

    @Test("the same under freezes whose writes in flight reach Kafka after the new owner took over (a network cut): fenced by transactions, they are never visible; counts exact, badges never go back")
    func randomFreezesWithLateWrites() {
        var configuration = RelayEngine.Configuration()
        configuration.sessionTimeout = .seconds(6)
        for seed in UInt64(0)..<200 {
            var random = SeededGenerator(seed: seed &* 104_717)
            let scenario = Scenario(seed: seed)
            var world = CrashWorld(configuration: configuration, seed: seed)
            for value in scenario.log { world.produce(value) }
            for round in 0..<Int.random(in: 1...3, using: &random) {
                for _ in 0..<Int.random(in: 0...(4 * scenario.log.count), using: &random) { world.step() }
                world.freezeAndThaw(newOwnerSteps: Int.random(in: 0...(2 * scenario.log.count), using: &random), inFlightWrites: .fencedByTransactions)
                if round == 0 { for value in scenario.heldBack { world.produce(value) } }
            }
            world.runToEnd()
            scenario.check(world, seed: seed)
        }
    }

    @Test("more than 1,000 records held for seq gaps across hand-overs and crashes: every count exact, no finished record sent again by a hand-over")
    func manyHeldRecordsAcrossHandOvers() {
        for seed in UInt64(0)..<6 {
            var random = SeededGenerator(seed: seed &* 31)
            var world = CrashWorld(seed: seed)
            let held = 1_100
            // Each held user's seq 2 comes first and waits for its seq 1, which comes after a hand-over.
            for user in 0..<held { world.produce(eventJSON(id: "h\(user)-2", user: "h\(user)", seq: 2, tokens: [token(10_000 + user)])) }
            for index in 0..<200 { world.produce(eventJSON(id: "d\(index)", user: "d\(index % 50)", seq: nil, tokens: [token(20_000 + index % 50)])) }
            world.processWithoutTime()
            world.gracefulHandOver()
            #expect(world.resentNotifications.isEmpty, "seed \(seed)")
            for user in 0..<held where random.next() % 2 == 0 { world.produce(eventJSON(id: "h\(user)-1", user: "h\(user)", seq: 1, tokens: [token(10_000 + user)])) }
            world.processWithoutTime()
            if random.next() % 2 == 0 { world.crash() } else { world.gracefulHandOver() }
            world.runToEnd()
            for user in stride(from: 0, to: held, by: 97) {
                let badges = world.sends.filter { $0.token == token(10_000 + user) }.compactMap(\.badge)
                #expect(badges == badges.sorted() && world.finalBadge(of: "h\(user)") == badges.last, "seed \(seed) h\(user): \(badges)")
            }
            for user in 0..<50 { #expect(world.finalBadge(of: "d\(user)") == 4, "seed \(seed) d\(user)") }
        }
    }

    // MARK: Producers that key wrongly, partitions that grow

    /// How a producer picks an event's partition.
    enum Keying: CaseIterable {
        /// Keyed by user id with Kafka's default partitioner (murmur2): the user's home.
        case userMurmur2
        /// Keyed by user id with librdkafka's default partitioner (crc32): another client library.
        case userCrc32
        /// Keyed by event id (what the topic table once offered).
        case eventID
        /// No key: any partition.
        case none

        func partition(of value: [UInt8], count: Int32, using random: inout SeededGenerator) -> Int32 {
            let text = String(decoding: value, as: UTF8.self)
            func field(_ name: String) -> String {
                let start = text.range(of: "\"\(name)\":\"")!.upperBound
                return String(text[start..<text[start...].firstIndex(of: "\"")!])
            }
            switch self {
            case .userMurmur2: return KafkaPartitioner.murmur2(key: Array(field("user").utf8), partitionCount: count)
            case .userCrc32: return KafkaPartitioner.crc32(key: Array(field("user").utf8), partitionCount: count)
            case .eventID: return KafkaPartitioner.murmur2(key: Array(field("id").utf8), partitionCount: count)
            case .none: return Int32.random(in: 0..<count, using: &random)
            }
        }
    }

    @Test("producers that key wrongly (event id, no key, crc32 beside murmur2), with crashes and graceful hand-overs: every count exact, at its user's home only, no device's badge going down")
    func wronglyKeyedProducers() {
        for seed in UInt64(0)..<300 {
            var random = SeededGenerator(seed: seed &* 65_537)
            let scenario = Scenario(seed: seed)
            let partitions = Int32.random(in: 2...6, using: &random)
            // One to three producer services, each keying its own way.
            let producers = (0..<Int.random(in: 1...3, using: &random)).map { _ in Keying.allCases.randomElement(using: &random)! }
            var world = CrashWorld(seed: seed, partitions: partitions)
            func produce(_ values: [[UInt8]], into world: inout CrashWorld, random: inout SeededGenerator) {
                for value in values {
                    let keying = producers.randomElement(using: &random)!
                    world.produce(value, partition: keying.partition(of: value, count: world.partitionCount, using: &random))
                }
            }
            produce(scenario.log, into: &world, random: &random)
            for round in 0..<Int.random(in: 1...4, using: &random) {
                for _ in 0..<Int.random(in: 0...(4 * scenario.log.count), using: &random) { world.step() }
                if Bool.random(using: &random) {
                    world.slowTokens = [token(40 + Int.random(in: 0..<scenario.users, using: &random))]
                    world.gracefulHandOver()
                    world.slowTokens = []
                } else {
                    world.crash()
                }
                if round == 0 { produce(scenario.heldBack, into: &world, random: &random) }
            }
            world.runToEnd()
            scenario.check(world, seed: seed)
            #expect(world.usersCountedAwayFromHome.isEmpty, "seed \(seed): counted away from home: \(world.usersCountedAwayFromHome)")
            #expect(world.refusals.isEmpty, "seed \(seed): \(world.refusals)")
        }
    }

    @Test("the partition count grows mid-stream (both topics grown in place, the migration run, committed offsets kept): every count continues exactly")
    func partitionGrowth() {
        for seed in UInt64(0)..<300 {
            var random = SeededGenerator(seed: seed &* 7_927)
            let scenario = Scenario(seed: seed)
            let before = Int32.random(in: 1...3, using: &random)
            let keying: [Keying] = Bool.random(using: &random) ? [.userMurmur2] : Keying.allCases
            var world = CrashWorld(seed: seed, partitions: before)
            let split = Int.random(in: 0...scenario.log.count, using: &random)
            for value in scenario.log[..<split] {
                world.produce(value, partition: keying.randomElement(using: &random)!.partition(of: value, count: world.partitionCount, using: &random))
            }
            for _ in 0..<Int.random(in: 0...(4 * split), using: &random) { world.step() }
            if Bool.random(using: &random) { world.crash() }
            world.grow(to: before * Int32.random(in: 2...3, using: &random))
            for value in scenario.log[split...] + scenario.heldBack {
                world.produce(value, partition: keying.randomElement(using: &random)!.partition(of: value, count: world.partitionCount, using: &random))
            }
            world.run(crashes: Int.random(in: 0...2, using: &random))
            world.runToEnd()
            scenario.check(world, seed: seed)
            #expect(world.usersCountedAwayFromHome.isEmpty, "seed \(seed): counted away from home: \(world.usersCountedAwayFromHome)")
            #expect(world.refusals.isEmpty, "seed \(seed): \(world.refusals)")
        }
    }
}
