// Per-user badge counts applied in `seq` order exactly once.
//
// The ledger is the only state kept for every user (16 bytes of value beyond the key);
// events waiting for a gap live in a separate, bounded side table that is empty for users
// whose events arrive in order.

/// A user's badge state: the count and the last applied `seq` (0 when no numbered event has
/// been applied; producers number from 1).
public struct UserBadgeState: Sendable, Equatable, Hashable {
    /// The user's badge count after the last applied event.
    public var badge: Int64
    /// The highest `seq` applied for the user, 0 if none.
    public var lastSeq: Int64

    /// Creates a state.
    public init(badge: Int64, lastSeq: Int64) {
        self.badge = badge
        self.lastSeq = lastSeq
    }
}

/// The badge counts of the users of one partition.
public struct BadgeLedger: Sendable, Equatable {
    private var states = UserStateTable()

    /// An empty ledger.
    public init() {}

    /// The user's state, `nil` for a user never seen (count 0, no seq applied).
    public subscript(user: String) -> UserBadgeState? {
        get { states[user] }
        set { states[user] = newValue }
    }

    /// The number of users with state.
    public var userCount: Int { states.count }

    /// Every user's state (for snapshots and tests).
    public var allStates: [String: UserBadgeState] {
        var all: [String: UserBadgeState] = [:]
        all.reserveCapacity(states.count)
        states.forEach { all[$0] = $1 }
        return all
    }

    /// Makes room for `userCount` users up front (restore, benchmarks).
    public mutating func reserveCapacity(_ userCount: Int) { states.reserveCapacity(userCount) }

    /// Same users with the same states.
    public static func == (lhs: BadgeLedger, rhs: BadgeLedger) -> Bool {
        guard lhs.userCount == rhs.userCount else { return false }
        var equal = true
        lhs.states.forEach { user, state in
            if equal && rhs.states[user] != state { equal = false }
        }
        return equal
    }
}

/// One badge change offered to the sequencer. `Tag` is whatever the caller needs back when
/// the change is applied (the decoded event, an offset…).
public struct BadgeUpdate<Tag: Sendable>: Sendable {
    /// The user whose count changes.
    public var user: String
    /// The user's sequence number; `nil` applies the update on arrival.
    public var seq: Int64?
    /// The change; `nil` for an event without a badge, which is still ordered and deduplicated
    /// by its seq and moves `lastSeq`, but leaves the count alone.
    public var operation: BadgeOperation?
    /// Caller context handed back with the outcome.
    public var tag: Tag

    /// Creates an update.
    public init(user: String, seq: Int64?, operation: BadgeOperation?, tag: Tag) {
        self.user = user
        self.seq = seq
        self.operation = operation
        self.tag = tag
    }
}

extension BadgeUpdate: Equatable where Tag: Equatable {}

/// What happened to an offered update.
public enum SequencerOutcome<Tag: Sendable>: Sendable {
    /// Applied: `badge` is the user's count right after it, `state` the user's full state then.
    /// `skippedSeqs` counts the seqs given up on (gap timed out or overflow) just before it.
    case applied(BadgeUpdate<Tag>, state: UserBadgeState, skippedSeqs: Int64)
    /// Not applied: its seq was already applied (or already waiting) for the user.
    case duplicate(BadgeUpdate<Tag>, lastAppliedSeq: Int64)

    /// The update the outcome is about.
    public var update: BadgeUpdate<Tag> {
        switch self {
        case .applied(let update, _, _), .duplicate(let update, _): return update
        }
    }
}

extension SequencerOutcome: Equatable where Tag: Equatable {}

/// Applies badge updates per user in `seq` order, exactly once, waiting a bounded time for gaps.
///
/// - An update whose seq is `lastSeq + 1` is applied at once, then any waiting successors.
/// - A higher seq waits (is held) until the gap fills, or until `reorderWindowMs` after the
///   earliest held update of the user arrived; then the gap is skipped (``skippedSeqs``).
/// - A seq <= the last applied one (or equal to one already held) is a `duplicate`.
/// - An update without seq is applied on arrival, on top of what is applied so far; it does not
///   wait for held updates and does not move `lastSeq`.
/// - Held updates are bounded: more than `maxHeldPerUser` for one user, or `maxHeldTotal` in all,
///   skips the oldest gap early (the user's, or the one with the earliest deadline), counted in
///   ``earlyReleases``. Memory for waiting updates is therefore bounded whatever the input.
///
/// Time is an injected millisecond clock (`now`); call ``tick(now:)`` at ``nextDeadline``.
public struct BadgeSequencer<Tag: Sendable>: Sendable {
    /// How long a gap is waited for, in milliseconds (`relay.reorder_window_ms`).
    public let reorderWindowMs: Int64
    /// Held updates allowed for one user before its gap is skipped early.
    public let maxHeldPerUser: Int
    /// Held updates allowed in all before the earliest gap is skipped early.
    public let maxHeldTotal: Int

    /// The counts; restore it before offering updates.
    public var ledger: BadgeLedger

    /// Seqs skipped because their gap timed out or the held table overflowed.
    public private(set) var skippedSeqs: Int64 = 0
    /// Gaps skipped (each may span several seqs).
    public private(set) var skippedGaps: Int = 0
    /// Gaps skipped before their deadline because held updates overflowed.
    public private(set) var earlyReleases: Int = 0
    /// Updates refused as duplicates.
    public private(set) var duplicates: Int = 0

    private struct HeldUpdate: Sendable {
        var update: BadgeUpdate<Tag>
        var seq: Int64
        var arrivedAt: Int64
    }

    private struct HeldQueue: Sendable {
        var updates: [HeldUpdate]  // sorted by seq, no two equal
        var deadline: Int64
    }

    private var held: [String: HeldQueue] = [:]
    private var heldCount = 0
    private var deadlines = DeadlineHeap()

    /// A sequencer over `ledger` (empty by default).
    public init(reorderWindowMs: Int64 = 2_000, maxHeldPerUser: Int = 256, maxHeldTotal: Int = 100_000,
                ledger: BadgeLedger = BadgeLedger()) {
        self.reorderWindowMs = max(0, reorderWindowMs)
        self.maxHeldPerUser = max(1, maxHeldPerUser)
        self.maxHeldTotal = max(1, maxHeldTotal)
        self.ledger = ledger
    }

    /// Updates waiting for a gap to fill.
    public var heldUpdateCount: Int { heldCount }

    /// When ``tick(now:)`` should next be called, or `nil` when nothing waits. It may be earlier
    /// than necessary (a gap that already filled); such a tick simply returns nothing.
    public var nextDeadline: Int64? { deadlines.minimum?.deadline }

    /// Offers an update at time `now`; returns what was applied or refused as a result, in order
    /// (the update itself, possibly followed by held successors it unblocked).
    public mutating func offer(_ update: BadgeUpdate<Tag>, now: Int64) -> [SequencerOutcome<Tag>] {
        var outcomes: [SequencerOutcome<Tag>] = []
        let state = ledger[update.user] ?? UserBadgeState(badge: 0, lastSeq: 0)
        guard let seq = update.seq else {
            let applied = UserBadgeState(badge: update.operation?.applied(to: state.badge) ?? state.badge, lastSeq: state.lastSeq)
            ledger[update.user] = applied
            outcomes.append(.applied(update, state: applied, skippedSeqs: 0))
            return outcomes
        }
        if seq <= state.lastSeq {
            duplicates += 1
            outcomes.append(.duplicate(update, lastAppliedSeq: state.lastSeq))
            return outcomes
        }
        if seq == state.lastSeq + 1 {
            apply(update, seq: seq, skipped: 0, into: &outcomes)
            drainContiguous(user: update.user, now: now, into: &outcomes)
            return outcomes
        }
        hold(update, seq: seq, now: now, lastAppliedSeq: state.lastSeq, into: &outcomes)
        return outcomes
    }

    /// Skips every gap whose deadline is at or before `now` and returns what that applied.
    public mutating func tick(now: Int64) -> [SequencerOutcome<Tag>] {
        var outcomes: [SequencerOutcome<Tag>] = []
        while let earliest = deadlines.minimum, earliest.deadline <= now {
            deadlines.removeMinimum()
            guard let queue = held[earliest.user], queue.deadline == earliest.deadline else { continue }
            skipGap(user: earliest.user, now: now, into: &outcomes)
        }
        return outcomes
    }

    /// Drops every held update (partition revoked); the ledger is kept.
    public mutating func dropHeld() {
        held.removeAll()
        heldCount = 0
        deadlines = DeadlineHeap()
    }

    private mutating func apply(_ update: BadgeUpdate<Tag>, seq: Int64, skipped: Int64, into outcomes: inout [SequencerOutcome<Tag>]) {
        let before = ledger[update.user] ?? UserBadgeState(badge: 0, lastSeq: 0)
        let after = UserBadgeState(badge: update.operation?.applied(to: before.badge) ?? before.badge, lastSeq: seq)
        ledger[update.user] = after
        outcomes.append(.applied(update, state: after, skippedSeqs: skipped))
    }

    private mutating func hold(_ update: BadgeUpdate<Tag>, seq: Int64, now: Int64, lastAppliedSeq: Int64,
                               into outcomes: inout [SequencerOutcome<Tag>]) {
        let entry = HeldUpdate(update: update, seq: seq, arrivedAt: now)
        if var queue = held[update.user] {
            let position = queue.updates.firstIndex(where: { $0.seq >= seq }) ?? queue.updates.count
            if position < queue.updates.count, queue.updates[position].seq == seq {
                duplicates += 1
                outcomes.append(.duplicate(update, lastAppliedSeq: lastAppliedSeq))
                return
            }
            queue.updates.insert(entry, at: position)
            held[update.user] = queue
        } else {
            let deadline = now.addingReportingOverflow(reorderWindowMs)
            let queue = HeldQueue(updates: [entry], deadline: deadline.overflow ? Int64.max : deadline.partialValue)
            held[update.user] = queue
            deadlines.insert(DeadlineEntry(deadline: queue.deadline, user: update.user))
        }
        heldCount += 1

        // Overflow: give up on the oldest gap rather than grow without bound.
        if let queue = held[update.user], queue.updates.count > maxHeldPerUser {
            earlyReleases += 1
            skipGap(user: update.user, now: now, into: &outcomes)
        }
        while heldCount > maxHeldTotal, let earliest = deadlines.minimum {
            deadlines.removeMinimum()
            guard let queue = held[earliest.user], queue.deadline == earliest.deadline else { continue }
            earlyReleases += 1
            skipGap(user: earliest.user, now: now, into: &outcomes)
        }
        compactDeadlinesIfStale()
    }

    /// Applies the user's lowest held update despite the gap below it, then its successors.
    private mutating func skipGap(user: String, now: Int64, into outcomes: inout [SequencerOutcome<Tag>]) {
        guard var queue = held[user], !queue.updates.isEmpty else { return }
        let first = queue.updates.removeFirst()
        heldCount -= 1
        if queue.updates.isEmpty { held[user] = nil } else { held[user] = queue }
        let lastSeq = ledger[user]?.lastSeq ?? 0
        let skipped = first.seq - lastSeq - 1
        skippedSeqs += skipped
        skippedGaps += 1
        apply(first.update, seq: first.seq, skipped: skipped, into: &outcomes)
        drainContiguous(user: user, now: now, into: &outcomes, rearm: true)
    }

    /// Applies held updates that follow the last applied seq; re-arms the gap deadline for what
    /// remains, measured from the earliest remaining update's arrival.
    /// `rearm` forces a new heap entry: the caller consumed the one for the old deadline.
    private mutating func drainContiguous(user: String, now: Int64, into outcomes: inout [SequencerOutcome<Tag>],
                                          rearm: Bool = false) {
        guard var queue = held[user] else { return }
        var lastSeq = ledger[user]?.lastSeq ?? 0
        var appliedAny = false
        while let first = queue.updates.first, first.seq == lastSeq + 1 {
            queue.updates.removeFirst()
            heldCount -= 1
            apply(first.update, seq: first.seq, skipped: 0, into: &outcomes)
            lastSeq = first.seq
            appliedAny = true
        }
        if queue.updates.isEmpty {
            held[user] = nil
            return
        }
        let earliestArrival = queue.updates.map(\.arrivedAt).min() ?? now
        let deadline = earliestArrival.addingReportingOverflow(reorderWindowMs)
        let newDeadline = deadline.overflow ? Int64.max : deadline.partialValue
        if newDeadline != queue.deadline || appliedAny || rearm {
            queue.deadline = newDeadline
            deadlines.insert(DeadlineEntry(deadline: newDeadline, user: user))
        }
        held[user] = queue
    }

    /// Stale heap entries (gaps that filled) are skipped lazily; rebuild when they dominate.
    private mutating func compactDeadlinesIfStale() {
        guard deadlines.count > 2 * held.count + 1_024 else { return }
        var rebuilt = DeadlineHeap()
        for (user, queue) in held { rebuilt.insert(DeadlineEntry(deadline: queue.deadline, user: user)) }
        deadlines = rebuilt
    }
}

struct DeadlineEntry: Sendable {
    var deadline: Int64
    var user: String
}

/// A binary min-heap of gap deadlines.
struct DeadlineHeap: Sendable {
    private var entries: [DeadlineEntry] = []

    var count: Int { entries.count }
    var minimum: DeadlineEntry? { entries.first }

    mutating func insert(_ entry: DeadlineEntry) {
        entries.append(entry)
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].deadline < entries[parent].deadline else { break }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    mutating func removeMinimum() {
        guard !entries.isEmpty else { return }
        entries.swapAt(0, entries.count - 1)
        entries.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < entries.count, entries[left].deadline < entries[smallest].deadline { smallest = left }
            if right < entries.count, entries[right].deadline < entries[smallest].deadline { smallest = right }
            if smallest == parent { return }
            entries.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
