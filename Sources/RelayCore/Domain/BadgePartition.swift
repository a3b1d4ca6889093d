// Restoring a partition's badge ledger from `push.badge-state` before its events run.

/// One `push.badge-state` value (key = user):
/// `{"badge":N,"seq":S,"offset":O,"skipped":[[FROM,TO,AT_MS],...],"forwarded":[[PARTITION,OFFSET(,APPLIED_AT)],...],"updated_at":EPOCH_MS}`.
/// `seq` is 0 when the user has no numbered event applied yet; `offset` (the events partition's
/// offset of the newest event applied to the user), `skipped` (seqs given up on and still
/// remembered for a late arrival) and `forwarded` (per events partition that forwarded the user's events here,
/// the highest source offset handled: ``ForwardMark``) are absent when unknown or empty.
package struct BadgeStateRecord: Sendable, Equatable {
    /// The user's count.
    package var badge: Int64
    /// The last applied seq (0 if none).
    package var seq: Int64
    /// The offset of the newest event applied to the user, -1 if unknown.
    package var offset: Int64
    /// Skipped seqs still remembered, with when they were skipped in epoch milliseconds.
    package var skipped: [SkippedSeqs] {
        get { remembered?.skipped ?? [] }
        set { remembered = Remembered.of(skipped: newValue, forwarded: forwarded, forwardedAt: forwardedAt) }
    }
    /// Per source partition, the highest offset of a forward of the user's events handled (``ForwardSource``).
    package var forwarded: [ForwardSource] {
        get { remembered?.forwarded ?? [] }
        set { remembered = Remembered.of(skipped: skipped, forwarded: newValue, forwardedAt: forwardedAt) }
    }
    /// Per source partition, the offset in this events partition of the copy of the forward at the mark (``forwarded``),
    /// when it was applied here (a mark a migration carried from another partition has none): the third number of a
    /// `forwarded` entry.
    package var forwardedAt: [Int32: Int64] { remembered?.forwardedAt ?? [:] }
    /// When the state was written, epoch milliseconds.
    package var updatedAt: Int64
    /// The skipped seqs and forward marks, which few users have: boxed, so that a record (and the changelog append
    /// that carries one, the widest ``RelayEffect``) takes one word for both.
    private var remembered: Remembered?

    private final class Remembered: Sendable {
        let skipped: [SkippedSeqs]
        let forwarded: [ForwardSource]
        let forwardedAt: [Int32: Int64]

        private init(skipped: [SkippedSeqs], forwarded: [ForwardSource], forwardedAt: [Int32: Int64]) {
            self.skipped = skipped
            self.forwarded = forwarded
            self.forwardedAt = forwardedAt
        }

        static func of(skipped: [SkippedSeqs], forwarded: [ForwardSource], forwardedAt: [Int32: Int64]) -> Remembered? {
            skipped.isEmpty && forwarded.isEmpty ? nil : Remembered(skipped: skipped, forwarded: forwarded, forwardedAt: forwardedAt)
        }
    }

    package static func == (lhs: BadgeStateRecord, rhs: BadgeStateRecord) -> Bool {
        lhs.badge == rhs.badge && lhs.seq == rhs.seq && lhs.offset == rhs.offset && lhs.updatedAt == rhs.updatedAt
            && lhs.skipped == rhs.skipped && lhs.forwarded == rhs.forwarded && lhs.forwardedAt == rhs.forwardedAt
    }

    /// Creates a record.
    package init(badge: Int64, seq: Int64, offset: Int64 = -1, skipped: [SkippedSeqs] = [], forwarded: [ForwardSource] = [],
                 forwardedAt: [Int32: Int64] = [:], updatedAt: Int64) {
        self.badge = badge
        self.seq = seq
        self.offset = offset
        self.updatedAt = updatedAt
        let partitions = Set(forwarded.map(\.partition))
        remembered = Remembered.of(skipped: skipped, forwarded: forwarded, forwardedAt: forwardedAt.filter { partitions.contains($0.key) })
    }

    /// The record for a user's state written at `now`; `skipped` holds epoch times already.
    package init(state: UserBadgeState, skipped: [SkippedSeqs] = [], forwarded: [ForwardSource] = [], forwardedAt: [Int32: Int64] = [:],
                 updatedAt now: Int64) {
        self.init(badge: state.badge, seq: state.lastSeq, offset: state.lastPosition, skipped: skipped, forwarded: forwarded,
                  forwardedAt: forwardedAt, updatedAt: now)
    }

    /// The user state this record restores.
    package var state: UserBadgeState { UserBadgeState(badge: badge, lastSeq: seq, lastPosition: offset) }

    /// The record value as compact JSON bytes.
    package func encoded() -> [UInt8] {
        var writer = JSONObjectWriter()
        writer.integer("badge", badge)
        writer.integer("seq", seq)
        if offset >= 0 { writer.integer("offset", offset) }
        if !skipped.isEmpty {
            writer.raw("skipped", JSON.serialize(.array(skipped.map { .array([.integer($0.lower), .integer($0.upper), .integer($0.skippedAt)]) })))
        }
        if !forwarded.isEmpty {
            let appliedAt = forwardedAt
            writer.raw("forwarded", JSON.serialize(.array(forwarded.map { mark in
                .array([.integer(Int64(mark.partition)), .integer(mark.offset)] + (appliedAt[mark.partition].map { [.integer($0)] } ?? []))
            })))
        }
        writer.integer("updated_at", updatedAt)
        return writer.finish()
    }

    /// Decodes a record value; `badge` and `seq` must be integers >= 0, `updated_at` an integer,
    /// `offset` (optional) an integer, `skipped` (optional) an array of `[from, to, at]` with
    /// `1 <= from <= to`.
    package static func decode(_ bytes: some Collection<UInt8>) throws(EventRejection) -> BadgeStateRecord {
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
        var offset: Int64 = -1
        if let raw = root["offset"], raw != .null {
            guard let parsed = raw.integerValue else { throw EventRejection(field: "offset", reason: "offset must be an integer") }
            offset = parsed
        }
        var skipped: [SkippedSeqs] = []
        if let raw = root["skipped"], raw != .null {
            guard case .array(let elements) = raw else {
                throw EventRejection(field: "skipped", reason: "skipped must be an array of [from, to, at]")
            }
            for element in elements {
                guard case .array(let triple) = element, triple.count == 3,
                      let lower = triple[0].integerValue, let upper = triple[1].integerValue, let at = triple[2].integerValue,
                      lower >= 1, lower <= upper else {
                    throw EventRejection(field: "skipped", reason: "skipped must be an array of [from, to, at] with 1 <= from <= to")
                }
                skipped.append(SkippedSeqs(lower: lower, upper: upper, skippedAt: at))
            }
        }
        var forwarded: [ForwardSource] = []
        var forwardedAt: [Int32: Int64] = [:]
        if let raw = root["forwarded"], raw != .null {
            guard case .array(let elements) = raw else {
                throw EventRejection(field: "forwarded", reason: "forwarded must be an array of [partition, offset(, applied at)]")
            }
            for element in elements {
                guard case .array(let numbers) = element, numbers.count == 2 || numbers.count == 3,
                      let partition = numbers[0].integerValue, let offset = numbers[1].integerValue,
                      partition >= 0, partition <= Int64(Int32.max), offset >= 0 else {
                    throw EventRejection(field: "forwarded", reason: "forwarded must be an array of [partition, offset(, applied at)], each >= 0")
                }
                if numbers.count == 3 {
                    guard let appliedAt = numbers[2].integerValue, appliedAt >= 0 else {
                        throw EventRejection(field: "forwarded", reason: "forwarded must be an array of [partition, offset(, applied at)], each >= 0")
                    }
                    forwardedAt[Int32(partition)] = appliedAt
                }
                forwarded.append(ForwardSource(partition: Int32(partition), offset: offset))
            }
        }
        var updatedAt: Int64 = 0
        if let raw = root["updated_at"], raw != .null {
            guard let parsed = raw.integerValue else {
                throw EventRejection(field: "updated_at", reason: "updated_at must be an integer (epoch milliseconds)")
            }
            updatedAt = parsed
        }
        return BadgeStateRecord(badge: badge, seq: seq, offset: offset, skipped: skipped, forwarded: forwarded, forwardedAt: forwardedAt, updatedAt: updatedAt)
    }
}

/// The badge state of one partition of `push.events` through its life in this consumer:
/// `restoring` (the changelog partition is being read; events wait) → `ready` (events run)
/// → `revoked` (state dropped; events refused).
package struct BadgePartition<Tag: Sendable>: Sendable {
    /// Where the partition is in its life.
    package enum Phase: Sendable, Equatable {
        /// Reading the changelog; events wait. / Processing events. / Given away; state dropped.
        case restoring, ready, revoked
    }

    /// What ``offer(_:now:)`` did with an update.
    package enum Admission: Sendable {
        /// The partition is ready: the sequencer's outcomes.
        case processed([SequencerOutcome<Tag>])
        /// Not ready (restoring or revoked): the caller keeps or drops the update.
        case refused
    }

    /// The current phase.
    package private(set) var phase: Phase = .restoring
    /// The sequencer holding the partition's ledger.
    package private(set) var sequencer: BadgeSequencer<Tag>
    /// The previous owner's progress, read from the changelog.
    package private(set) var previousProgress: ProgressMarker?
    /// Records of the changelog that could not be read during restore (skipped, counted).
    package private(set) var unreadableStateRecords = 0

    /// A partition starting to restore; `sequencer` carries the configuration (window, bounds).
    package init(sequencer: BadgeSequencer<Tag>) {
        self.sequencer = sequencer
    }

    /// Applies one `push.badge-state` record while restoring: the last value per key wins, a
    /// `nil` value (tombstone) deletes the user, and the ``ProgressMarker/key`` record is the
    /// previous owner's progress. Skipped seqs' epoch times are put on the sequencer's clock with
    /// `now`. An unreadable value is counted and skipped: the user then starts from the previous
    /// value read, or from 0. Ignored unless restoring.
    @discardableResult
    package mutating func restore(key: ArraySlice<UInt8>, value: ArraySlice<UInt8>?, now: RelayTime) -> Bool {
        guard phase == .restoring else { return false }
        var record = RestoredChangelog()
        let readable = record.add(key: key, value: value)
        restore(record, now: now)
        return readable
    }

    /// Applies a changelog partition read to its end (see ``restore(key:value:now:)`` for what
    /// each record means). Ignored unless restoring.
    package mutating func restore(_ changelog: RestoredChangelog, now: RelayTime) {
        guard phase == .restoring else { return }
        if changelog.sawProgress {
            previousProgress = changelog.progress
            sequencer.previousFinishedThrough = changelog.progress?.finishedThrough
        }
        unreadableStateRecords += changelog.unreadable
        for (user, entry) in changelog.users {
            switch entry {
            case .state(let state, let skipped, let forwarded, let forwardedAt):
                sequencer.ledger[user.id] = state
                sequencer.ledger.setSkippedSeqs(skipped.map {
                    SkippedSeqs(lower: $0.lower, upper: $0.upper, skippedAt: now.monotonic(ofEpoch: $0.skippedAt))
                }, of: user.id)
                sequencer.ledger.setForwardMarks(forwarded.map { ForwardMark(partition: $0.partition, offset: $0.offset, appliedAt: forwardedAt[$0.partition]) },
                                                 of: user.id)
            case .deleted:
                sequencer.ledger[user.id] = nil
                sequencer.ledger.setSkippedSeqs([], of: user.id)
                sequencer.ledger.setForwardMarks([], of: user.id)
            }
        }
    }

    /// The changelog partition was read to its end: events may run.
    package mutating func finishRestore() {
        guard phase == .restoring else { return }
        phase = .ready
    }

    /// Offers an update: processed when ready, refused otherwise.
    package mutating func offer(_ update: BadgeUpdate<Tag>, now: Int64) -> Admission {
        phase == .ready ? .processed(sequencer.offer(update, now: now)) : .refused
    }

    /// Releases timed-out gaps (ready partitions only).
    package mutating func tick(now: Int64) -> [SequencerOutcome<Tag>] {
        phase == .ready ? sequencer.tick(now: now) : []
    }

    /// The partition was revoked: drops its ledger and held updates. Nothing is lost: their
    /// offsets were not committed, so the partition's next owner processes them again.
    package mutating func revoke() {
        phase = .revoked
        sequencer.dropHeld()
        sequencer.ledger = BadgeLedger()
    }
}

/// A `push.badge-state` partition as a restore reads it: each record decoded as it arrives (on
/// the reader's thread, off the driver's loop) and only the last one per key kept, as compact
/// values. Holding the records' bytes until the end of the read instead cost a restore of
/// 1,000,000 users about 150 MB more at its peak.
package struct RestoredChangelog: Sendable {
    /// What the last readable record of a user says.
    package enum Entry: Sendable, Equatable {
        /// The user's state, with the skipped seqs it remembers (their times in epoch milliseconds) and its forward marks.
        case state(UserBadgeState, skipped: [SkippedSeqs], forwarded: [ForwardSource] = [], forwardedAt: [Int32: Int64] = [:])
        /// A tombstone: the user was deleted.
        case deleted
    }

    /// Per user, the last readable record. Keyed by bytes: Kafka keys are bytes, and two ids that
    /// `String` calls equal (NFC and NFD) are two users.
    package private(set) var users: [UserKey: Entry] = [:]
    /// Whether a progress-marker record was read.
    package private(set) var sawProgress = false
    /// The last marker: `nil` when it was a tombstone or unreadable (no claim, always safe).
    package private(set) var progress: ProgressMarker?
    /// The layout record (``PartitionLayout/recordKey``): the placement the partition's users were counted
    /// under. `nil` when there is none, or it is not one this relay reads.
    package private(set) var layout: PartitionLayout?
    /// Whether a layout record was read (readable or not).
    package private(set) var sawLayout = false
    /// What the events partitions' owners read again after the last change of the layout (its record's ``ReadAgain``).
    package private(set) var readAgain: [Int32: ReadAgain] = [:]
    /// Records that could not be decoded (skipped: a user keeps its previous value).
    package private(set) var unreadable = 0
    /// Records read.
    package private(set) var records = 0

    /// An empty changelog.
    package init() {}

    /// Whether the partition holds anything a relay wrote: a user, a progress marker, a layout record.
    package var isEmpty: Bool { users.isEmpty && !sawProgress && !sawLayout }

    /// Adds the next record of the partition; returns false when its value could not be decoded.
    @discardableResult
    package mutating func add(key: ArraySlice<UInt8>, value: ArraySlice<UInt8>?) -> Bool {
        records += 1
        if key.elementsEqual(PartitionLayout.recordKey) {
            sawLayout = true
            layout = value.flatMap { PartitionLayout.decode($0) }
            readAgain = value.map { PartitionLayout.readAgain(in: $0) } ?? [:]
            return layout != nil || value == nil
        }
        if key.elementsEqual(ProgressMarker.key) {
            sawProgress = true
            progress = value.flatMap { try? ProgressMarker.decode($0) }
            guard value == nil || progress != nil else {
                unreadable += 1
                return false
            }
            return true
        }
        let user = UserKey(String(decoding: key, as: UTF8.self))
        guard let value else {
            users[user] = .deleted
            return true
        }
        guard let record = try? BadgeStateRecord.decode(value) else {
            unreadable += 1
            return false
        }
        users[user] = .state(record.state, skipped: record.skipped, forwarded: record.forwarded, forwardedAt: record.forwardedAt)
        return true
    }
}
