import KafkaCore
import Testing

@testable import RelayCore

/// A relay that may have lost its partitions (frozen past its session timeout) sends and writes
/// nothing for them until the group confirms it again; every hand-over ends by its deadline.
@Suite("Ownership lease and bounded hand-overs")
struct RelayEngineOwnershipTests {
    static let events = TopicPartition("push.events", 0)
    static let other = TopicPartition("push.events", 1)

    static func message(in partition: TopicPartition = events, _ offset: Int64, _ value: [UInt8]) -> KafkaMessage {
        KafkaMessage(topic: partition.topic, partition: partition.partition, offset: offset, key: nil, value: value)
    }

    /// An engine with a 6 s session timeout (a 4 s lease) and a 2 s reorder window, assigned at the harness's now.
    static func leasedHarness(seed: UInt64) -> EngineHarness {
        var configuration = RelayEngine.Configuration(reorderWindow: .seconds(2))
        configuration.sessionTimeout = .seconds(6)
        configuration.failureTimeout = .seconds(60)
        var harness = EngineHarness(configuration: configuration, seed: seed)
        harness.run(harness.engine.assigned([events, other], at: harness.now.monotonic))
        return harness
    }

    @Test("the lease is two thirds of the session timeout, counted from when the confirming request was made")
    func leaseArithmetic() {
        var lease = OwnershipLease(sessionTimeoutMilliseconds: 45_000)
        #expect(lease.milliseconds == 30_000 && !lease.isValid(at: 0))
        lease.confirm(at: 1_000)
        lease.confirm(at: 500)  // an older answer moves nothing back
        #expect(lease.expiry == 31_000 && lease.isValid(at: 30_999) && !lease.isValid(at: 31_000))
    }

    @Test("a frozen owner: once its lease lapsed it sends nothing and writes no badge state, whatever its queued inputs and timers say; a lost revoke drops the rest")
    func frozenOwnerIsFenced() {
        var harness = Self.leasedHarness(seed: 1)
        let device = token(1)
        harness.run(harness.engine.consumed(Self.message(0, eventJSON(id: "e1", user: "u", seq: 1, tokens: [device])), now: harness.now))
        harness.advance(by: 500)
        #expect(harness.received[device] == [1])
        // Seq 3 waits for seq 2; seq 1 of another user is applied, its change written and in flight.
        harness.run(harness.engine.consumed(Self.message(1, eventJSON(id: "e3", user: "u", seq: 3, tokens: [device])), now: harness.now))
        harness.run(harness.engine.consumed(Self.message(2, eventJSON(id: "v1", user: "v", seq: 1, tokens: [token(2)])), now: harness.now))
        let queuedAcknowledgements = harness.changelogQueue
        harness.changelogQueue = []
        let changesBefore = harness.changelog.count
        let sendsBefore = harness.sent.count
        // Frozen for 45 s: the group gave the partitions to another member meanwhile, and refuses this one's commits.
        harness.now += 45_000
        harness.refuseCommits = true
        for acknowledgement in queuedAcknowledgements { harness.run(harness.engine.changelogged(acknowledgement, now: harness.now)) }
        harness.advance(by: 3_000)
        #expect(harness.sent.count == sendsBefore, "nothing sent after the lease lapsed")
        #expect(harness.changelog.count == changesBefore, "no badge state written after the lease lapsed: \(harness.changelog.suffix(2).map(\.user))")
        #expect(harness.progress.isEmpty || harness.progress.values.allSatisfy { $0.through < 1 }, "no progress marker written for work done after the lapse")
        // librdkafka reports the partitions lost: their state goes, nothing of theirs is written or sent.
        harness.run(harness.engine.revokeRequested([Self.events, Self.other], id: 9, lost: true, now: harness.now))
        harness.refuseCommits = false
        harness.advance(by: 5_000)
        #expect(harness.sent.count == sendsBefore && harness.changelog.count == changesBefore)
        #expect(harness.acknowledgedRevokes == [9])
        #expect(harness.exits.isEmpty)
    }

    @Test("under Kafka transactions a frozen owner past its lease still writes badge state and markers (the next owner's initialisation fences them) and sends nothing; its stop stores its markers")
    func transactionalOwnerSendsNothingPastItsLease() {
        var configuration = RelayEngine.Configuration(reorderWindow: .seconds(2))
        configuration.sessionTimeout = .seconds(6)
        configuration.writesFencedByKafka = true
        var harness = EngineHarness(configuration: configuration, seed: 5)
        harness.run(harness.engine.assigned([Self.events, Self.other], at: harness.now.monotonic))
        let device = token(1)
        harness.run(harness.engine.consumed(Self.message(0, eventJSON(id: "e1", user: "u", seq: 1, tokens: [device])), now: harness.now))
        harness.advance(by: 500)
        #expect(harness.received[device] == [1])
        let sendsBefore = harness.sent.count
        // Frozen for 45 s; the group refuses this member's commits from now on.
        harness.now += 45_000
        harness.refuseCommits = true
        #expect(!harness.engine.maySend(now: harness.now) && harness.engine.mayWrite(now: harness.now))
        harness.run(harness.engine.consumed(Self.message(1, eventJSON(id: "e2", user: "u", seq: 2, tokens: [device])), now: harness.now))
        harness.run(harness.engine.consumed(Self.message(2, eventJSON(id: "v1", user: "v", seq: 1, tokens: [token(2)])), now: harness.now))
        harness.advance(by: 2_000)
        #expect(harness.sent.count == sendsBefore, "nothing sent past the lease")
        #expect(harness.changelog.map(\.user).suffix(2) == ["u", "v"], "badge state written past the lease: the transaction carries it, Kafka fences it")
        harness.progress = [:]
        harness.run(harness.engine.stopRequested(now: harness.now))
        harness.advance(by: 30_000)
        #expect(harness.sent.count == sendsBefore, "nothing sent during the stop either")
        #expect(harness.progress[0] != nil, "the stop stored its marker without waiting for the lease")
    }

    @Test("a stop whose lease lapsed writes no marker and says the hand-over is not stored (exit 1), never a clean stop with nothing stored")
    func stopWithLapsedLease() {
        var harness = Self.leasedHarness(seed: 3)
        harness.run(harness.engine.consumed(Self.message(0, eventJSON(id: "e1", user: "u", seq: 1, tokens: [token(1)])), now: harness.now))
        harness.advance(by: 500)
        // Frozen past the lease; the group refuses this member's commits from now on.
        harness.now += 45_000
        harness.refuseCommits = true
        let markersBefore = harness.progress
        harness.run(harness.engine.stopRequested(now: harness.now))
        harness.advance(by: 30_000)
        #expect(harness.progress == markersBefore, "no marker written past the lease")
        #expect(harness.stops == [false], "the stop stored nothing: not handed over")
    }

    @Test("an idle relay's lease lapses; its stop confirms the lease with a commit, then stores its markers and hands over")
    func idleStopConfirmsTheLease() {
        var harness = Self.leasedHarness(seed: 4)
        harness.run(harness.engine.consumed(Self.message(0, eventJSON(id: "e1", user: "u", seq: 1, tokens: [token(1)])), now: harness.now))
        harness.advance(by: 500)
        harness.advance(by: 10_000)  // idle: nothing renews the lease
        #expect(!harness.engine.maySend(now: harness.now))
        harness.progress = [:]
        harness.run(harness.engine.stopRequested(now: harness.now))
        harness.advance(by: 30_000)
        #expect(harness.progress[0]?.isFinished(0) == true, "the stop's marker is stored once a commit confirmed the lease")
        #expect(harness.stops == [true])
    }

    @Test("a short freeze: once the group confirms the lease again, what waited goes out in order, nothing lost or sent twice")
    func confirmedAgain() {
        var harness = Self.leasedHarness(seed: 2)
        let device = token(3)
        for (offset, seq) in [1, 2, 3].enumerated() {
            harness.run(harness.engine.consumed(Self.message(Int64(offset), ExactlyOnceModelTests.alertEvent(id: "e\(seq)", user: "u", seq: seq, token: device)), now: harness.now))
        }
        let queuedAcknowledgements = harness.changelogQueue
        harness.changelogQueue = []
        harness.now += 10_000  // past the 4 s lease, before the 6 s session timeout... of a slow coordinator
        for acknowledgement in queuedAcknowledgements { harness.run(harness.engine.changelogged(acknowledgement, now: harness.now)) }
        #expect(harness.received[device] == nil, "held until the group confirms this member")
        harness.advance(by: 1_000)  // a commit goes out at once and is accepted
        #expect(harness.received[device] == [1, 2, 3])
        #expect(harness.results.map(\.status) == [.delivered, .delivered, .delivered])
    }

    @Test("work waiting for a lease the group never confirms: past the failure bound the relay exits 1 (crash-only), never a quiet stall")
    func neverConfirmed() {
        var harness = Self.leasedHarness(seed: 3)
        harness.run(harness.engine.consumed(Self.message(0, eventJSON(id: "e1", user: "u", seq: 1, tokens: [token(4)])), now: harness.now))
        let queuedAcknowledgements = harness.changelogQueue
        harness.changelogQueue = []
        harness.now += 10_000
        harness.refuseCommits = true
        for acknowledgement in queuedAcknowledgements { harness.run(harness.engine.changelogged(acknowledgement, now: harness.now)) }
        harness.advance(by: 59_000)
        #expect(harness.exits.isEmpty)
        harness.advance(by: 1_500)
        #expect(harness.exits.count == 1 && harness.exits.first?.reason.contains("has not confirmed") == true, "\(harness.exits)")
        #expect(harness.sent.isEmpty)
    }

    @Test("a sender refusal past the lease (abandoned) is sent again once the lease is confirmed: no result for the refusal, one for the send")
    func abandonedSendIsRequeued() {
        var harness = Self.leasedHarness(seed: 4)
        harness.apnsSilent = true
        harness.run(harness.engine.consumed(Self.message(0, eventJSON(id: "e1", user: "u", seq: 1, tokens: [token(5)])), now: harness.now))
        harness.settle()
        let dispatch = harness.pending.compactMap { if case .sent(let dispatch) = $0 { dispatch } else { nil } }
        #expect(dispatch.count == 1)
        harness.answer(dispatch[0], .abandoned())
        #expect(harness.results.isEmpty)
        harness.apnsSilent = false
        harness.advance(by: 300)
        #expect(harness.sent.count == 2, "sent again, the same notification")
        #expect(harness.results.map(\.status) == [.delivered])
    }

    @Test("a hand-over whose commit the coordinator never answers acknowledges the revoke by its deadline; the other partition is served meanwhile")
    func handOverWithUnansweredCommit() {
        var configuration = RelayEngine.Configuration()
        configuration.revokeDrain = .seconds(3)
        configuration.handOver = .milliseconds(1_500)
        var harness = EngineHarness(configuration: configuration, seed: 5)
        harness.run(harness.engine.assigned([Self.events, Self.other]))
        harness.run(harness.engine.consumed(Self.message(0, eventJSON(id: "a", user: "u", seq: 1, tokens: [token(6)])), now: harness.now))
        harness.settle()
        harness.commitsUnanswered = true
        harness.run(harness.engine.revokeRequested([Self.events], id: 2, now: harness.now))
        #expect(harness.acknowledgedRevokes.isEmpty, "the commit is out, unanswered")
        #expect(harness.unansweredCommits.count == 1)
        // The loop goes on: the other partition's events are sent while the hand-over waits.
        harness.run(harness.engine.consumed(Self.message(in: Self.other, 0, eventJSON(id: "b", user: "w", seq: 1, tokens: [token(7)])), now: harness.now))
        harness.settle()
        #expect(harness.received[token(7)] == [1])
        harness.advance(by: 4_400)
        #expect(harness.acknowledgedRevokes.isEmpty)
        harness.advance(by: 200)
        #expect(harness.acknowledgedRevokes == [2], "the hand-over's deadline (drain + hand-over, 4.5 s) bounds it")
    }
}
