import Testing

@testable import RelayCore

/// The plan of `apns-relay partitions migrate`: every user's state moved to its home under the new layout, read again
/// from the changelogs each time, so a run stopped midway finishes when run again.
@Suite("Layout migration: moving badge state to the users' homes")
struct LayoutMigrationTests {
    @Test("the migration moves every user home (a forward mark keeps what was applied where it was), records the layout, and a run stopped midway finishes when run again")
    func migrationPlan() {
        let old = PartitionLayout(partitionCount: 2)
        let users = (0..<40).map { "user-\($0)" }
        var changelogs = [RestoredChangelog(), RestoredChangelog(), RestoredChangelog(), RestoredChangelog()]
        for partition in 0..<2 { changelogs[partition].add(key: PartitionLayout.recordKey[...], value: old.encoded()[...]) }
        for (index, user) in users.enumerated() {
            changelogs[Int(old.home(of: user))].add(key: Array(user.utf8)[...],
                                                    value: BadgeStateRecord(badge: Int64(index), seq: 3, offset: 100 + Int64(index), updatedAt: 1).encoded()[...])
        }
        let plan = LayoutMigration(changelogs: changelogs, layout: RelayEngineHomesTests.layout, now: 9)
        let moving = users.filter { old.home(of: $0) != RelayEngineHomesTests.layout.home(of: $0) }
        #expect(!moving.isEmpty)
        #expect(plan.moves.map(\.user).sorted() == moving.sorted())
        #expect(plan.usersInPlace == users.count - moving.count)
        #expect(plan.conflicts.isEmpty)
        #expect(plan.layoutRecords == [0, 1, 2, 3])
        for move in plan.moves {
            #expect(move.to == RelayEngineHomesTests.layout.home(of: move.user) && !move.written)
            #expect(move.record.offset == -1 && move.record.forwarded == [ForwardSource(partition: move.from, offset: 100 + Int64(users.firstIndex(of: move.user)!))])
        }
        // Stopped after the first half of the moves' writes (and none of their tombstones).
        var applied = changelogs
        for move in plan.moves.prefix(plan.moves.count / 2) { applied[Int(move.to)].add(key: Array(move.user.utf8)[...], value: move.record.encoded()[...]) }
        let again = LayoutMigration(changelogs: applied, layout: RelayEngineHomesTests.layout, now: 10)
        #expect(again.moves.map(\.user).sorted() == moving.sorted())
        #expect(again.moves.filter(\.written).count == plan.moves.count / 2)
        #expect(again.conflicts.isEmpty, "a finished write is no split count")
        // Finished: nothing left.
        for move in again.moves {
            if !move.written { applied[Int(move.to)].add(key: Array(move.user.utf8)[...], value: move.record.encoded()[...]) }
            applied[Int(move.from)].add(key: Array(move.user.utf8)[...], value: nil)
        }
        for partition in again.layoutRecords { applied[Int(partition)].add(key: PartitionLayout.recordKey[...], value: RelayEngineHomesTests.layout.encoded()[...]) }
        #expect(LayoutMigration(changelogs: applied, layout: RelayEngineHomesTests.layout, now: 11).isDone)
    }

    @Test("a user counted in two partitions (producers keyed two ways before the relay placed users) keeps the state with the highest seq")
    func migrationOfASplitCount() {
        let user = RelayEngineHomesTests.user(homedAt: 2)
        var changelogs = [RestoredChangelog(), RestoredChangelog(), RestoredChangelog(), RestoredChangelog()]
        changelogs[0].add(key: Array(user.utf8)[...], value: BadgeStateRecord(badge: 8, seq: 23, offset: 5, updatedAt: 1).encoded()[...])
        changelogs[2].add(key: Array(user.utf8)[...], value: BadgeStateRecord(badge: 4, seq: 10, offset: 7, updatedAt: 1).encoded()[...])
        let plan = LayoutMigration(changelogs: changelogs, layout: RelayEngineHomesTests.layout, now: 9)
        #expect(plan.conflicts == [LayoutMigration.Conflict(user: user, partitions: [0, 2], kept: 0)])
        #expect(plan.moves.count == 1 && plan.moves.first?.record.badge == 8 && plan.moves.first?.record.seq == 23)
    }

}
