// Restoring a partition's badge ledger from `push.badge-state` before its events run.

/// One `push.badge-state` value: `{"badge":N,"seq":S,"updated_at":EPOCH_MS}` (key = user).
/// `seq` is 0 when the user has no numbered event applied yet.
public struct BadgeStateRecord: Sendable, Equatable {
    /// The user's count.
    public var badge: Int64
    /// The last applied seq (0 if none).
    public var seq: Int64
    /// When the state was written, epoch milliseconds.
    public var updatedAt: Int64

    /// Creates a record.
    public init(badge: Int64, seq: Int64, updatedAt: Int64) {
        self.badge = badge
        self.seq = seq
        self.updatedAt = updatedAt
    }

    /// The record for a user's state written at `now`.
    public init(state: UserBadgeState, updatedAt now: Int64) {
        self.init(badge: state.badge, seq: state.lastSeq, updatedAt: now)
    }

    /// The user state this record restores.
    public var state: UserBadgeState { UserBadgeState(badge: badge, lastSeq: seq) }

    /// The record value as compact JSON bytes.
    public func encoded() -> [UInt8] {
        var writer = JSONObjectWriter()
        writer.integer("badge", badge)
        writer.integer("seq", seq)
        writer.integer("updated_at", updatedAt)
        return writer.finish()
    }

    /// Decodes a record value; `badge` and `seq` must be integers >= 0, `updated_at` an integer.
    public static func decode(_ bytes: some Collection<UInt8>) throws(EventRejection) -> BadgeStateRecord {
        let root: JSONValue
        do {
            root = try JSON.parse(bytes)
        } catch {
            throw EventRejection(field: "badge-state", reason: "badge-state value is not valid JSON: \(error)")
        }
        guard case .object = root else {
            throw EventRejection(field: "badge-state", reason: "badge-state value must be a JSON object, got \(root.typeName)")
        }
        guard let badge = root["badge"]?.integerValue, badge >= 0 else {
            throw EventRejection(field: "badge", reason: "badge must be an integer >= 0")
        }
        guard let seq = root["seq"]?.integerValue, seq >= 0 else {
            throw EventRejection(field: "seq", reason: "seq must be an integer >= 0")
        }
        var updatedAt: Int64 = 0
        if let raw = root["updated_at"], raw != .null {
            guard let parsed = raw.integerValue else {
                throw EventRejection(field: "updated_at", reason: "updated_at must be an integer (epoch milliseconds)")
            }
            updatedAt = parsed
        }
        return BadgeStateRecord(badge: badge, seq: seq, updatedAt: updatedAt)
    }
}

/// The badge state of one partition of `push.events` through its life in this consumer:
/// `restoring` (the changelog partition is being read; events wait) → `ready` (events run)
/// → `revoked` (state dropped; events refused).
public struct BadgePartition<Tag: Sendable>: Sendable {
    /// Where the partition is in its life.
    public enum Phase: Sendable, Equatable {
        /// Reading the changelog; events wait. / Processing events. / Given away; state dropped.
        case restoring, ready, revoked
    }

    /// What ``offer(_:now:)`` did with an update.
    public enum Admission: Sendable {
        /// The partition is ready: the sequencer's outcomes.
        case processed([SequencerOutcome<Tag>])
        /// Still restoring: the update waits and is processed by ``finishRestore(now:)``.
        case waitingForRestore
        /// Revoked: the update belongs to another consumer now; do not process or commit it.
        case refused
    }

    /// The current phase.
    public private(set) var phase: Phase = .restoring
    /// The sequencer holding the partition's ledger.
    public private(set) var sequencer: BadgeSequencer<Tag>
    /// Records of the changelog that could not be read during restore (skipped, counted).
    public private(set) var unreadableStateRecords = 0
    private var waiting: [BadgeUpdate<Tag>] = []

    /// A partition starting to restore; `sequencer` carries the configuration (window, bounds).
    public init(sequencer: BadgeSequencer<Tag>) {
        self.sequencer = sequencer
    }

    /// Applies one `push.badge-state` record while restoring: the last value per user wins and
    /// a `nil` value (tombstone) deletes the user. Ignored unless restoring. An unreadable value
    /// is counted and skipped: the user then starts from the previous value read, or from 0.
    @discardableResult
    public mutating func restore(user: String, value: [UInt8]?) -> Bool {
        guard phase == .restoring else { return false }
        guard let value else {
            sequencer.ledger[user] = nil
            return true
        }
        do {
            sequencer.ledger[user] = try BadgeStateRecord.decode(value).state
            return true
        } catch {
            unreadableStateRecords += 1
            return false
        }
    }

    /// The changelog partition was read to its end: becomes `ready` and processes the updates
    /// that waited, in arrival order.
    public mutating func finishRestore(now: Int64) -> [SequencerOutcome<Tag>] {
        guard phase == .restoring else { return [] }
        phase = .ready
        let pending = waiting
        waiting = []
        var outcomes: [SequencerOutcome<Tag>] = []
        for update in pending { outcomes += sequencer.offer(update, now: now) }
        return outcomes
    }

    /// Offers an update: processed when ready, kept while restoring, refused when revoked.
    public mutating func offer(_ update: BadgeUpdate<Tag>, now: Int64) -> Admission {
        switch phase {
        case .restoring:
            waiting.append(update)
            return .waitingForRestore
        case .ready:
            return .processed(sequencer.offer(update, now: now))
        case .revoked:
            return .refused
        }
    }

    /// Releases timed-out gaps (ready partitions only).
    public mutating func tick(now: Int64) -> [SequencerOutcome<Tag>] {
        phase == .ready ? sequencer.tick(now: now) : []
    }

    /// Updates waiting for the restore to finish.
    public var waitingForRestoreCount: Int { waiting.count }

    /// The partition was revoked: drops its ledger, held and waiting updates. Nothing is lost:
    /// their offsets were not committed, so the partition's next owner processes them again.
    public mutating func revoke() {
        phase = .revoked
        waiting = []
        sequencer.dropHeld()
        sequencer.ledger = BadgeLedger()
    }
}
