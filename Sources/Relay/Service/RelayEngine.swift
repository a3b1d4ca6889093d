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
}

/// How APNs answered a notification, reduced to what the relay records.
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

/// The progress a relay stores with each commit (Kafka commit metadata): every record up to
/// `resultsCompleteThrough` that it applied has its results published. Records after it may have
/// been applied without being sent; the partition's next owner sends those again.
public struct CommitProgress: Sendable, Equatable {
    public var resultsCompleteThrough: Int64

    public init(resultsCompleteThrough: Int64) { self.resultsCompleteThrough = resultsCompleteThrough }

    private static let prefix = "apns-relay/1 results-complete-through="

    /// The commit metadata text.
    public var metadata: String { Self.prefix + String(resultsCompleteThrough) }

    /// Reads commit metadata written by ``metadata``; `nil` for anything else.
    public init?(metadata: String?) {
        guard let metadata, metadata.hasPrefix(Self.prefix), let value = Int64(metadata.dropFirst(Self.prefix.count)) else { return nil }
        resultsCompleteThrough = value
    }

    /// The offsets a new owner must treat as possibly applied but unsent, given the group's
    /// committed offset, the progress stored with it and the partition's end.
    public static func replayTail(committed: Int64?, progress: CommitProgress?, end: Int64) -> Range<Int64> {
        let start = max(committed ?? 0, (progress?.resultsCompleteThrough ?? -1) + 1)
        return start < end ? start..<end : 0..<0
    }
}

/// Counters the service exports as metrics.
public struct RelayCounters: Sendable, Equatable {
    public var eventsConsumed = 0
    public var eventsApplied = 0
    public var eventsDuplicate = 0
    /// Events a previous owner had applied but maybe not sent (the uncommitted tail after a crash),
    /// sent again with the user's current badge.
    public var eventsReplayed = 0
    public var eventsInvalid = 0
    public var seqGapsSkipped: Int64 = 0
    public var deadLetters = 0
    public var notificationsByStatus: [DeliveryStatus: Int] = [:]
}

/// The relay's processing, as a pure state machine: inputs (consumed records, completions,
/// time) in, effects out. It owns the per-partition badge state, offsets, the device registry
/// and the per-device dispatcher; the driver (`RelayService`) does all I/O.
public struct RelayEngine: Sendable {
    public struct Configuration: Sendable {
        public var reorderWindowMilliseconds: Int64
        public var maxInFlight: Int
        public var transport: APNsTransport
        /// The default `apns-topic` when the event and the registration give none.
        public var defaultTopic: String?
        /// `apns.environment`: where a token without a registration goes when the event gives no `apns.environment`.
        public var defaultEnvironment: APNsEnvironment

        public init(reorderWindowMilliseconds: Int64 = 2_000, maxInFlight: Int = 10_000, transport: APNsTransport = .http2, defaultTopic: String? = nil,
                    defaultEnvironment: APNsEnvironment = .production) {
            self.reorderWindowMilliseconds = reorderWindowMilliseconds
            self.maxInFlight = maxInFlight
            self.transport = transport
            self.defaultTopic = defaultTopic
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
        var lastCommittedProgress: CommitProgress?
        var progressBeingCommitted: CommitProgress?
        /// Records consumed and not yet done (the backpressure measure).
        var pending = 0
        /// The replay tail: records in it may have been applied by a previous owner that stopped
        /// (crashed) before their results were published. From past the previous owner's
        /// "results complete through" mark up to the partition's end when it was restored.
        var replayTail: Range<Int64> = 0..<0
        /// Offsets of records applied (or replayed) whose results are not all published yet.
        var appliedUnfinished: Set<Int64> = []
        /// Offsets of records offered to the sequencer and not yet applied or found duplicate (held
        /// for a seq gap or for the restore): this owner may still apply them, so the progress mark
        /// must not pass them.
        var undecided: Set<Int64> = []
        /// The highest offset consumed.
        var lastConsumed: Int64?
        /// For users applied during the replay tail: their last seq as restored (before this owner
        /// applied anything), so a replayed record is recognised even after the user moved on.
        var restoredSeqs: [String: Int64] = [:]
    }

    public let configuration: Configuration
    private let decoder: PushEventDecoder
    private var partitions: [TopicPartition: PartitionState] = [:]
    private var dispatcher = DeviceDispatcher<PendingNotification>()
    public private(set) var registry = DeviceRegistry()
    private var awaitingChangelog: [UInt64: (event: EventInFlight, badge: Int64)] = [:]
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
            partitions[partition] = PartitionState(badges: BadgePartition(sequencer: BadgeSequencer(reorderWindowMs: configuration.reorderWindowMilliseconds)))
            effects.append(.restore(partition))
        }
        if isPaused { effects.append(.pause(assigned)) }
        return effects
    }

    /// The changelog partition matching `partition` was read: `records` are (user, value).
    ///
    /// `replayTail` is the range of offsets a previous owner may have applied without publishing
    /// their results: from past the "results complete through" mark of the last commit
    /// (``CommitProgress``) to the events partition's end when the restore began. A record in it
    /// that the restored state already covers is sent again (with the user's current badge, the
    /// same `apns-id` and collapse id) rather than reported `duplicate`, because the previous owner
    /// may have stopped before sending it. Empty when nothing can be a replay.
    public mutating func restored(_ partition: TopicPartition, records: [(user: String, value: [UInt8]?)],
                                  replayTail: Range<Int64> = 0..<0, now: Int64) -> [RelayEffect] {
        guard var state = partitions[partition] else { return [] }
        for record in records { state.badges.restore(user: record.user, value: record.value) }
        state.replayTail = replayTail
        let outcomes = state.badges.finishRestore(now: now)
        partitions[partition] = state
        return handle(outcomes, now: now)
    }

    /// Partitions were revoked: commit what is finished and drop their state. Work still in flight
    /// for them finishes, but its offsets are left for the next owner (at-least-once).
    public mutating func revoked(_ revoked: [TopicPartition]) -> [RelayEffect] {
        var offsets: [TopicPartition: Int64] = [:]
        for partition in revoked {
            guard var state = partitions.removeValue(forKey: partition) else { continue }
            pendingTotal -= state.pending
            // Always: the progress mark tells the next owner what need not be sent again.
            if let committable = state.offsets.committable { offsets[partition] = committable }
            state.badges.revoke()
        }
        return offsets.isEmpty ? [] : [.commit(offsets)]
    }

    /// Records of each assigned partition not yet finished.
    public func pendingRecords(of partition: TopicPartition) -> Int { partitions[partition]?.pending ?? 0 }

    /// A record of the events topic.
    public mutating func consumed(_ message: KafkaMessage, now: Int64) -> [RelayEffect] {
        let reference = RecordReference(message.topicPartition, message.offset)
        let tracked: Void? = modify(reference.partition) { state in
            // One placeholder result stands for "being processed" until the fan-out is known.
            state.offsets.track(message.offset, expectedResults: 1)
            state.pending += 1
        }
        guard tracked != nil else { return [] }
        pendingTotal += 1
        counters.eventsConsumed += 1

        var effects: [RelayEffect] = []
        let event: PushEvent
        do {
            event = try decoder.decode(message.value ?? [])
        } catch {
            counters.eventsInvalid += 1
            counters.deadLetters += 1
            expect(reference, results: 2)
            effects.append(.publishDeadLetter(message, error: error.reason))
            let id = message.key.map { String(decoding: $0, as: UTF8.self) } ?? "offset-\(message.offset)"
            effects.append(.publishResult(.forEvent(id: id, user: nil, seq: nil, badge: nil, status: .invalid, reason: error.reason, at: now), for: reference))
            effects += backpressure()
            return effects
        }
        let inFlight = EventInFlight(record: reference, event: event, consumedAt: now)
        if let update = event.ledgerUpdate(tag: inFlight) {
            modify(reference.partition) { $0.undecided.insert(message.offset) }
            switch partitions[reference.partition]!.badges.offer(update, now: now) {
            case .processed(let outcomes):
                effects += handle(outcomes, now: now)
            case .waitingForRestore, .refused:
                break
            }
        } else {
            effects += fanOut(inFlight, badge: nil, now: now)
        }
        modify(reference.partition) { state in
            state.lastConsumed = max(state.lastConsumed ?? message.offset, message.offset)
            if state.badges.phase == .ready, !state.replayTail.isEmpty, message.offset + 1 >= state.replayTail.upperBound {
                // Past the tail: later duplicates are plain duplicates.
                state.replayTail = 0..<0
                state.restoredSeqs = [:]
            }
        }
        effects += backpressure()
        return effects
    }

    /// The changelog append with this token was acknowledged: the event may now be sent.
    public mutating func changelogged(_ token: UInt64, now: Int64) -> [RelayEffect] {
        guard let (event, badge) = awaitingChangelog.removeValue(forKey: token) else { return [] }
        return fanOut(event, badge: event.event.badge == nil ? nil : badge, now: now)
    }

    /// APNs answered a dispatched notification.
    public mutating func sent(_ dispatch: Dispatch<PendingNotification>, outcome: SendOutcome, now: Int64) -> [RelayEffect] {
        let notification = dispatch.notification.payload
        var effects: [RelayEffect] = []
        notificationsInFlight -= 1
        counters.notificationsByStatus[outcome.status, default: 0] += 1
        effects.append(.publishResult(result(for: notification, status: outcome.status, outcome: outcome, now: now), for: notification.record))
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
            state.offsets.resultPublished(record.offset)
            guard !state.offsets.isPending(record.offset) else { return false }
            state.appliedUnfinished.remove(record.offset)
            guard state.pending > 0 else { return false }
            state.pending -= 1
            return true
        }
        if finished == true { pendingTotal -= 1 }
        return backpressure()
    }

    /// Time passes: releases gaps whose reorder window ran out.
    public mutating func tick(now: Int64) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        for partition in partitions.keys.sorted() {
            let outcomes = partitions[partition]!.badges.tick(now: now)
            effects += handle(outcomes, now: now)
        }
        return effects
    }

    /// The offsets to commit now: partitions whose committable offset or progress mark moved
    /// (the offset stays put while an early record waits for a seq gap; the mark still moves).
    public mutating func commitDue() -> [RelayEffect] {
        var offsets: [TopicPartition: Int64] = [:]
        for partition in partitions.keys {
            let progress = commitProgress(of: partition)
            modify(partition) { state in
                guard let committable = state.offsets.committable,
                      committable != state.lastCommitted || progress != state.lastCommittedProgress else { return }
                offsets[partition] = committable
                state.progressBeingCommitted = progress
            }
        }
        return offsets.isEmpty ? [] : [.commit(offsets)]
    }

    /// What to store with a commit of `partition`: how far every record this owner applied has
    /// its results published, for the partition's next owner to bound its replay tail.
    public func commitProgress(of partition: TopicPartition) -> CommitProgress? {
        guard let state = partitions[partition], let lastConsumed = state.lastConsumed else { return nil }
        // Not past a record applied and unfinished, nor past one this owner may still apply: after a
        // crash the mark must still cover a record applied after the commit that carried it.
        let firstOpen = [state.appliedUnfinished.min(), state.undecided.min()].compactMap { $0 }.min()
        let completeThrough = firstOpen.map { $0 - 1 } ?? lastConsumed
        return CommitProgress(resultsCompleteThrough: completeThrough)
    }

    /// The commit of these offsets succeeded.
    /// (The progress committed is the one the `commitDue` that asked for it computed.)
    public mutating func committed(_ offsets: [TopicPartition: Int64]) {
        for (partition, offset) in offsets {
            modify(partition) { state in
                state.lastCommitted = offset
                state.lastCommittedProgress = state.progressBeingCommitted
            }
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

    /// The earliest time `tick` has something to release.
    public var nextDeadline: Int64? {
        partitions.values.compactMap { $0.badges.sequencer.nextDeadline }.min()
    }

    /// Every assigned partition finished restoring.
    public var isRestored: Bool { partitions.values.allSatisfy { $0.badges.phase == .ready } }

    /// Records consumed and not finished, over all partitions.
    public var pendingRecordCount: Int { pendingTotal }

    // MARK: Steps

    private mutating func handle(_ outcomes: [SequencerOutcome<EventInFlight>], now: Int64) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        for outcome in outcomes {
            let record = outcome.update.tag.record
            modify(record.partition) { _ = $0.undecided.remove(record.offset) }
            switch outcome {
            case .duplicate(let update, let lastApplied):
                let event = update.tag
                if let badge = replayedBadge(of: update) {
                    counters.eventsReplayed += 1
                    partitions[event.record.partition]?.appliedUnfinished.insert(event.record.offset)
                    effects += fanOut(event, badge: event.event.badge == nil ? nil : badge, now: now)
                    continue
                }
                counters.eventsDuplicate += 1
                expect(event.record, results: 1)
                effects.append(.publishResult(
                    .forEvent(id: event.event.id, user: event.event.user, seq: event.event.seq, badge: nil, status: .duplicate,
                              reason: "seq \(event.event.seq ?? 0) <= last applied seq \(lastApplied)", at: now),
                    for: event.record))
            case .applied(let update, let state, let skipped):
                rememberRestoredSeq(of: update, skipped: skipped)
                partitions[update.tag.record.partition]?.appliedUnfinished.insert(update.tag.record.offset)
                counters.eventsApplied += 1
                counters.seqGapsSkipped += skipped
                let token = nextChangelogToken
                nextChangelogToken += 1
                awaitingChangelog[token] = (update.tag, state.badge)
                effects.append(.appendChangelog(
                    user: update.user, record: BadgeStateRecord(state: state, updatedAt: now),
                    partition: update.tag.record.partition.partition, token: token))
            }
        }
        return effects
    }

    /// The user's current badge when `update` is a replay of the previous owner's work: a record
    /// of the replay tail whose seq the restored state already covers. `nil` for a plain duplicate.
    private func replayedBadge(of update: BadgeUpdate<EventInFlight>) -> Int64? {
        let record = update.tag.record
        guard let seq = update.seq, let state = partitions[record.partition], state.replayTail.contains(record.offset),
              let current = state.badges.sequencer.ledger[update.user] else { return nil }
        let restoredSeq = state.restoredSeqs[update.user] ?? current.lastSeq
        return seq <= restoredSeq ? current.badge : nil
    }

    /// While a partition is in its replay tail, remembers each user's restored seq before this
    /// owner's first application for that user moves it.
    private mutating func rememberRestoredSeq(of update: BadgeUpdate<EventInFlight>, skipped: Int64) {
        let partition = update.tag.record.partition
        guard let seq = update.seq else { return }
        modify(partition) { state in
            if !state.replayTail.isEmpty && state.restoredSeqs[update.user] == nil { state.restoredSeqs[update.user] = seq - 1 - skipped }
        }
    }

    private mutating func fanOut(_ inFlight: EventInFlight, badge: Int64?, now: Int64) -> [RelayEffect] {
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
            return [.publishResult(.forEvent(id: event.id, user: event.user, seq: event.seq, badge: badge, status: .noDevices,
                                             reason: "no registered devices", at: now), for: inFlight.record)]
        }
        expect(inFlight.record, results: tokens.count)
        var effects: [RelayEffect] = []
        for token in tokens {
            var rendered: RenderedNotification
            do {
                rendered = try event.render(for: token, badge: badge, transport: configuration.transport)
            } catch {
                effects.append(.publishResult(ResultRecord(
                    eventID: event.id, user: event.user, token: token, seq: event.seq, badge: badge, status: .invalid, apnsID: nil,
                    httpStatus: nil, reason: error.reason, attempts: 0, latencyMs: nil, at: now), for: inFlight.record))
                continue
            }
            let registration = registry.registration(for: token)
            if rendered.topic == nil { rendered.topic = registration?.topic ?? configuration.defaultTopic }
            // The registration wins over the event's apns.environment: a token belongs to one environment.
            rendered.environment = registration?.environment ?? event.apns?.environment ?? configuration.defaultEnvironment
            let pending = PendingNotification(record: inFlight.record, eventID: event.id, user: event.user, seq: event.seq,
                                              badge: badge, rendered: rendered, consumedAt: inFlight.consumedAt)
            notificationsInFlight += 1
            let step = dispatcher.enqueue(DeviceNotification(token: token, eventID: event.id, badge: badge, isBadgeOnly: event.isBadgeOnly, payload: pending))
            effects += dispatchEffects(step, now: now)
        }
        return effects
    }

    private mutating func dispatchEffects(_ step: DispatchStep<PendingNotification>, now: Int64) -> [RelayEffect] {
        var effects = step.send.map(RelayEffect.send)
        notificationsInFlight -= step.superseded.count
        for notification in step.superseded {
            let pending = notification.payload
            counters.notificationsByStatus[.superseded, default: 0] += 1
            effects.append(.publishResult(result(for: pending, status: .superseded, outcome: nil, now: now), for: pending.record))
        }
        return effects
    }

    private func result(for notification: PendingNotification, status: DeliveryStatus, outcome: SendOutcome?, now: Int64) -> ResultRecord {
        ResultRecord(
            eventID: notification.eventID, user: notification.user, token: notification.rendered.token, seq: notification.seq,
            badge: notification.badge, status: status, apnsID: outcome == nil ? nil : notification.rendered.apnsID,
            httpStatus: outcome?.httpStatus, reason: outcome?.reason ?? (status == .superseded ? "replaced by a newer badge update" : nil),
            attempts: outcome?.attempts ?? 0, latencyMs: outcome == nil ? nil : max(0, now - notification.consumedAt), at: now)
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
    /// resumes below half.
    private mutating func backpressure() -> [RelayEffect] {
        let pending = max(pendingRecordCount, notificationsInFlight)
        if !isPaused && pending >= configuration.maxInFlight {
            isPaused = true
            return [.pause(partitions.keys.sorted())]
        }
        if isPaused && pending < configuration.maxInFlight / 2 {
            isPaused = false
            return [.resume(partitions.keys.sorted())]
        }
        return []
    }
}
