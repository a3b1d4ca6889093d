// Per-user badge counts applied in `seq` order exactly once.
//
// The ledger is the only state kept for every user (24 bytes of value beyond the key); events
// waiting for a gap and seqs remembered as skipped live in separate, bounded side tables that are
// empty for users whose events arrive in order.

import APNsCore

/// One badge change offered to the sequencer. `Tag` is whatever the caller needs back when
/// the change is applied (the decoded event, an offset…).
package struct BadgeUpdate<Tag: Sendable>: Sendable {
    /// The user whose count changes.
    package var user: String
    /// The user's sequence number; `nil` applies the update on arrival.
    package var seq: Int64?
    /// The change; `nil` for an event without a badge, which is still ordered and deduplicated
    /// by its seq and moves `lastSeq`, but leaves the count alone.
    package var operation: BadgeOperation?
    /// Where the update sits in its input (the events partition's offset), increasing in arrival
    /// order; `nil` when unknown. It tells a redelivered record from a new one.
    package var position: Int64?
    /// Where the event was read before it was forwarded to this partition, its user's home; `nil` when it was
    /// read here. A repeat of a forward already seen is not applied again.
    package var forwardedFrom: ForwardSource?
    /// Caller context handed back with the outcome.
    package var tag: Tag

    /// Creates an update.
    package init(user: String, seq: Int64?, operation: BadgeOperation?, position: Int64? = nil, forwardedFrom: ForwardSource? = nil, tag: Tag) {
        self.user = user
        self.seq = seq
        self.operation = operation
        self.position = position
        self.forwardedFrom = forwardedFrom
        self.tag = tag
    }
}

extension BadgeUpdate: Equatable where Tag: Equatable {}

/// What happened to an offered update.
package enum SequencerOutcome<Tag: Sendable>: Sendable {
    /// Applied: `badge` is the user's count right after it, `state` the user's full state then.
    /// `skippedSeqs` counts the seqs given up on (gap timed out or overflow) just before it.
    case applied(BadgeUpdate<Tag>, state: UserBadgeState, skippedSeqs: Int64)
    /// Applied although its seq had been skipped: an increment or decrement changes the count at
    /// the tail, a `set` (stale by now) leaves it; `lastSeq` stays. `state` is the state after it.
    case appliedLate(BadgeUpdate<Tag>, state: UserBadgeState)
    /// Applied before, by this ledger's history (a previous owner of the partition): a redelivered
    /// record at or below the user's last position. Not applied again; its notification may not
    /// have been sent, so it goes out again with `state`'s (current) count.
    case alreadyApplied(BadgeUpdate<Tag>, state: UserBadgeState)
    /// Not applied: its seq was already applied (or already waiting) for the user.
    case duplicate(BadgeUpdate<Tag>, lastAppliedSeq: Int64)
    /// Not applied and not answered: a forwarded event that repeats a forward this owner has handled (or holds), from
    /// a relay that forwarded it again after a crash. The forward it repeats carries its results.
    case repeatedForward(BadgeUpdate<Tag>)

    /// The update the outcome is about.
    package var update: BadgeUpdate<Tag> {
        switch self {
        case .applied(let update, _, _), .appliedLate(let update, _), .alreadyApplied(let update, _), .duplicate(let update, _),
             .repeatedForward(let update):
            return update
        }
    }
}

extension SequencerOutcome: Equatable where Tag: Equatable {}

extension SequencerOutcome {
    /// Whether the update changed the ledger (applied in order, or late): the ledger then noted its forward.
    var isApplied: Bool {
        switch self {
        case .applied, .appliedLate: true
        case .alreadyApplied, .duplicate, .repeatedForward: false
        }
    }
}

/// Applies badge updates per user in `seq` order, exactly once, waiting a bounded time for gaps.
///
/// - An update whose seq is `lastSeq + 1` is applied at once, then any waiting successors.
/// - A higher seq waits (is held) until the gap fills, or until `reorderWindowMs` after the
///   earliest held update of the user arrived; then the gap is skipped (``skippedSeqs``) and
///   remembered (at most ``LateSeqMemory/rangesPerUser`` ranges per user, for
///   ``LateSeqMemory/milliseconds``).
/// - A remembered skipped seq that arrives later is applied once, late (``SequencerOutcome/appliedLate(_:state:)``).
/// - Any other seq <= the last applied one (or equal to one already held) is a `duplicate`, unless
///   the update's position shows a redelivery of a record applied before (``SequencerOutcome/alreadyApplied(_:state:)``).
/// - An update without seq is applied on arrival, on top of what is applied so far; it does not
///   wait for held updates and does not move `lastSeq`. Redelivered (position at or below the
///   user's last position) it is not applied again.
/// - Held updates are bounded: more than `maxHeldPerUser` for one user, or `maxHeldTotal` in all,
///   skips the oldest gap early (the user's, or the one with the earliest deadline), counted in
///   ``earlyReleases``. Memory for waiting updates is therefore bounded whatever the input.
///
/// Every seq from 1 to `Int64.max` is valid; no arithmetic on them can trap.
/// Time is an injected millisecond clock (`now`, monotonic); call ``tick(now:)`` at ``nextDeadline``.
package struct BadgeSequencer<Tag: Sendable>: Sendable {
    /// How long a gap is waited for, in milliseconds (`relay.reorder_window_ms`).
    package let reorderWindowMs: Int64
    /// Held updates allowed for one user before its gap is skipped early.
    package let maxHeldPerUser: Int
    /// Held updates allowed in all before the earliest gap is skipped early.
    package let maxHeldTotal: Int
    /// How skipped seqs are remembered.
    package let lateSeqMemory: LateSeqMemory

    /// The counts; restore it before offering updates.
    package var ledger: BadgeLedger

    /// Seqs skipped because their gap timed out or the held table overflowed (saturating).
    package private(set) var skippedSeqs: Int64 = 0
    /// Gaps skipped (each may span several seqs).
    package private(set) var skippedGaps: Int = 0
    /// Gaps skipped before their deadline because held updates overflowed.
    package private(set) var earlyReleases: Int = 0
    /// Updates refused as duplicates.
    package private(set) var duplicates: Int = 0
    /// Skipped seqs that arrived later and were applied late.
    package private(set) var lateArrivals: Int = 0

    private struct HeldUpdate: Sendable {
        var update: BadgeUpdate<Tag>
        var seq: Int64
        var arrivedAt: Int64
    }

    private struct HeldQueue: Sendable {
        var updates: [HeldUpdate]  // sorted by seq, no two equal
        var deadline: Int64
    }

    private struct Redelivery: Hashable, Sendable {
        var user: UserKey
        var seq: Int64
    }

    private var held: [UserKey: HeldQueue] = [:]
    private var heldCount = 0
    /// Gap deadlines by user; an entry whose user's deadline moved is stale and skipped.
    private var deadlines = MinHeap<Int64, UserKey>()
    /// Redelivered seqs already answered with `alreadyApplied`: a second copy of one at or below
    /// the last position is a producer's duplicate. Only redeliveries enter it, so it is bounded by
    /// what a previous owner left unfinished.
    private var redelivered: Set<Redelivery> = []

    /// A sequencer over `ledger` (empty by default).
    package init(reorderWindowMs: Int64 = 2_000, maxHeldPerUser: Int = 256, maxHeldTotal: Int = 100_000,
                lateSeqMemory: LateSeqMemory = .standard, ledger: BadgeLedger = BadgeLedger()) {
        self.reorderWindowMs = max(0, reorderWindowMs)
        self.maxHeldPerUser = max(1, maxHeldPerUser)
        self.maxHeldTotal = max(1, maxHeldTotal)
        self.lateSeqMemory = lateSeqMemory
        self.ledger = ledger
    }

    /// The previous owner's progress, as the changelog's marker gave it at the restore: every record of the events
    /// partition up to this offset is finished (its results published). `nil`: no marker.
    package var previousFinishedThrough: Int64?

    /// Updates waiting for a gap to fill.
    package var heldUpdateCount: Int { heldCount }

    /// Whether updates of `user` wait for an earlier seq: a record of the user read now may be the one they wait for.
    package func isHolding(_ user: String) -> Bool { held[UserKey(user)] != nil }

    /// When ``tick(now:)`` should next be called, or `nil` when nothing waits. It may be earlier
    /// than necessary (a gap that already filled); such a tick simply returns nothing.
    package var nextDeadline: Int64? { deadlines.first?.key }

    /// Offers an update at time `now`; returns what was applied or refused as a result, in order
    /// (the update itself, possibly followed by held successors it unblocked).
    package mutating func offer(_ update: BadgeUpdate<Tag>, now: Int64) -> [SequencerOutcome<Tag>] {
        guard let source = update.forwardedFrom else { return offerInOrder(update, now: now) }
        // A forward at or below the mark is a repeat, or the original read again after a restart, unless its seq is
        // still to apply: the mark moves with what the user applied, and seqs apply out of offset order (one held for
        // a gap stays below a later offset applied before it).
        if let mark = ledger.forwardMark(of: update.user, from: source.partition), source.offset <= mark.offset,
           !awaitsApplying(update, now: now) {
            if let handled = mark.handledThrough, source.offset <= handled { return [.repeatedForward(update)] }
            // A previous owner's, whose copy here that owner finished (its marker covers where the mark's forward was
            // applied, and every copy before it): its results are out, this one is finished unsent.
            if let appliedAt = mark.appliedAt, let finished = previousFinishedThrough, appliedAt <= finished {
                return [.repeatedForward(update)]
            }
            // Else the forward it repeats may have been applied and never sent (a crash), so this one goes out again
            // with the current count, as a redelivery does; repeats after it are silent.
            ledger.noteForward(source, of: update.user, at: update.position)
            return [.alreadyApplied(update, state: ledger[update.user] ?? UserBadgeState(badge: 0, lastSeq: 0))]
        }
        if let queue = held[UserKey(update.user)],
           queue.updates.contains(where: { $0.update.forwardedFrom.map { $0.partition == source.partition && $0.offset >= source.offset } ?? false }) {
            return [.repeatedForward(update)]
        }
        let outcomes = offerInOrder(update, now: now)
        // Answered now (applied, late, a redelivery, a producer's duplicate): a repeat of it is silent. Held, it is
        // noted when it is applied.
        if let first = outcomes.first, first.update.forwardedFrom == source, !first.isApplied { ledger.noteForward(source, of: update.user, at: update.position) }
        return outcomes
    }

    /// Whether `update` has a seq not applied yet: beyond the user's last seq, or a skipped one still remembered.
    private func awaitsApplying(_ update: BadgeUpdate<Tag>, now: Int64) -> Bool {
        guard let seq = update.seq else { return false }
        let lastSeq = ledger[update.user]?.lastSeq ?? 0
        if seq > lastSeq { return true }
        return unexpired(ledger.skippedSeqs(of: update.user), now: now).contains { $0.contains(seq) }
    }

    /// Offers an update in seq order (see ``offer(_:now:)``, which first sets repeated forwards aside).
    private mutating func offerInOrder(_ update: BadgeUpdate<Tag>, now: Int64) -> [SequencerOutcome<Tag>] {
        var outcomes: [SequencerOutcome<Tag>] = []
        let state = ledger[update.user] ?? UserBadgeState(badge: 0, lastSeq: 0)
        let redelivered = update.position.map { $0 <= state.lastPosition } ?? false
        guard let seq = update.seq else {
            if redelivered {
                outcomes.append(.alreadyApplied(update, state: state))
                return outcomes
            }
            let applied = UserBadgeState(badge: update.operation?.applied(to: state.badge) ?? state.badge, lastSeq: state.lastSeq,
                                         lastPosition: Self.position(after: state, update))
            ledger[update.user] = applied
            if let source = update.forwardedFrom { ledger.noteForward(source, of: update.user, at: update.position) }
            outcomes.append(.applied(update, state: applied, skippedSeqs: 0))
            return outcomes
        }
        if seq <= state.lastSeq {
            if takeSkipped(seq, of: update.user, now: now) {
                lateArrivals += 1
                let late = UserBadgeState(badge: Self.lateCount(update.operation, on: state.badge), lastSeq: state.lastSeq,
                                          lastPosition: Self.position(after: state, update))
                ledger[update.user] = late
                if let source = update.forwardedFrom { ledger.noteForward(source, of: update.user, at: update.position) }
                outcomes.append(.appliedLate(update, state: late))
                return outcomes
            }
            if redelivered, self.redelivered.insert(Redelivery(user: UserKey(update.user), seq: seq)).inserted {
                outcomes.append(.alreadyApplied(update, state: state))
                return outcomes
            }
            duplicates += 1
            outcomes.append(.duplicate(update, lastAppliedSeq: state.lastSeq))
            return outcomes
        }
        if seq - 1 == state.lastSeq {
            apply(update, seq: seq, skipped: 0, into: &outcomes)
            drainContiguous(user: update.user, now: now, into: &outcomes)
            return outcomes
        }
        hold(update, seq: seq, now: now, lastAppliedSeq: state.lastSeq, into: &outcomes)
        return outcomes
    }

    /// Skips every gap whose deadline is at or before `now` and returns what that applied.
    package mutating func tick(now: Int64) -> [SequencerOutcome<Tag>] {
        var outcomes: [SequencerOutcome<Tag>] = []
        while let earliest = deadlines.first, earliest.key <= now {
            deadlines.removeFirst()
            guard let queue = held[earliest.value], queue.deadline == earliest.key else { continue }
            skipGap(user: earliest.value.id, now: now, into: &outcomes)
        }
        return outcomes
    }

    /// Drops every held update (partition revoked); the ledger is kept.
    package mutating func dropHeld() {
        held.removeAll()
        heldCount = 0
        deadlines = MinHeap()
    }

    /// The count after a late update: increments and decrements apply at the tail; a `set` is
    /// older than the count it would overwrite, so it leaves it.
    private static func lateCount(_ operation: BadgeOperation?, on count: Int64) -> Int64 {
        switch operation {
        case .increment(let amount)?: return BadgeOperation.increment(amount).applied(to: count)
        case .decrement(let amount)?: return BadgeOperation.decrement(amount).applied(to: count)
        case .set?, nil: return count
        }
    }

    private static func position(after state: UserBadgeState, _ update: BadgeUpdate<Tag>) -> Int64 {
        max(state.lastPosition, update.position ?? state.lastPosition)
    }

    private mutating func apply(_ update: BadgeUpdate<Tag>, seq: Int64, skipped: Int64, into outcomes: inout [SequencerOutcome<Tag>]) {
        let before = ledger[update.user] ?? UserBadgeState(badge: 0, lastSeq: 0)
        let after = UserBadgeState(badge: update.operation?.applied(to: before.badge) ?? before.badge, lastSeq: seq,
                                   lastPosition: Self.position(after: before, update))
        ledger[update.user] = after
        forgetSkipped(from: seq, of: update.user)
        if let source = update.forwardedFrom { ledger.noteForward(source, of: update.user, at: update.position) }
        outcomes.append(.applied(update, state: after, skippedSeqs: skipped))
    }

    private mutating func hold(_ update: BadgeUpdate<Tag>, seq: Int64, now: Int64, lastAppliedSeq: Int64,
                               into outcomes: inout [SequencerOutcome<Tag>]) {
        let entry = HeldUpdate(update: update, seq: seq, arrivedAt: now)
        let user = UserKey(update.user)
        if var queue = held[user] {
            let position = queue.updates.firstIndex(where: { $0.seq >= seq }) ?? queue.updates.count
            if position < queue.updates.count, queue.updates[position].seq == seq {
                duplicates += 1
                outcomes.append(.duplicate(update, lastAppliedSeq: lastAppliedSeq))
                return
            }
            queue.updates.insert(entry, at: position)
            held[user] = queue
        } else {
            let queue = HeldQueue(updates: [entry], deadline: Self.saturatingAdd(now, reorderWindowMs))
            held[user] = queue
            deadlines.insert(queue.deadline, user)
        }
        heldCount += 1

        // Overflow: give up on the oldest gap rather than grow without bound.
        if let queue = held[user], queue.updates.count > maxHeldPerUser {
            earlyReleases += 1
            skipGap(user: update.user, now: now, into: &outcomes)
        }
        while heldCount > maxHeldTotal, let earliest = deadlines.first {
            deadlines.removeFirst()
            guard let queue = held[earliest.value], queue.deadline == earliest.key else { continue }
            earlyReleases += 1
            skipGap(user: earliest.value.id, now: now, into: &outcomes)
        }
        compactDeadlinesIfStale()
    }

    /// Applies the user's lowest held update despite the gap below it, then its successors; the
    /// seqs given up on are remembered for a late arrival.
    private mutating func skipGap(user: String, now: Int64, into outcomes: inout [SequencerOutcome<Tag>]) {
        let key = UserKey(user)
        guard var queue = held[key], !queue.updates.isEmpty else { return }
        let first = queue.updates.removeFirst()
        heldCount -= 1
        if queue.updates.isEmpty { held[key] = nil } else { held[key] = queue }
        let lastSeq = ledger[user]?.lastSeq ?? 0
        // first.seq > lastSeq >= 0, so neither subtraction can overflow.
        let skipped = first.seq - lastSeq - 1
        skippedSeqs = Self.saturatingAdd(skippedSeqs, skipped)
        skippedGaps += 1
        if skipped > 0 { remember(SkippedSeqs(lower: lastSeq + 1, upper: first.seq - 1, skippedAt: now), of: user, now: now) }
        apply(first.update, seq: first.seq, skipped: skipped, into: &outcomes)
        drainContiguous(user: user, now: now, into: &outcomes, rearm: true)
    }

    /// Applies held updates that follow the last applied seq; re-arms the gap deadline for what
    /// remains, measured from the earliest remaining update's arrival.
    /// `rearm` forces a new heap entry: the caller consumed the one for the old deadline.
    private mutating func drainContiguous(user: String, now: Int64, into outcomes: inout [SequencerOutcome<Tag>],
                                          rearm: Bool = false) {
        let key = UserKey(user)
        guard var queue = held[key] else { return }
        var lastSeq = ledger[user]?.lastSeq ?? 0
        var appliedAny = false
        // `seq - 1 == lastSeq` rather than `lastSeq + 1`: lastSeq may be Int64.max.
        while let first = queue.updates.first, first.seq - 1 == lastSeq {
            queue.updates.removeFirst()
            heldCount -= 1
            apply(first.update, seq: first.seq, skipped: 0, into: &outcomes)
            lastSeq = first.seq
            appliedAny = true
        }
        if queue.updates.isEmpty {
            held[key] = nil
            return
        }
        let earliestArrival = queue.updates.map(\.arrivedAt).min() ?? now
        let newDeadline = Self.saturatingAdd(earliestArrival, reorderWindowMs)
        if newDeadline != queue.deadline || appliedAny || rearm {
            queue.deadline = newDeadline
            deadlines.insert(newDeadline, key)
        }
        held[key] = queue
    }

    // MARK: Skipped seqs

    /// Adds a skipped range to the user's memory, dropping expired ranges and the oldest beyond the bound.
    private mutating func remember(_ range: SkippedSeqs, of user: String, now: Int64) {
        guard lateSeqMemory.rangesPerUser > 0 else { return }
        var ranges = unexpired(ledger.skippedSeqs(of: user), now: now)
        ranges.append(range)
        ledger.setSkippedSeqs(bounded(ranges), of: user)
    }

    /// Seq `seq` was applied in order: no remembered skipped seq can be at or above it. (One
    /// would come from a state that a crash lost part of: a skip recorded in the changelog
    /// before the applications that led up to it.)
    private mutating func forgetSkipped(from seq: Int64, of user: String) {
        guard !ledger.hasNoSkippedSeqs else { return }
        let stored = ledger.skippedSeqs(of: user)
        guard stored.contains(where: { $0.upper >= seq }) else { return }
        ledger.setSkippedSeqs(stored.compactMap { range in
            guard range.lower < seq else { return nil }
            return SkippedSeqs(lower: range.lower, upper: min(range.upper, seq - 1), skippedAt: range.skippedAt)
        }, of: user)
    }

    /// When `seq` is a remembered skipped seq of the user, forgets it (it is being applied) and
    /// returns true.
    private mutating func takeSkipped(_ seq: Int64, of user: String, now: Int64) -> Bool {
        let stored = ledger.skippedSeqs(of: user)
        guard !stored.isEmpty else { return false }
        var ranges = unexpired(stored, now: now)
        guard let index = ranges.firstIndex(where: { $0.contains(seq) }) else {
            if ranges.count != stored.count { ledger.setSkippedSeqs(ranges, of: user) }
            return false
        }
        let range = ranges.remove(at: index)
        // seq > lower >= 1 and seq < upper <= Int64.max keep both neighbours in range.
        if seq > range.lower { ranges.append(SkippedSeqs(lower: range.lower, upper: seq - 1, skippedAt: range.skippedAt)) }
        if seq < range.upper { ranges.append(SkippedSeqs(lower: seq + 1, upper: range.upper, skippedAt: range.skippedAt)) }
        ledger.setSkippedSeqs(bounded(ranges), of: user)
        return true
    }

    private func unexpired(_ ranges: [SkippedSeqs], now: Int64) -> [SkippedSeqs] {
        ranges.filter { range in
            let age = now.subtractingReportingOverflow(range.skippedAt)
            return age.overflow || age.partialValue < lateSeqMemory.milliseconds
        }
    }

    /// Lowest first, at most `rangesPerUser`, the most recently skipped kept.
    private func bounded(_ ranges: [SkippedSeqs]) -> [SkippedSeqs] {
        var kept = ranges
        if kept.count > lateSeqMemory.rangesPerUser {
            kept.sort { ($0.skippedAt, $0.lower) > ($1.skippedAt, $1.lower) }
            kept.removeLast(kept.count - lateSeqMemory.rangesPerUser)
        }
        return kept.sorted { $0.lower < $1.lower }
    }

    /// `a + b`, pinned at `Int64.max` instead of trapping (both >= 0 here).
    static func saturatingAdd(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? (b > 0 ? Int64.max : Int64.min) : sum
    }

    /// Stale heap entries (gaps that filled) are skipped lazily; rebuild when they dominate.
    private mutating func compactDeadlinesIfStale() {
        guard deadlines.count > 2 * held.count + 1_024 else { return }
        deadlines = MinHeap(held.map { user, queue in (queue.deadline, user) })
    }
}
