import APNsCore
import Testing
@testable import RelayCore

@Suite("A partition's badge state: restore, updates, revoke, the push.badge-state record")
struct BadgePartitionTests {
    @Test func restoreLastValueWinsAndNullDeletes() {
        var partition = BadgePartition<String>(sequencer: BadgeSequencer())
        #expect(partition.phase == .restoring)
        partition.restore(key: slice(Array("a".utf8)), value: slice(BadgeStateRecord(badge: 1, seq: 1, updatedAt: 1).encoded()), now: 0)
        partition.restore(key: slice(Array("b".utf8)), value: slice(BadgeStateRecord(badge: 9, seq: 4, updatedAt: 1).encoded()), now: 0)
        partition.restore(key: slice(Array("a".utf8)), value: slice(BadgeStateRecord(badge: 5, seq: 7, offset: 30, updatedAt: 2).encoded()), now: 0)
        partition.restore(key: slice(Array("b".utf8)), value: nil, now: 0)
        do { let result = partition.restore(key: slice(Array("c".utf8)), value: slice(Array("garbage".utf8)), now: 0); #expect(!result) }
        #expect(partition.unreadableStateRecords == 1)
        partition.finishRestore()
        #expect(partition.sequencer.ledger.allStates == [UserKey("a"): UserBadgeState(badge: 5, lastSeq: 7, lastPosition: 30)])
    }

    @Test func restoreReadsTheProgressMarkerAndSkippedSeqsOnTheSequencersClock() throws {
        var partition = BadgePartition<String>(sequencer: BadgeSequencer())
        let marker = ProgressMarker(through: 40, open: [12, 17])
        partition.restore(key: slice(ProgressMarker.key), value: slice(marker.encoded(at: 5)), now: 0)
        // Skipped at epoch 9_000; now is epoch 10_000 = monotonic 500, so monotonic -500.
        let skipped = [SkippedSeqs(lower: 2, upper: 3, skippedAt: 9_000)]
        partition.restore(key: slice(Array("a".utf8)), value: slice(BadgeStateRecord(badge: 1, seq: 4, offset: 8, skipped: skipped, updatedAt: 9_000).encoded()),
                          now: RelayTime(monotonic: 500, epoch: 10_000))
        partition.finishRestore()
        #expect(partition.previousProgress == marker)
        #expect(partition.sequencer.ledger.skippedSeqs(of: "a") == [SkippedSeqs(lower: 2, upper: 3, skippedAt: -500)])
        #expect(try BadgeStateRecord.decode(BadgeStateRecord(badge: 1, seq: 4, offset: 8, skipped: skipped, updatedAt: 9_000).encoded())
                == BadgeStateRecord(badge: 1, seq: 4, offset: 8, skipped: skipped, updatedAt: 9_000))
        #expect(throws: EventRejection.self) { try BadgeStateRecord.decode(Array(#"{"badge":1,"seq":1,"skipped":[[3,2,0]]}"#.utf8)) }
        // A user whose id is the marker key's text is still a user: the key is not UTF-8.
        #expect(String(decoding: ProgressMarker.key, as: UTF8.self).utf8.elementsEqual(ProgressMarker.key) == false)
    }

    @Test func updatesAreRefusedUntilRestoredThenRun() {
        var partition = BadgePartition<String>(sequencer: BadgeSequencer())
        let early = BadgeUpdate(user: "a", seq: 7, operation: .increment(1), tag: "dup")
        let next = BadgeUpdate(user: "a", seq: 8, operation: .increment(1), tag: "new")
        guard case .refused = partition.offer(early, now: 0) else { Issue.record("should refuse while restoring"); return }
        #expect(partition.tick(now: 10_000).isEmpty)
        partition.restore(key: slice(Array("a".utf8)), value: slice(BadgeStateRecord(badge: 5, seq: 7, updatedAt: 2).encoded()), now: 0)
        partition.finishRestore()
        var outcomes: [SequencerOutcome<String>] = []
        for update in [early, next] {
            guard case .processed(let step) = partition.offer(update, now: 1) else { Issue.record("should process"); return }
            outcomes += step
        }
        #expect(outcomes.map(\.isDuplicate) == [true, false])
        #expect(outcomes.last?.appliedState == UserBadgeState(badge: 6, lastSeq: 8))
        do { let result = partition.restore(key: slice(Array("a".utf8)), value: nil, now: 0); #expect(!result) }  // restore is over
        guard case .processed(let more) = partition.offer(BadgeUpdate(user: "a", seq: 9, operation: .set(0), tag: "x"), now: 2) else {
            Issue.record("should process"); return
        }
        #expect(more.first?.appliedState?.badge == 0)
    }

    @Test func revokeDropsStateAndRefuses() {
        var partition = BadgePartition<String>(sequencer: BadgeSequencer())
        partition.finishRestore()
        _ = partition.offer(BadgeUpdate(user: "a", seq: 1, operation: .set(3), tag: ""), now: 0)
        _ = partition.offer(BadgeUpdate(user: "a", seq: 3, operation: .set(3), tag: ""), now: 0)
        partition.revoke()
        #expect(partition.phase == .revoked)
        #expect(partition.sequencer.ledger.userCount == 0)
        #expect(partition.sequencer.heldUpdateCount == 0)
        guard case .refused = partition.offer(BadgeUpdate(user: "a", seq: 2, operation: .set(3), tag: ""), now: 0) else {
            Issue.record("should refuse"); return
        }
    }

    @Test func badgeStateRecordRoundTrips() throws {
        let record = BadgeStateRecord(badge: 4, seq: 17, updatedAt: 1_795_000_000_000)
        #expect(String(decoding: record.encoded(), as: UTF8.self) == #"{"badge":4,"seq":17,"updated_at":1795000000000}"#)
        #expect(try BadgeStateRecord.decode(record.encoded()) == record)
        #expect(throws: EventRejection.self) { try BadgeStateRecord.decode(Array(#"{"badge":-1,"seq":1}"#.utf8)) }
        #expect(throws: EventRejection.self) { try BadgeStateRecord.decode(Array(#"{"badge":1,"seq":"1"}"#.utf8)) }
    }
}

@Suite("A restore decoded as it is read")
struct RestoredChangelogTests {
    /// A random changelog: states (some with skipped seqs), tombstones, unreadable values and
    /// progress markers (readable, tombstoned, unreadable) for a few users, in random order.
    private func randomRecords(seed: UInt64, count: Int) -> [(key: [UInt8], value: [UInt8]?)] {
        var random = SplitMix64(seed: seed)
        return (0..<count).map { _ -> (key: [UInt8], value: [UInt8]?) in
            let roll = Int.random(in: 0..<20, using: &random)
            if roll == 0 { return (ProgressMarker.key, ProgressMarker(through: Int64.random(in: 0...99, using: &random), open: [3]).encoded(at: 1)) }
            if roll == 1 { return (ProgressMarker.key, Bool.random(using: &random) ? nil : Array("garbage".utf8)) }
            let key = Array("u-\(Int.random(in: 0..<8, using: &random))".utf8)
            switch roll {
            case 2, 3: return (key, nil)
            case 4: return (key, Array("{\"badge\":".utf8))
            default:
                let seq = Int64.random(in: 1...50, using: &random)
                let skipped = seq > 3 && Bool.random(using: &random) ? [SkippedSeqs(lower: 1, upper: seq - 2, skippedAt: 9_000)] : []
                return (key, BadgeStateRecord(badge: seq * 2, seq: seq, offset: seq, skipped: skipped, updatedAt: 9_000).encoded())
            }
        }
    }

    @Test("decoding as read and keeping the last per key restores what applying every record in order does", arguments: [1, 2, 3, 4, 5] as [UInt64])
    func sameAsRecordByRecord(seed: UInt64) {
        let records = randomRecords(seed: seed, count: 400)
        let now = RelayTime(monotonic: 500, epoch: 10_000)
        var oneByOne = BadgePartition<String>(sequencer: BadgeSequencer())
        for record in records { oneByOne.restore(key: slice(record.key), value: record.value?[...], now: now) }
        var changelog = RestoredChangelog()
        for record in records { changelog.add(key: slice(record.key), value: record.value?[...]) }
        var decoded = BadgePartition<String>(sequencer: BadgeSequencer())
        decoded.restore(changelog, now: now)

        #expect(changelog.records == records.count)
        #expect(decoded.sequencer.ledger.allStates == oneByOne.sequencer.ledger.allStates)
        for user in (0..<8).map({ "u-\($0)" }) {
            #expect(decoded.sequencer.ledger.skippedSeqs(of: user) == oneByOne.sequencer.ledger.skippedSeqs(of: user), "skipped seqs of \(user)")
        }
        #expect(decoded.previousProgress == oneByOne.previousProgress)
        #expect(decoded.unreadableStateRecords == oneByOne.unreadableStateRecords && decoded.unreadableStateRecords > 0)
    }

    @Test("an unreadable record leaves the user's previous value; a tombstone after it deletes the user")
    func unreadableKeepsPrevious() {
        var changelog = RestoredChangelog()
        changelog.add(key: slice(Array("a".utf8)), value: slice(BadgeStateRecord(badge: 3, seq: 3, updatedAt: 1).encoded()))
        let readable = changelog.add(key: slice(Array("a".utf8)), value: slice(Array("not json".utf8)))
        #expect(!readable)
        changelog.add(key: slice(Array("b".utf8)), value: slice(BadgeStateRecord(badge: 1, seq: 1, updatedAt: 1).encoded()))
        changelog.add(key: slice(Array("b".utf8)), value: nil)
        #expect(changelog.users[UserKey("a")] == .state(UserBadgeState(badge: 3, lastSeq: 3), skipped: []))
        #expect(changelog.users[UserKey("b")] == .deleted)
        #expect(changelog.unreadable == 1 && !changelog.sawProgress)
    }
}
