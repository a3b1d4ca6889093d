// Moving users' badge state to their homes under a new layout (`apns-relay partitions migrate`).

/// What moves every user's badge state to the partition that is its home under `layout`, and records the layout in
/// every partition: the plan of `apns-relay partitions migrate`, from every `push.badge-state` partition read to its
/// end while no relay runs.
///
/// The writes go in the plan's order, each acknowledged before the next: a user's state is written at its new home
/// before it is deleted (a tombstone) where it was, and the layout records come last. A run stopped at any point is
/// finished by running it again: a user found at both partitions with the state the move writes is only deleted
/// where it was; relays refuse every partition until its layout record names the new layout.
package struct LayoutMigration: Sendable, Equatable {
    /// One user's state moving home.
    package struct Move: Sendable, Equatable {
        /// The user id, as the changelog's key.
        package var user: String
        /// Where the state is now, and its home.
        package var from: Int32
        package var to: Int32
        /// The record written at the home. Its `offset` (a position in the old partition) becomes a forward mark of
        /// that partition: an event of the user read there again (not yet committed) is forwarded home and
        /// recognised as applied already, never counted twice.
        package var record: BadgeStateRecord
        /// Whether the home already holds this state (a run stopped after the write): only the tombstone is left.
        package var written: Bool
    }

    /// A user counted in two partitions (a split count, left by producers keyed two ways before the relay placed
    /// users): the state with the highest seq (then the highest count) is kept.
    package struct Conflict: Sendable, Equatable {
        package var user: String
        package var partitions: [Int32]
        package var kept: Int32
    }

    /// The layout the plan places users for.
    package var layout: PartitionLayout
    /// Users to move, in partition and user order.
    package var moves: [Move]
    /// Users found in more than one partition.
    package var conflicts: [Conflict]
    /// Partitions whose layout record is missing or names another layout: written last.
    package var layoutRecords: [Int32]

    /// What each events partition's owner reads again when the relays start under the new layout, stored in the
    /// layout records.
    package var readAgain: [ReadAgain]

    /// Users whose state stays where it is.
    package var usersInPlace: Int

    /// When the plan was made: its records' `updated_at`.
    package var now: Int64

    /// The value of the layout records to write.
    package var layoutRecordValue: [UInt8] { layout.encoded(readAgain: readAgain, at: now) }

    /// Whether nothing is left to write: the layout holds everywhere.
    package var isDone: Bool { moves.isEmpty && layoutRecords.isEmpty }

    /// The plan for `changelogs` (partition `i` at index `i`, every partition of the topic, already grown to
    /// `layout.partitionCount`) and the group's `committed` offsets of the events partitions, its records stamped
    /// `now` (epoch milliseconds). An events partition without a committed offset is read from its start.
    package init(changelogs: [RestoredChangelog], layout: PartitionLayout, committed: [Int32: Int64] = [:], now: Int64) {
        precondition(changelogs.count == Int(layout.partitionCount), "one changelog per partition")
        self.layout = layout
        self.now = now
        readAgain = changelogs.indices.map { index in
            ReadAgain(partition: Int32(index), committed: committed[Int32(index)] ?? 0, progress: changelogs[index].progress)
        }
        // Every user's states, by partition.
        var found: [UserKey: [(partition: Int32, state: UserBadgeState, skipped: [SkippedSeqs], forwarded: [ForwardSource])]] = [:]
        for (index, changelog) in changelogs.enumerated() {
            for (user, entry) in changelog.users {
                // Where forwards were applied (`forwardedAt`) speaks of the partition they were read from; a move
                // leaves it out (a repeat at the new home is then sent again, never lost).
                guard case .state(let state, let skipped, let forwarded, _) = entry else { continue }
                found[user, default: []].append((Int32(index), state, skipped, forwarded))
            }
        }
        var moves: [Move] = []
        var conflicts: [Conflict] = []
        var inPlace = 0
        for (user, states) in found {
            let home = layout.home(of: user.id)
            // The state to keep: the one with the highest seq, then count (a state already at home wins a tie: it may
            // be a finished move's).
            let kept = states.max { lhs, rhs in
                (lhs.state.lastSeq, lhs.state.badge, lhs.partition == home ? 1 : 0) < (rhs.state.lastSeq, rhs.state.badge, rhs.partition == home ? 1 : 0)
            }!
            let strays = states.filter { $0.partition != home }
            if states.count > 1 && !Self.isUnfinishedMove(states, home: home) {
                conflicts.append(Conflict(user: user.id, partitions: states.map(\.partition).sorted(), kept: kept.partition))
            }
            guard !strays.isEmpty else {
                inPlace += 1
                continue
            }
            let atHome = states.first { $0.partition == home }
            var record: BadgeStateRecord
            if kept.partition == home {
                record = BadgeStateRecord(state: kept.state, skipped: kept.skipped, forwarded: kept.forwarded, updatedAt: now)
            } else {
                record = Self.moved(kept, now: now)
            }
            for stray in strays.sorted(by: { $0.partition < $1.partition }) {
                let written = atHome.map { $0.state.badge == record.badge && $0.state.lastSeq == record.seq } ?? false
                moves.append(Move(user: user.id, from: stray.partition, to: home, record: record, written: written || kept.partition == home))
            }
        }
        self.moves = moves.sorted { lhs, rhs in
            lhs.from != rhs.from ? lhs.from < rhs.from : lhs.user.utf8.lexicographicallyPrecedes(rhs.user.utf8)
        }
        self.conflicts = conflicts.sorted { $0.user.utf8.lexicographicallyPrecedes($1.user.utf8) }
        self.layoutRecords = changelogs.indices.filter { changelogs[$0].layout != layout }.map(Int32.init)
        self.usersInPlace = inPlace
    }

    /// The record a user's state takes at its new home: the old partition's position becomes a forward mark of it.
    private static func moved(_ state: (partition: Int32, state: UserBadgeState, skipped: [SkippedSeqs], forwarded: [ForwardSource]),
                              now: Int64) -> BadgeStateRecord {
        var forwarded = state.forwarded
        if state.state.lastPosition >= 0 {
            if let index = forwarded.firstIndex(where: { $0.partition == state.partition }) {
                forwarded[index].offset = max(forwarded[index].offset, state.state.lastPosition)
            } else {
                forwarded.append(ForwardSource(partition: state.partition, offset: state.state.lastPosition))
            }
        }
        return BadgeStateRecord(badge: state.state.badge, seq: state.state.lastSeq, offset: -1, skipped: state.skipped,
                                forwarded: forwarded.sorted { $0.partition < $1.partition }, updatedAt: now)
    }

    /// Two states of a user, one at home with the moved copy of the other's count and seq: a move a stopped run left
    /// unfinished, not a split count.
    private static func isUnfinishedMove(_ states: [(partition: Int32, state: UserBadgeState, skipped: [SkippedSeqs], forwarded: [ForwardSource])],
                                         home: Int32) -> Bool {
        guard states.count == 2, let atHome = states.first(where: { $0.partition == home }),
              let stray = states.first(where: { $0.partition != home }) else { return false }
        return atHome.state.badge == stray.state.badge && atHome.state.lastSeq == stray.state.lastSeq && atHome.state.lastPosition < 0
    }
}
