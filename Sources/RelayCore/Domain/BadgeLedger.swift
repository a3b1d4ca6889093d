// The badge ledger: per-user counts and the seqs each skipped recently.

/// A user's badge state: the count, the last applied `seq` (0 when no numbered event has been
/// applied; producers number from 1) and the input position of the newest event applied.
package struct UserBadgeState: Sendable, Equatable, Hashable {
    /// The user's badge count after the last applied event.
    package var badge: Int64
    /// The highest `seq` applied for the user, 0 if none.
    package var lastSeq: Int64
    /// The highest input position (the events partition's offset) of an event applied to the
    /// user, -1 when none is known. A redelivered record at or below it was applied already.
    package var lastPosition: Int64

    /// Creates a state.
    package init(badge: Int64, lastSeq: Int64, lastPosition: Int64 = -1) {
        self.badge = badge
        self.lastSeq = lastSeq
        self.lastPosition = lastPosition
    }
}

/// Seqs of a user given up on when their gap's reorder window ran out (an inclusive range), and
/// when, on the sequencer's clock. One that arrives later is applied once, late.
package struct SkippedSeqs: Sendable, Equatable, Hashable {
    /// The first and last seq skipped.
    package var lower: Int64
    package var upper: Int64
    /// When they were skipped (the sequencer's clock, milliseconds).
    package var skippedAt: Int64

    /// Creates a range `lower...upper` skipped at `skippedAt`.
    package init(lower: Int64, upper: Int64, skippedAt: Int64) {
        self.lower = lower
        self.upper = upper
        self.skippedAt = skippedAt
    }

    /// True when `seq` is in the range.
    package func contains(_ seq: Int64) -> Bool { lower <= seq && seq <= upper }
}

/// The highest source offset of the events forwarded to a user from one events partition (``ForwardSource``).
package struct ForwardMark: Sendable, Equatable, Hashable {
    /// The events partition the forwards were read on.
    package var partition: Int32
    /// The highest offset there of a forward applied (or answered) for the user, by any owner.
    package var offset: Int64
    /// The highest offset of a forward this ledger's owner handled itself, `nil` before its first. A repeat at or
    /// below it is silent (the forward it repeats has its results from this owner); one between it and ``offset``
    /// repeats a previous owner's, whose notification a crash may have kept from going out: it is sent again.
    package var handledThrough: Int64?
    /// The offset in this events partition of the copy of the forward at ``offset``, when it was applied here (by any
    /// owner). Forwards from one partition land in the order they were read, so every forward at or below ``offset``
    /// has its copy at or below it: when a previous owner's progress marker says every record up to it is finished, a
    /// repeat of any of them has its results already.
    package var appliedAt: Int64?

    package init(partition: Int32, offset: Int64, handledThrough: Int64? = nil, appliedAt: Int64? = nil) {
        self.partition = partition
        self.offset = offset
        self.handledThrough = handledThrough
        self.appliedAt = appliedAt
    }
}

/// The badge counts of the users of one partition, and the seqs each skipped recently.
package struct BadgeLedger: Sendable, Equatable {
    private var states = UserStateTable()
    private var skipped: [UserKey: [SkippedSeqs]] = [:]
    /// Per user forwarded to, the highest forward seen per source partition; empty for users whose events are all
    /// read at home (the usual case).
    private var forwards: [UserKey: [ForwardMark]] = [:]

    /// An empty ledger.
    package init() {}

    /// The user's state, `nil` for a user never seen (count 0, no seq applied).
    package subscript(user: String) -> UserBadgeState? {
        get { states[user] }
        set { states[user] = newValue }
    }

    /// The seqs the user skipped and still remembers, lowest first.
    package func skippedSeqs(of user: String) -> [SkippedSeqs] { skipped[UserKey(user)] ?? [] }

    /// Replaces the user's remembered skipped seqs.
    package mutating func setSkippedSeqs(_ ranges: [SkippedSeqs], of user: String) {
        skipped[UserKey(user)] = ranges.isEmpty ? nil : ranges
    }

    /// The user's forward marks, one per source partition.
    package func forwardMarks(of user: String) -> [ForwardMark] {
        forwards.isEmpty ? [] : forwards[UserKey(user)] ?? []
    }

    /// The user's mark for forwards from `partition`, if any.
    package func forwardMark(of user: String, from partition: Int32) -> ForwardMark? {
        forwardMarks(of: user).first { $0.partition == partition }
    }

    /// Replaces the user's forward marks (a restore).
    package mutating func setForwardMarks(_ marks: [ForwardMark], of user: String) {
        forwards[UserKey(user)] = marks.isEmpty ? nil : marks
    }

    /// Notes a forward from `source` handled here, its copy at `position` in this events partition: its partition's
    /// mark moves up to it.
    package mutating func noteForward(_ source: ForwardSource, of user: String, at position: Int64?) {
        let key = UserKey(user)
        var marks = forwards[key] ?? []
        if let index = marks.firstIndex(where: { $0.partition == source.partition }) {
            if source.offset > marks[index].offset || (source.offset == marks[index].offset && marks[index].appliedAt == nil) {
                marks[index].appliedAt = position
            }
            marks[index].offset = max(marks[index].offset, source.offset)
            marks[index].handledThrough = max(marks[index].handledThrough ?? source.offset, source.offset)
        } else {
            marks.append(ForwardMark(partition: source.partition, offset: source.offset, handledThrough: source.offset, appliedAt: position))
        }
        forwards[key] = marks
    }

    /// True when no user remembers a skipped seq (the common case, checked before any lookup).
    package var hasNoSkippedSeqs: Bool { skipped.isEmpty }

    /// The number of users with state.
    package var userCount: Int { states.count }

    /// Every user's state (for snapshots and tests).
    package var allStates: [UserKey: UserBadgeState] {
        var all: [UserKey: UserBadgeState] = [:]
        all.reserveCapacity(states.count)
        states.forEach { all[UserKey($0)] = $1 }
        return all
    }

    /// Makes room for `userCount` users up front (restore, benchmarks).
    package mutating func reserveCapacity(_ userCount: Int) { states.reserveCapacity(userCount) }

    /// Same users with the same states and skipped seqs.
    package static func == (lhs: BadgeLedger, rhs: BadgeLedger) -> Bool {
        guard lhs.userCount == rhs.userCount, lhs.skipped == rhs.skipped, lhs.forwards == rhs.forwards else { return false }
        var equal = true
        lhs.states.forEach { user, state in
            if equal && rhs.states[user] != state { equal = false }
        }
        return equal
    }
}

/// How many skipped seqs are remembered per user, and for how long, so that one arriving late
/// is applied once rather than refused as a duplicate.
public struct LateSeqMemory: Sendable, Equatable {
    /// Skipped ranges kept per user; the oldest goes first.
    public var rangesPerUser: Int
    /// How long a skipped range is kept.
    public var duration: Duration

    /// The relay's bounds: 32 ranges per user, one hour.
    public static let standard = LateSeqMemory(rangesPerUser: 32, duration: .seconds(3_600))

    /// Creates bounds.
    public init(rangesPerUser: Int, duration: Duration) {
        self.rangesPerUser = max(0, rangesPerUser)
        self.duration = max(.zero, duration)
    }

    /// How long a skipped range is kept, in the sequencer's milliseconds.
    var milliseconds: Int64 { duration.inMilliseconds }
}
