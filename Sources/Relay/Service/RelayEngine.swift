public import Kafka

/// Where a consumed record came from: its partition and offset.
public struct RecordReference: Sendable, Hashable, CustomStringConvertible {
    public var partition: TopicPartition
    public var offset: Int64

    public init(_ partition: TopicPartition, _ offset: Int64) {
        self.partition = partition
        self.offset = offset
    }

    public var description: String { "\(partition)@\(offset)" }
}

/// A notification between the dispatcher and APNs, with what its result record needs.
public struct PendingNotification: Sendable {
    public var record: RecordReference
    public var eventID: String
    public var user: String?
    public var seq: Int64?
    public var badge: Int64?
    public var rendered: RenderedNotification
    /// When the event was consumed (epoch ms), for the event→answer latency.
    public var consumedAt: Int64
    /// The event's seq had been skipped before it arrived (its result says so).
    public var late: Bool = false
}

/// A token a service outside the send path (the legacy feedback service) reported dead.
public struct DeadTokenReport: Sendable, Hashable {
    /// The token (hex).
    public var token: String
    /// When it died, epoch milliseconds.
    public var since: Int64

    /// Creates a report.
    public init(token: String, since: Int64) {
        self.token = token
        self.since = since
    }
}

/// How APNs answered a notification, reduced to what the relay records.
public struct SendOutcome: Sendable, Equatable {
    public var status: DeliveryStatus
    public var httpStatus: Int?
    public var reason: String?
    public var attempts: Int
    /// For token-dead answers: when APNs says the token stopped being valid (epoch ms).
    public var tokenDeadSince: Int64?

    public init(status: DeliveryStatus, httpStatus: Int?, reason: String?, attempts: Int, tokenDeadSince: Int64? = nil) {
        self.status = status
        self.httpStatus = httpStatus
        self.reason = reason
        self.attempts = attempts
        self.tokenDeadSince = tokenDeadSince
    }
}

/// What the engine asks its driver to do. The driver reports completions back as inputs.
public enum RelayEffect: Sendable {
    /// Publish a result; then call `published(_:)` with the record.
    case publishResult(ResultRecord, for: RecordReference)
    /// Publish a dead letter: the input bytes with `x-error`; then call `published(_:)`.
    case publishDeadLetter(KafkaMessage, error: String)
    /// Publish a failed-token record (not tied to an offset).
    case publishFailedToken(FailedTokenRecord)
    /// Append to the badge changelog (key user, same partition number as the event); then call
    /// `changelogged(_:)` with the token given here, in append order per changelog partition.
    case appendChangelog(user: String, record: BadgeStateRecord, partition: Int32, token: UInt64)
    /// Store the progress marker of events partition `partition` in the changelog partition of the
    /// same number (key ``ProgressMarker/key``, value ``ProgressMarker/encoded(at:)`` with `at`).
    /// At a revoke or a stop it must be stored (flushed) before the partition is given up.
    case writeProgress(ProgressMarker, partition: Int32, at: Int64)
    /// Send to APNs; then call `sent(_:outcome:)`.
    case send(Dispatch<PendingNotification>)
    /// Read this partition of the changelog to its end, then call `restored(_:records:)`.
    case restore(TopicPartition)
    /// Commit these offsets (next offset to read).
    case commit([TopicPartition: Int64])
    /// Stop or restart fetching (backpressure).
    case pause([TopicPartition])
    case resume([TopicPartition])
}

/// Counters the service exports as metrics.
public struct RelayCounters: Sendable, Equatable {
    public var eventsConsumed = 0
    public var eventsApplied = 0
    public var eventsDuplicate = 0
    /// Redelivered events a previous owner had applied but maybe not sent (after a crash), sent
    /// again with the user's current badge.
    public var eventsReplayed = 0
    /// Events whose seq had been skipped, applied late at arrival.
    public var eventsLate = 0
    /// Redelivered records the previous owner's progress marker shows finished: skipped.
    public var recordsAlreadyFinished = 0
    public var eventsInvalid = 0
    /// Gaps skipped after their reorder window (one per gap, however many seqs it spans: a
    /// producer's seq can jump by up to 2^63, which no counter should add).
    public var seqGapsSkipped = 0
    public var deadLetters = 0
    public var notificationsByStatus: [DeliveryStatus: Int] = [:]
}

/// The relay's processing, as a pure state machine: inputs (consumed records, completions,
/// time) in, effects out. It owns the per-partition badge state, offsets, the device registry
/// and the per-device dispatcher; the driver (`RelayService`) does all I/O.
///
/// Exactly once across owners: every badge-state record carries the offset of the newest event
/// applied to its user, and the changelog carries a ``ProgressMarker`` per partition. A new owner
/// skips the records the marker shows finished; of the rest, a record at or below its user's
/// offset was applied before (sent again with the current count, never applied again), and one
/// beyond it was never applied (a seq at or below the user's last seq is then a producer's
/// duplicate).
public struct RelayEngine: Sendable {
    public struct Configuration: Sendable {
        public var reorderWindowMilliseconds: Int64
        public var maxInFlight: Int
        public var transport: APNsTransport
        /// The default `apns-topic` when the event and the registration give none.
        public var defaultTopic: String?
        /// How long and how many skipped seqs are remembered for late arrivals.
        public var lateSeqMemory: LateSeqMemory
        /// `apns.environment`: where a token without a registration goes when the event gives no `apns.environment`.
        public var defaultEnvironment: APNsEnvironment

        public init(reorderWindowMilliseconds: Int64 = 2_000, maxInFlight: Int = 10_000, transport: APNsTransport = .http2, defaultTopic: String? = nil,
                    lateSeqMemory: LateSeqMemory = .standard, defaultEnvironment: APNsEnvironment = .production) {
            self.reorderWindowMilliseconds = reorderWindowMilliseconds
            self.maxInFlight = maxInFlight
            self.transport = transport
            self.defaultTopic = defaultTopic
            self.lateSeqMemory = lateSeqMemory
            self.defaultEnvironment = defaultEnvironment
        }
    }

    /// An event between decode and fan-out.
    struct EventInFlight: Sendable {
        var record: RecordReference
        var event: PushEvent
        var consumedAt: Int64
    }

    private struct PartitionState: Sendable {
        var badges: BadgePartition<EventInFlight>
        var offsets = OffsetTracker()
        var lastCommitted: Int64?
        /// Records consumed and not yet done (the backpressure measure).
        var pending = 0
        /// Records consumed while the changelog is read, in offset order: they run after the
        /// restore, when the previous owner's progress is known.
        var waitingForRestore: [KafkaMessage] = []
        /// The highest offset consumed.
        var lastConsumed: Int64?
        /// The last progress marker handed to the driver.
        var progressWritten: ProgressMarker?
        /// Being handed over: nothing new is sent or written for it; in-flight sends finish.
        var revoking = false
        /// The partition's notifications in the dispatcher (queued or in flight).
        var notifications = 0
        /// Results and dead letters handed to the driver and not yet published.
        var publishing = 0
    }

    public let configuration: Configuration
    private let decoder: PushEventDecoder
    private var partitions: [TopicPartition: PartitionState] = [:]
    private var dispatcher = DeviceDispatcher<PendingNotification>()
    public private(set) var registry = DeviceRegistry()
    private var awaitingChangelog: [UInt64: (event: EventInFlight, badge: Int64, late: Bool)] = [:]
    private var nextChangelogToken: UInt64 = 0
    /// Backpressure has the partitions paused.
    public private(set) var isPaused = false
    /// Notifications handed to the dispatcher and not yet answered or superseded.
    public private(set) var notificationsInFlight = 0
    /// The sum of the partitions' `pending` (kept as it changes: backpressure reads it per record).
    private var pendingTotal = 0
    public private(set) var counters = RelayCounters()

    public init(configuration: Configuration) {
        self.configuration = configuration
        self.decoder = PushEventDecoder(transport: configuration.transport)
    }

    // MARK: Inputs

    /// Partitions were assigned: restore each before its events are processed.
    public mutating func assigned(_ assigned: [TopicPartition]) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        for partition in assigned {
            pendingTotal -= partitions[partition]?.pending ?? 0
            let sequencer = BadgeSequencer<EventInFlight>(reorderWindowMs: configuration.reorderWindowMilliseconds,
                                                          lateSeqMemory: configuration.lateSeqMemory)
            partitions[partition] = PartitionState(badges: BadgePartition(sequencer: sequencer))
            effects.append(.restore(partition))
        }
        if isPaused { effects.append(.pause(assigned)) }
        return effects
    }

    /// The changelog partition matching `partition` was read to its end: `records` are its
    /// (key, value) pairs in offset order, users' states and the previous owner's progress marker.
    /// The records that waited for it run now.
    public mutating func restored(_ partition: TopicPartition, records: [(key: [UInt8], value: [UInt8]?)], now: RelayTime) -> [RelayEffect] {
        guard var state = partitions[partition], state.badges.phase == .restoring else { return [] }
        for record in records { state.badges.restore(key: record.key, value: record.value, now: now) }
        state.badges.finishRestore()
        guard !state.revoking else {
            // Being handed over before it ever ran: its records stay unfinished for the next owner.
            partitions[partition] = state
            return []
        }
        let waiting = state.waitingForRestore
        state.waitingForRestore = []
        partitions[partition] = state
        var effects: [RelayEffect] = []
        for message in waiting { effects += process(message, now: now) }
        effects += backpressure()
        return effects
    }

    /// The consumer is taking these partitions away: from now on nothing new is sent or written
    /// for them. Queued notifications are dropped (their records stay unfinished, so the next
    /// owner sends them, once); sends in flight finish and their results are published; gaps are
    /// not released and acknowledged changelog writes start no sends. Wait for
    /// ``revokeSettled(_:)`` (or the handover deadline), then call ``revoked(_:now:)``.
    public mutating func revoking(_ revoking: [TopicPartition]) -> [RelayEffect] {
        let leaving = Set(revoking.filter { partitions[$0] != nil })
        guard !leaving.isEmpty else { return [] }
        for partition in leaving { partitions[partition]!.revoking = true }
        let dropped = dispatcher.removeQueued { leaving.contains($0.payload.record.partition) }
        notificationsInFlight -= dropped.count
        for notification in dropped { partitions[notification.payload.record.partition]!.notifications -= 1 }
        return backpressure()
    }

    /// True when nothing of these partitions is in flight: no send awaiting APNs, no result or
    /// dead letter awaiting Kafka. What is left unfinished is the next owner's.
    public func revokeSettled(_ revoking: [TopicPartition]) -> Bool {
        revoking.allSatisfy { partition in
            guard let state = partitions[partition] else { return true }
            return state.notifications == 0 && state.publishing == 0
        }
    }

    /// Partitions were revoked: their progress markers and a commit of what is finished, then
    /// their state is dropped. Work still in flight for them finishes, but its offsets are left
    /// for the next owner (at-least-once). The driver stores the markers before it gives the
    /// partitions up.
    public mutating func revoked(_ revoked: [TopicPartition], now: RelayTime) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        var offsets: [TopicPartition: Int64] = [:]
        for partition in revoked {
            guard var state = partitions.removeValue(forKey: partition) else { continue }
            pendingTotal -= state.pending
            if let marker = Self.progress(of: state) {
                effects.append(.writeProgress(marker, partition: partition.partition, at: now.epoch))
            }
            if let committable = state.offsets.committable { offsets[partition] = committable }
            state.badges.revoke()
        }
        if !offsets.isEmpty { effects.append(.commit(offsets)) }
        return effects
    }

    /// A record of the events topic.
    public mutating func consumed(_ message: KafkaMessage, now: RelayTime) -> [RelayEffect] {
        let tracked = modify(message.topicPartition) { state -> Bool in
            // One placeholder result stands for "being processed" until the fan-out is known.
            state.offsets.track(message.offset, expectedResults: 1)
            state.pending += 1
            guard state.badges.phase == .restoring || state.revoking else { return false }
            state.waitingForRestore.append(message)
            return true
        }
        guard let waiting = tracked else { return [] }
        pendingTotal += 1
        counters.eventsConsumed += 1
        if waiting { return backpressure() }
        return process(message, now: now) + backpressure()
    }

    /// The changelog append with this token was acknowledged: the event may now be sent.
    public mutating func changelogged(_ token: UInt64, now: RelayTime) -> [RelayEffect] {
        guard let (event, badge, late) = awaitingChangelog.removeValue(forKey: token) else { return [] }
        // A partition being handed over sends nothing new: the next owner finds the change in the
        // changelog and sends it (once).
        guard let state = partitions[event.record.partition], !state.revoking else { return [] }
        return fanOut(event, badge: event.event.badge == nil ? nil : badge, late: late, now: now)
    }

    /// APNs answered a dispatched notification.
    public mutating func sent(_ dispatch: Dispatch<PendingNotification>, outcome: SendOutcome, now: RelayTime) -> [RelayEffect] {
        let notification = dispatch.notification.payload
        var effects: [RelayEffect] = []
        notificationsInFlight -= 1
        counters.notificationsByStatus[outcome.status, default: 0] += 1
        let owned = modify(notification.record.partition) { $0.notifications = max(0, $0.notifications - 1) } != nil
        // After a handover nothing more is written for the partition: its next owner answers for it.
        if owned { effects.append(publish(result(for: notification, status: outcome.status, outcome: outcome, now: now), for: notification.record)) }
        if let since = outcome.tokenDeadSince {
            let token = notification.rendered.token
            let registration = registry.reportDead(token: token, since: since)
            let record = registration.map { FailedTokenRecord(registration: $0, reason: outcome.reason ?? "Unregistered", since: since, eventID: notification.eventID) }
                ?? FailedTokenRecord(token: token, user: notification.user, topic: notification.rendered.topic, environment: notification.rendered.environment,
                                     reason: outcome.reason ?? "Unregistered", since: since, eventID: notification.eventID)
            effects.append(.publishFailedToken(record))
        }
        let step = dispatcher.complete(dispatch.ticket, outcome: .finished)
        effects += dispatchEffects(step, now: now)
        return effects
    }

    /// A result or dead letter of `record` was published.
    public mutating func published(_ record: RecordReference) -> [RelayEffect] {
        let finished = modify(record.partition) { state -> Bool in
            state.publishing = max(0, state.publishing - 1)
            state.offsets.resultPublished(record.offset)
            guard !state.offsets.isPending(record.offset), state.pending > 0 else { return false }
            state.pending -= 1
            return true
        }
        if finished == true { pendingTotal -= 1 }
        return backpressure()
    }

    /// Time passes: releases gaps whose reorder window ran out (on the monotonic clock).
    public mutating func tick(now: RelayTime) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        for partition in partitions.keys.sorted() where !partitions[partition]!.revoking {
            let outcomes = partitions[partition]!.badges.tick(now: now.monotonic)
            effects += handle(outcomes, now: now)
        }
        return effects
    }

    /// The progress markers and offsets to store now: partitions whose marker or committable
    /// offset moved (the offset stays put while an early record waits for a seq gap; the marker
    /// still moves past the records finished after it).
    public mutating func commitDue(now: RelayTime) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        var offsets: [TopicPartition: Int64] = [:]
        for partition in partitions.keys.sorted() {
            modify(partition) { state in
                if let marker = Self.progress(of: state), marker != state.progressWritten {
                    state.progressWritten = marker
                    effects.append(.writeProgress(marker, partition: partition.partition, at: now.epoch))
                }
                if let committable = state.offsets.committable, committable != state.lastCommitted {
                    offsets[partition] = committable
                }
            }
        }
        if !offsets.isEmpty { effects.append(.commit(offsets)) }
        return effects
    }

    /// The partition's progress as its next owner should read it: what this owner finished, and
    /// what the previous owner had finished beyond what this one has read so far.
    public func progress(of partition: TopicPartition) -> ProgressMarker? {
        partitions[partition].flatMap(Self.progress(of:))
    }

    private static func progress(of state: PartitionState) -> ProgressMarker? {
        var through = state.lastConsumed ?? -1
        var open = state.offsets.pendingOffsets(limit: ProgressMarker.maxOpenOffsets + 1)
        if let previous = state.badges.previousProgress, previous.through > through {
            open += previous.open.filter { $0 > through }
            through = previous.through
        }
        return through >= 0 ? ProgressMarker(through: through, open: open) : nil
    }

    /// The previous owner's progress, as restored.
    public func previousProgress(of partition: TopicPartition) -> ProgressMarker? { partitions[partition]?.badges.previousProgress }

    /// The commit of these offsets succeeded.
    public mutating func committed(_ offsets: [TopicPartition: Int64]) {
        for (partition, offset) in offsets {
            modify(partition) { $0.lastCommitted = offset }
        }
    }

    /// A `push.devices` record.
    public mutating func deviceRecord(key: [UInt8]?, value: [UInt8]?) -> EventRejection? {
        guard let key else { return EventRejection(field: "key", reason: "key is missing (the device token)") }
        return registry.apply(key: String(decoding: key, as: UTF8.self), value: value)
    }

    /// The legacy feedback service reported tokens dead: each registration made before its `since` is removed
    /// (later events no longer target it) and a failed-token record with `reason` is published.
    public mutating func tokensReportedDead(_ reports: [DeadTokenReport], reason: String) -> [RelayEffect] {
        reports.map { report in
            let token = report.token.lowercased()
            let record = registry.reportDead(token: token, since: report.since)
                .map { FailedTokenRecord(registration: $0, reason: reason, since: report.since, eventID: nil) }
                ?? FailedTokenRecord(token: token, user: nil, topic: nil, environment: nil, reason: reason, since: report.since, eventID: nil)
            return .publishFailedToken(record)
        }
    }

    /// The earliest monotonic time `tick` has something to release.
    public var nextDeadline: Int64? {
        partitions.values.compactMap { $0.badges.sequencer.nextDeadline }.min()
    }

    /// Every assigned partition finished restoring.
    public var isRestored: Bool { partitions.values.allSatisfy { $0.badges.phase == .ready } }

    /// Records consumed and not finished, over all partitions.
    public var pendingRecordCount: Int { pendingTotal }

    // MARK: Steps

    /// One record of a restored partition: skipped when the previous owner finished it, else
    /// decoded and sequenced.
    private mutating func process(_ message: KafkaMessage, now: RelayTime) -> [RelayEffect] {
        let reference = RecordReference(message.topicPartition, message.offset)
        let finishedBefore = modify(reference.partition) { state -> Bool in
            state.lastConsumed = max(state.lastConsumed ?? message.offset, message.offset)
            guard state.badges.previousProgress?.isFinished(message.offset) == true else { return false }
            state.offsets.markDone(message.offset)
            state.pending -= 1
            return true
        }
        guard finishedBefore == false else {
            if finishedBefore == true {
                pendingTotal -= 1
                counters.recordsAlreadyFinished += 1
            }
            return []
        }

        let event: PushEvent
        do {
            event = try decoder.decode(message.value ?? [])
        } catch {
            counters.eventsInvalid += 1
            counters.deadLetters += 1
            expect(reference, results: 2)
            let id = message.key.map { String(decoding: $0, as: UTF8.self) } ?? "offset-\(message.offset)"
            modify(reference.partition) { $0.publishing += 1 }
            return [
                .publishDeadLetter(message, error: error.reason),
                publish(.forEvent(id: id, user: nil, seq: nil, badge: nil, status: .invalid, reason: error.reason, at: now.epoch), for: reference),
            ]
        }
        let inFlight = EventInFlight(record: reference, event: event, consumedAt: now.epoch)
        guard let update = event.ledgerUpdate(tag: inFlight, position: message.offset) else {
            return fanOut(inFlight, badge: nil, late: false, now: now)
        }
        guard case .processed(let outcomes) = partitions[reference.partition]!.badges.offer(update, now: now.monotonic) else { return [] }
        return handle(outcomes, now: now)
    }

    private mutating func handle(_ outcomes: [SequencerOutcome<EventInFlight>], now: RelayTime) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        for outcome in outcomes {
            switch outcome {
            case .duplicate(let update, let lastApplied):
                let event = update.tag
                counters.eventsDuplicate += 1
                expect(event.record, results: 1)
                effects.append(publish(
                    .forEvent(id: event.event.id, user: event.event.user, seq: event.event.seq, badge: nil, status: .duplicate,
                              reason: "seq \(event.event.seq ?? 0) <= last applied seq \(lastApplied)", at: now.epoch),
                    for: event.record))
            case .alreadyApplied(let update, let state):
                // Applied by a previous owner that may have stopped before sending: send again
                // (same apns-id and collapse id) with the current count. Through the changelog like
                // an application (rewriting the user's state): sent on its acknowledgement, it keeps
                // its place behind the user's changes still being stored, so no device sees a count
                // before the counts below it, nor one that a crash could still undo.
                counters.eventsReplayed += 1
                effects.append(appendChangelog(update, state: state, late: false, now: now))
            case .applied(let update, let state, let skipped):
                counters.eventsApplied += 1
                if skipped > 0 { counters.seqGapsSkipped += 1 }
                effects.append(appendChangelog(update, state: state, late: false, now: now))
            case .appliedLate(let update, let state):
                counters.eventsApplied += 1
                counters.eventsLate += 1
                effects.append(appendChangelog(update, state: state, late: true, now: now))
            }
        }
        return effects
    }

    /// The changelog record of an applied update; the event is sent once it is stored.
    private mutating func appendChangelog(_ update: BadgeUpdate<EventInFlight>, state: UserBadgeState, late: Bool, now: RelayTime) -> RelayEffect {
        let partition = update.tag.record.partition
        let token = nextChangelogToken
        nextChangelogToken += 1
        awaitingChangelog[token] = (update.tag, state.badge, late)
        // The ledger holds the user's skipped seqs after this whole step; this record carries those
        // below its own seq, the ones remembered when it was applied (a tick that skips two gaps
        // writes the first application before the second skip).
        let skipped = partitions[partition]?.badges.sequencer.ledger.skippedSeqs(of: update.user).filter { $0.upper < state.lastSeq }.map {
            SkippedSeqs(lower: $0.lower, upper: $0.upper, skippedAt: now.epoch(ofMonotonic: $0.skippedAt))
        } ?? []
        return .appendChangelog(user: update.user, record: BadgeStateRecord(state: state, skipped: skipped, updatedAt: now.epoch),
                                partition: partition.partition, token: token)
    }

    private mutating func fanOut(_ inFlight: EventInFlight, badge: Int64?, late: Bool, now: RelayTime) -> [RelayEffect] {
        let event = inFlight.event
        var tokens: [String] = []
        switch event.targets {
        case .tokens(let given):
            tokens = given
        case .registeredDevices(let user):
            tokens = registry.devices(of: user).map(\.token)
        }
        guard !tokens.isEmpty else {
            expect(inFlight.record, results: 1)
            var record = ResultRecord.forEvent(id: event.id, user: event.user, seq: event.seq, badge: badge, status: .noDevices,
                                               reason: "no registered devices", at: now.epoch)
            record.late = late
            return [publish(record, for: inFlight.record)]
        }
        expect(inFlight.record, results: tokens.count)
        var effects: [RelayEffect] = []
        for token in tokens {
            var rendered: RenderedNotification
            do {
                rendered = try event.render(for: token, badge: badge, transport: configuration.transport)
            } catch {
                effects.append(publish(ResultRecord(
                    eventID: event.id, user: event.user, token: token, seq: event.seq, badge: badge, status: .invalid, apnsID: nil,
                    httpStatus: nil, reason: error.reason, attempts: 0, latencyMs: nil, at: now.epoch, late: late), for: inFlight.record))
                continue
            }
            let registration = registry.registration(for: token)
            if rendered.topic == nil { rendered.topic = registration?.topic ?? configuration.defaultTopic }
            // The registration wins over the event's apns.environment: a token belongs to one environment.
            rendered.environment = registration?.environment ?? event.apns?.environment ?? configuration.defaultEnvironment
            let pending = PendingNotification(record: inFlight.record, eventID: event.id, user: event.user, seq: event.seq,
                                              badge: badge, rendered: rendered, consumedAt: inFlight.consumedAt, late: late)
            notificationsInFlight += 1
            modify(inFlight.record.partition) { $0.notifications += 1 }
            let step = dispatcher.enqueue(DeviceNotification(token: token, eventID: event.id, badge: badge, isBadgeOnly: event.isBadgeOnly, payload: pending))
            effects += dispatchEffects(step, now: now)
        }
        return effects
    }

    private mutating func dispatchEffects(_ step: DispatchStep<PendingNotification>, now: RelayTime) -> [RelayEffect] {
        var effects = step.send.map(RelayEffect.send)
        notificationsInFlight -= step.superseded.count
        for notification in step.superseded {
            let pending = notification.payload
            counters.notificationsByStatus[.superseded, default: 0] += 1
            modify(pending.record.partition) { $0.notifications -= 1 }
            effects.append(publish(result(for: pending, status: .superseded, outcome: nil, now: now), for: pending.record))
        }
        return effects
    }

    private func result(for notification: PendingNotification, status: DeliveryStatus, outcome: SendOutcome?, now: RelayTime) -> ResultRecord {
        let ownReason = status == .superseded ? "replaced by a newer badge update" : (notification.late ? "late" : nil)
        return ResultRecord(
            eventID: notification.eventID, user: notification.user, token: notification.rendered.token, seq: notification.seq,
            badge: notification.badge, status: status, apnsID: outcome == nil ? nil : notification.rendered.apnsID,
            httpStatus: outcome?.httpStatus, reason: outcome?.reason ?? ownReason,
            attempts: outcome?.attempts ?? 0, latencyMs: outcome == nil ? nil : max(0, now.epoch &- notification.consumedAt), at: now.epoch,
            late: notification.late)
    }

    /// A result to publish for `record`, counted until ``published(_:)`` reports it.
    private mutating func publish(_ result: ResultRecord, for record: RecordReference) -> RelayEffect {
        modify(record.partition) { $0.publishing += 1 }
        return .publishResult(result, for: record)
    }

    /// The record will have `results` more results; its placeholder is released.
    private mutating func expect(_ record: RecordReference, results: Int) {
        modify(record.partition) { state in
            state.offsets.expectMore(record.offset, results: results)
            state.offsets.resultPublished(record.offset)
        }
    }

    /// Mutates a partition's state in place (a copy out and back would copy its offset table and
    /// sets on every record); `nil` when the partition is not assigned.
    @discardableResult
    private mutating func modify<Result>(_ partition: TopicPartition, _ body: (inout PartitionState) -> Result) -> Result? {
        guard partitions[partition] != nil else { return nil }
        return body(&partitions[partition]!)
    }

    /// Pauses every assigned partition at `maxInFlight` pending records or notifications (an event
    /// fans out to several devices, and the APNs supervisor's queue is sized by this bound);
    /// resumes below half (below 1 when the bound is 1: integer half of 1 is 0, which nothing is below).
    private mutating func backpressure() -> [RelayEffect] {
        let pending = max(pendingRecordCount, notificationsInFlight)
        if !isPaused && pending >= configuration.maxInFlight {
            isPaused = true
            return [.pause(partitions.keys.sorted())]
        }
        if isPaused && pending < max(1, configuration.maxInFlight / 2) {
            isPaused = false
            return [.resume(partitions.keys.sorted())]
        }
        return []
    }
}
