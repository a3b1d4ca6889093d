import Testing
@testable import RelayCore

private func update(_ user: String, _ seq: Int64?, _ operation: BadgeOperation = .increment(1), tag: String = "") -> BadgeUpdate<String> {
    BadgeUpdate(user: user, seq: seq, operation: operation, tag: tag.isEmpty ? "\(user)#\(seq.map(String.init) ?? "-")" : tag)
}

@Suite struct BadgeSequencerTests {
    @Test func inOrderEventsApplyImmediately() {
        var sequencer = BadgeSequencer<String>(reorderWindowMs: 2_000)
        for seq in Int64(1)...3 {
            let outcomes = sequencer.offer(update("u", seq), now: 0)
            #expect(outcomes.map(\.appliedState) == [UserBadgeState(badge: seq, lastSeq: seq)])
        }
        #expect(sequencer.nextDeadline == nil)
    }

    @Test func gapWaitsThenFills() {
        var sequencer = BadgeSequencer<String>(reorderWindowMs: 2_000)
        _ = sequencer.offer(update("u", 1), now: 0)
        #expect(sequencer.offer(update("u", 3), now: 10).isEmpty)
        #expect(sequencer.nextDeadline == 2_010)
        #expect(sequencer.heldUpdateCount == 1)
        let outcomes = sequencer.offer(update("u", 2), now: 20)
        #expect(outcomes.map(\.update.seq) == [2, 3])
        #expect(outcomes.map(\.appliedState?.badge) == [2, 3])
        #expect(sequencer.tick(now: 5_000).isEmpty)
        #expect(sequencer.skippedSeqs == 0)
    }

    @Test func gapIsSkippedAfterTheWindowAndALateEventIsAppliedOnce() {
        var sequencer = BadgeSequencer<String>(reorderWindowMs: 2_000)
        _ = sequencer.offer(update("u", 1), now: 0)
        _ = sequencer.offer(update("u", 4), now: 100)
        _ = sequencer.offer(update("u", 5), now: 150)
        #expect(sequencer.tick(now: 2_099).isEmpty)
        let released = sequencer.tick(now: 2_100)
        #expect(released.map(\.update.seq) == [4, 5])
        if case .applied(_, _, let skipped) = released[0] { #expect(skipped == 2) } else { Issue.record("not applied") }
        #expect(sequencer.skippedSeqs == 2)
        #expect(sequencer.skippedGaps == 1)
        #expect(sequencer.ledger.skippedSeqs(of: "u") == [SkippedSeqs(lower: 2, upper: 3, skippedAt: 2_100)])
        // Seq 2 arrives late: applied at the tail, lastSeq stays, 2 is no longer remembered.
        let late = sequencer.offer(update("u", 2), now: 2_200)
        #expect(late == [.appliedLate(update("u", 2), state: UserBadgeState(badge: 4, lastSeq: 5))])
        #expect(sequencer.ledger.skippedSeqs(of: "u") == [SkippedSeqs(lower: 3, upper: 3, skippedAt: 2_100)])
        #expect(sequencer.offer(update("u", 2), now: 2_300).map(\.isDuplicate) == [true])
        // A stale set does not change the count.
        #expect(sequencer.offer(update("u", 3, .set(0)), now: 2_400) == [.appliedLate(update("u", 3, .set(0)), state: UserBadgeState(badge: 4, lastSeq: 5))])
        #expect(sequencer.ledger.skippedSeqs(of: "u").isEmpty)
        #expect(sequencer.lateArrivals == 2)
        #expect(sequencer.ledger["u"] == UserBadgeState(badge: 4, lastSeq: 5))
    }

    @Test func secondGapIsTimedFromItsEarliestHeldArrival() {
        var sequencer = BadgeSequencer<String>(reorderWindowMs: 1_000)
        _ = sequencer.offer(update("u", 3), now: 0)      // waits for 1, 2
        _ = sequencer.offer(update("u", 6), now: 500)    // waits for 4, 5 too
        #expect(sequencer.tick(now: 1_000).map(\.update.seq) == [3])
        #expect(sequencer.nextDeadline == 1_500)
        #expect(sequencer.tick(now: 1_499).isEmpty)
        #expect(sequencer.tick(now: 1_500).map(\.update.seq) == [6])
        #expect(sequencer.skippedSeqs == 4)
    }

    @Test func duplicatesAreNotApplied() {
        var sequencer = BadgeSequencer<String>()
        _ = sequencer.offer(update("u", 1), now: 0)
        #expect(sequencer.offer(update("u", 1), now: 1).map(\.isDuplicate) == [true])
        _ = sequencer.offer(update("u", 3), now: 2)
        #expect(sequencer.offer(update("u", 3), now: 3).map(\.isDuplicate) == [true])  // already held
        #expect(sequencer.duplicates == 2)
        #expect(sequencer.ledger["u"]?.badge == 1)
    }

    @Test func unsequencedEventsApplyOnArrival() {
        var sequencer = BadgeSequencer<String>()
        _ = sequencer.offer(update("u", 1, .set(5)), now: 0)
        _ = sequencer.offer(update("u", 3, .set(100)), now: 0)  // held
        let outcomes = sequencer.offer(update("u", nil, .decrement(2)), now: 1)
        #expect(outcomes.map(\.appliedState) == [UserBadgeState(badge: 3, lastSeq: 1)])
        #expect(sequencer.offer(update("u", 2, .increment(1)), now: 2).map(\.appliedState?.badge) == [4, 100])
    }

    @Test func setIncrementDecrementWithFloor() {
        var sequencer = BadgeSequencer<String>()
        let badges = [update("u", 1, .set(2)), update("u", 2, .decrement(5)), update("u", 3, .increment(4)), update("u", 4, .set(0))]
            .flatMap { sequencer.offer($0, now: 0) }.map(\.appliedState?.badge)
        #expect(badges == [2, 0, 4, 0])
    }

    @Test func perUserOverflowSkipsTheGapEarly() {
        var sequencer = BadgeSequencer<String>(reorderWindowMs: 60_000, maxHeldPerUser: 3, maxHeldTotal: 100)
        for seq in Int64(2)...4 { #expect(sequencer.offer(update("u", seq), now: 0).isEmpty) }
        let released = sequencer.offer(update("u", 6), now: 1)
        #expect(released.map(\.update.seq) == [2, 3, 4])
        #expect(sequencer.earlyReleases == 1)
        #expect(sequencer.heldUpdateCount == 1)
        #expect(sequencer.skippedSeqs == 1)
    }

    @Test func totalOverflowSkipsTheEarliestGap() {
        var sequencer = BadgeSequencer<String>(reorderWindowMs: 60_000, maxHeldPerUser: 10, maxHeldTotal: 2)
        _ = sequencer.offer(update("a", 2), now: 0)
        _ = sequencer.offer(update("b", 2), now: 1)
        let released = sequencer.offer(update("c", 2), now: 2)
        #expect(released.map(\.update.user) == ["a"])
        #expect(sequencer.heldUpdateCount == 2)
        #expect(sequencer.earlyReleases == 1)
    }

    @Test func usersAreIndependent() {
        var sequencer = BadgeSequencer<String>(reorderWindowMs: 100)
        _ = sequencer.offer(update("a", 2), now: 0)
        #expect(sequencer.offer(update("b", 1), now: 0).count == 1)
        #expect(sequencer.tick(now: 100).map(\.update.user) == ["a"])
    }

    /// The seed's flicker: 10 increments arriving 1,3,2,4,10,8,5,6,7,9 and completions in random
    /// order (with retries and stale completions); the device's badges never go down and end at 10.
    @Test(arguments: 0..<50)
    func seedFlickerNeverShowsAnOlderBadge(seed: Int) {
        var random = SeededGenerator(seed: UInt64(seed))
        var sequencer = BadgeSequencer<Int>(reorderWindowMs: 2_000)
        var dispatcher = DeviceDispatcher<Int>()
        let device = token(1)
        var arrivals: [Int64] = [1, 3, 2, 4, 10, 8, 5, 6, 7, 9]
        var outstanding: [DeviceDispatch<Int>] = []
        var staleTickets: [DispatchTicket] = []
        var shown: [Int64] = []
        var now: Int64 = 0
        while !arrivals.isEmpty || !outstanding.isEmpty {
            now += 10
            if !arrivals.isEmpty && (outstanding.isEmpty || Bool.random(using: &random)) {
                let seq = arrivals.removeFirst()
                for outcome in sequencer.offer(BadgeUpdate(user: "u", seq: seq, operation: .increment(1), tag: Int(seq)), now: now) {
                    guard let state = outcome.appliedState else { continue }
                    let note = DeviceNotification(token: device, eventID: "e\(seq)", badge: state.badge, isBadgeOnly: true, payload: Int(state.badge))
                    outstanding += dispatcher.enqueue(note).send
                }
            } else {
                let pick = Int.random(in: 0..<outstanding.count, using: &random)
                let dispatch = outstanding.remove(at: pick)
                let reachedDevice = Bool.random(using: &random)
                if reachedDevice, let badge = dispatch.notification.badge { shown.append(badge) }
                let outcome: DispatchOutcome = reachedDevice || dispatch.attempt >= 3 ? .finished : .retry
                if Int.random(in: 0..<4, using: &random) == 0, let stale = staleTickets.randomElement(using: &random) {
                    #expect(dispatcher.complete(stale, outcome: .finished).send.isEmpty)
                }
                staleTickets.append(dispatch.ticket)
                outstanding += dispatcher.complete(dispatch.ticket, outcome: outcome).send
                if !reachedDevice && outcome == .finished, let badge = dispatch.notification.badge {
                    // Gave up after 3 attempts: the device may still have it; model the worst case.
                    shown.append(badge)
                }
            }
        }
        #expect(zip(shown, shown.dropFirst()).allSatisfy { $0 <= $1 }, "device showed \(shown)")
        #expect(shown.last == 10)
        #expect(sequencer.ledger["u"] == UserBadgeState(badge: 10, lastSeq: 10))
        #expect(dispatcher.pendingCount == 0)
    }
}

@Suite struct SequencedEventsWithoutBadgeTests {
    @Test func eventWithoutBadgeIsOrderedAndDeduplicatedButKeepsTheCount() throws {
        let alert = try PushEventDecoder().decode(Array(#"{"id":"a","user":"u","seq":2,"apns":{"payload":{"aps":{"alert":"hi"}}}}"#.utf8))
        let badge = try PushEventDecoder().decode(Array(#"{"id":"b","user":"u","seq":1,"badge":{"set":4}}"#.utf8))
        var sequencer = BadgeSequencer<String>()
        let alertUpdate = try #require(alert.ledgerUpdate(tag: alert.id))
        let badgeUpdate = try #require(badge.ledgerUpdate(tag: badge.id))
        #expect(sequencer.offer(alertUpdate, now: 0).isEmpty)  // waits for seq 1
        let outcomes = sequencer.offer(badgeUpdate, now: 1)
        #expect(outcomes.map(\.update.tag) == ["b", "a"])
        #expect(outcomes.map(\.appliedState) == [UserBadgeState(badge: 4, lastSeq: 1), UserBadgeState(badge: 4, lastSeq: 2)])
        #expect(sequencer.offer(alertUpdate, now: 2).map(\.isDuplicate) == [true])
    }
}
