import Testing

@testable import RelayCore

@Suite("Badge ledger: per-user counts, skipped seqs and forward marks")
struct BadgeLedgerTests {
    @Test("a user never seen has no state; setting and clearing a state is seen in the count and in every state listed")
    func states() {
        var ledger = BadgeLedger()
        #expect(ledger["u"] == nil && ledger.userCount == 0 && ledger.allStates.isEmpty)
        ledger["u"] = UserBadgeState(badge: 3, lastSeq: 2, lastPosition: 40)
        ledger["v"] = UserBadgeState(badge: 0, lastSeq: 0)
        #expect(ledger["u"] == UserBadgeState(badge: 3, lastSeq: 2, lastPosition: 40))
        #expect(ledger["v"]?.lastPosition == -1, "no position known by default")
        ledger["u"] = UserBadgeState(badge: 4, lastSeq: 3, lastPosition: 41)
        #expect(ledger.userCount == 2)
        #expect(ledger.allStates == [UserKey("u"): UserBadgeState(badge: 4, lastSeq: 3, lastPosition: 41), UserKey("v"): UserBadgeState(badge: 0, lastSeq: 0)])
        ledger["u"] = nil
        ledger["never"] = nil
        #expect(ledger["u"] == nil && ledger.userCount == 1 && Array(ledger.allStates.keys) == [UserKey("v")])
    }

    @Test("user ids equal as Swift strings but not as bytes (NFC and NFD) are two users with two states")
    func usersByBytes() {
        var ledger = BadgeLedger()
        ledger["caf\u{E9}"] = UserBadgeState(badge: 1, lastSeq: 1)
        ledger["cafe\u{301}"] = UserBadgeState(badge: 2, lastSeq: 2)
        ledger.setSkippedSeqs([SkippedSeqs(lower: 5, upper: 5, skippedAt: 0)], of: "caf\u{E9}")
        #expect(ledger.userCount == 2)
        #expect(ledger["caf\u{E9}"]?.badge == 1 && ledger["cafe\u{301}"]?.badge == 2)
        #expect(ledger.skippedSeqs(of: "cafe\u{301}").isEmpty && ledger.skippedSeqs(of: "caf\u{E9}").count == 1)
        #expect(ledger.allStates.count == 2)
    }

    @Test("skipped seqs are stored as given and forgotten when set empty; a ledger with none says so without a lookup")
    func skippedSeqs() {
        var ledger = BadgeLedger()
        #expect(ledger.hasNoSkippedSeqs && ledger.skippedSeqs(of: "u").isEmpty)
        let ranges = [SkippedSeqs(lower: 2, upper: 3, skippedAt: 100), SkippedSeqs(lower: 7, upper: 7, skippedAt: 150)]
        ledger.setSkippedSeqs(ranges, of: "u")
        #expect(!ledger.hasNoSkippedSeqs && ledger.skippedSeqs(of: "u") == ranges && ledger.skippedSeqs(of: "v").isEmpty)
        // Skipped seqs alone make no state.
        #expect(ledger.userCount == 0 && ledger["u"] == nil)
        ledger.setSkippedSeqs([], of: "u")
        #expect(ledger.hasNoSkippedSeqs && ledger.skippedSeqs(of: "u").isEmpty)
        #expect(ledger == BadgeLedger())
    }

    @Test("a skipped range contains its bounds and what lies between, nothing outside")
    func skippedRange() {
        let range = SkippedSeqs(lower: 4, upper: 6, skippedAt: 0)
        #expect((1...9).filter { range.contains(Int64($0)) } == [4, 5, 6])
        #expect(SkippedSeqs(lower: 5, upper: 5, skippedAt: 0).contains(5))
        #expect(!SkippedSeqs(lower: 6, upper: 5, skippedAt: 0).contains(5) && !SkippedSeqs(lower: 6, upper: 5, skippedAt: 0).contains(6))
    }

    @Test("a forward noted from a new partition starts its mark at the forward; later ones move offset, handled-through and where it was applied up, never down")
    func noteForward() {
        var ledger = BadgeLedger()
        #expect(ledger.forwardMarks(of: "u").isEmpty && ledger.forwardMark(of: "u", from: 1) == nil)
        ledger.noteForward(ForwardSource(partition: 1, offset: 10), of: "u", at: 100)
        #expect(ledger.forwardMarks(of: "u") == [ForwardMark(partition: 1, offset: 10, handledThrough: 10, appliedAt: 100)])
        ledger.noteForward(ForwardSource(partition: 1, offset: 7), of: "u", at: 104)
        #expect(ledger.forwardMark(of: "u", from: 1) == ForwardMark(partition: 1, offset: 10, handledThrough: 10, appliedAt: 100))
        ledger.noteForward(ForwardSource(partition: 1, offset: 12), of: "u", at: 105)
        ledger.noteForward(ForwardSource(partition: 4, offset: 3), of: "u", at: 106)
        #expect(ledger.forwardMarks(of: "u") == [ForwardMark(partition: 1, offset: 12, handledThrough: 12, appliedAt: 105),
                                                 ForwardMark(partition: 4, offset: 3, handledThrough: 3, appliedAt: 106)])
        #expect(ledger.forwardMark(of: "u", from: 4)?.offset == 3 && ledger.forwardMark(of: "u", from: 2) == nil)
        #expect(ledger.forwardMarks(of: "v").isEmpty)
    }

    @Test("a restored mark from a previous owner keeps its offset; this owner's first forward below it starts handled-through there, without lowering the offset")
    func restoredMarks() {
        var ledger = BadgeLedger()
        ledger.setForwardMarks([ForwardMark(partition: 2, offset: 50)], of: "u")
        #expect(ledger.forwardMark(of: "u", from: 2) == ForwardMark(partition: 2, offset: 50, handledThrough: nil))
        ledger.noteForward(ForwardSource(partition: 2, offset: 45), of: "u", at: 300)
        #expect(ledger.forwardMark(of: "u", from: 2) == ForwardMark(partition: 2, offset: 50, handledThrough: 45))
        ledger.noteForward(ForwardSource(partition: 2, offset: 40), of: "u", at: 301)
        #expect(ledger.forwardMark(of: "u", from: 2)?.handledThrough == 45)
        ledger.noteForward(ForwardSource(partition: 2, offset: 60), of: "u", at: 302)
        #expect(ledger.forwardMark(of: "u", from: 2) == ForwardMark(partition: 2, offset: 60, handledThrough: 60, appliedAt: 302))
        // Set empty, the user's marks are gone.
        ledger.setForwardMarks([], of: "u")
        #expect(ledger.forwardMarks(of: "u").isEmpty && ledger == BadgeLedger())
    }

    @Test("random notes agree with a model: per partition the highest offset, and the highest this owner handled")
    func forwardsAgreeWithAModel() {
        var random = SeededGenerator(seed: 77)
        var ledger = BadgeLedger()
        var model: [String: [Int32: (offset: Int64, handled: Int64?)]] = [:]
        let users = ["a", "b", "c"]
        for _ in 0..<3_000 {
            let user = users.randomElement(using: &random)!
            let partition = Int32.random(in: 0..<5, using: &random)
            if Int.random(in: 0..<50, using: &random) == 0 {
                // A restore: marks without handled-through.
                let marks = (0..<Int32.random(in: 0..<3, using: &random)).map { ForwardMark(partition: $0, offset: Int64.random(in: 0...1_000, using: &random)) }
                ledger.setForwardMarks(marks, of: user)
                var restored: [Int32: (offset: Int64, handled: Int64?)] = [:]
                for mark in marks { restored[mark.partition] = (mark.offset, nil) }
                model[user] = restored
                continue
            }
            let offset = Int64.random(in: 0...1_000, using: &random)
            ledger.noteForward(ForwardSource(partition: partition, offset: offset), of: user, at: nil)
            let old = model[user]?[partition]
            model[user, default: [:]][partition] = (max(old?.offset ?? offset, offset), max(old?.handled ?? offset, offset))
            for user in users {
                let marks = ledger.forwardMarks(of: user)
                #expect(Set(marks.map(\.partition)).count == marks.count, "one mark per partition")
                #expect(marks.count == model[user]?.count ?? 0)
                for mark in marks {
                    #expect(model[user]?[mark.partition]?.offset == mark.offset && model[user]?[mark.partition]?.handled == mark.handledThrough)
                }
            }
        }
    }

    @Test("equality: same users, states, skipped seqs and forward marks, whatever order the users came in")
    func equality() {
        var first = BadgeLedger(), second = BadgeLedger()
        for index in 0..<50 { first["u\(index)"] = UserBadgeState(badge: Int64(index), lastSeq: 1) }
        for index in (0..<50).reversed() { second["u\(index)"] = UserBadgeState(badge: Int64(index), lastSeq: 1) }
        second.reserveCapacity(10_000)
        #expect(first == second)
        first.setSkippedSeqs([SkippedSeqs(lower: 1, upper: 1, skippedAt: 0)], of: "u1")
        #expect(first != second)
        second.setSkippedSeqs([SkippedSeqs(lower: 1, upper: 1, skippedAt: 0)], of: "u1")
        #expect(first == second)
        first.noteForward(ForwardSource(partition: 0, offset: 1), of: "u2", at: 9)
        #expect(first != second)
        second.noteForward(ForwardSource(partition: 0, offset: 1), of: "u2", at: 9)
        #expect(first == second)
        second["u3"] = UserBadgeState(badge: 3, lastSeq: 2)
        #expect(first != second)
        // Same users, one state differs.
        second["u3"] = UserBadgeState(badge: 3, lastSeq: 1, lastPosition: 0)
        #expect(first != second)
        second["u3"] = UserBadgeState(badge: 3, lastSeq: 1)
        #expect(first == second)
        // Same count, different users.
        first["x"] = UserBadgeState(badge: 0, lastSeq: 0)
        second["y"] = UserBadgeState(badge: 0, lastSeq: 0)
        #expect(first != second)
    }

    @Test("late-seq memory bounds are clamped to at least zero ranges and zero time, and read in milliseconds")
    func lateSeqMemory() {
        #expect(LateSeqMemory.standard.rangesPerUser == 32 && LateSeqMemory.standard.milliseconds == 3_600_000)
        let negative = LateSeqMemory(rangesPerUser: -3, duration: .seconds(-5))
        #expect(negative.rangesPerUser == 0 && negative.duration == .zero && negative.milliseconds == 0)
        #expect(LateSeqMemory(rangesPerUser: 1, duration: .milliseconds(1_500)).milliseconds == 1_500)
    }
}
