import APNsCore
import DequeModule
package import KafkaCore

/// The relay's processing, as a pure state machine: inputs (consumed records, completions,
/// time) in, effects out; the driver (``RelayDriver``) does all I/O. It routes each input to the
/// machines it is composed of and gathers their effects:
///
/// - per partition (``BadgePartition``: the ledger and sequencer; ``OffsetTracker``; progress),
///   with their restore (RelayEngine+Partitions.swift);
/// - an event's path: decode, sequence, changelog, fan-out (RelayEngine+FanOut.swift), into the
///   ``SendWindow`` (per-device order, the sender's window, the lease gate);
/// - publishing and its failures (RelayEngine+Publishing.swift, ``RetrySchedule``);
/// - the ``OwnershipLease`` and commits (RelayEngine+Ownership.swift);
/// - hand-overs of revoked partitions and the stop (RelayEngine+HandOvers.swift, ``HandOverPlan``).
///
/// Exactly once across owners: every badge-state record carries the offset of the newest event
/// applied to its user, and the changelog carries a ``ProgressMarker`` per partition. A new owner
/// skips the records the marker shows finished; of the rest, a record at or below its user's
/// offset was applied before (sent again with the current count, never applied again), and one
/// beyond it was never applied (a seq at or below the user's last seq is then a producer's
/// duplicate).
package struct RelayEngine: Sendable {
    package typealias Configuration = RelayEngineConfiguration

    /// Where the relay is in its life.
    package enum Lifecycle: Sendable, Equatable {
        case running
        /// A graceful stop: nothing new is consumed; the stop's hand-over runs.
        case stopping
        /// The stop's hand-over is over: the driver closes the clients and exits 0.
        case stopped
        /// A failure the relay cannot get past: it exits 1.
        case failed(String)
    }

    /// An event between decode and fan-out. One immutable object: the event is copied several times on its way
    /// (held by the sequencer, its outcome, the changelog's wait), and each copy then retains one reference, not
    /// one per string and array of the event.
    /// An event's fan-out to its devices, rendered and dispatched while the notifications between consume and
    /// result stay below `relay.max_in_flight`; the rest waits here (``fanOutsWaiting``), unrendered.
    struct FanOut {
        let inFlight: EventInFlight
        let badge: Int64?
        let late: Bool
        let devices: [(token: String, registration: DeviceRegistration?)]
        let payload: Result<[UInt8], EventRejection>
        /// Its own class (the event's priority); a turn may charge it as urgent (``FanOutScheduler``).
        let deliveryClass: DeliveryClass
        /// The next device to dispatch.
        var next = 0
        /// The last notification rendered: a device with the same topic gets a copy with its own token and apns-id.
        var sibling: APNsNotification?

        var isDone: Bool { next == devices.count }
    }

    final class EventInFlight: Sendable {
        let record: RecordReference
        let event: PushEvent
        let consumedAt: Int64

        init(record: RecordReference, event: PushEvent, consumedAt: Int64) {
            self.record = record
            self.event = event
            self.consumedAt = consumedAt
        }
    }

    struct PartitionState: Sendable {
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
        /// Per unfinished record, the devices whose result is published (by this owner, or by the
        /// previous one as its marker says): a hand-over's marker lists them, so the next owner
        /// sends and publishes nothing twice for a record that was delivered to some devices only.
        var devicesDone: [Int64: [DeviceDigest]] = [:]
        /// Which assignment this state belongs to: a restore started for an earlier one is ignored.
        var generation: UInt64
        /// Restored, and waiting for the layout to be settled before its events run (``LayoutWait``).
        var layoutWait: LayoutWait?
        /// What the events partitions' owners read again after the last layout change (``ReadAgain``), by partition.
        var readAgain: [Int32: ReadAgain] = [:]
        /// The offsets of the bulk records started here and not finished: bulk's share of the records in process.
        var bulkStarted: Set<Int64> = []
    }

    package let configuration: Configuration

    let decoder: PushEventDecoder

    var partitions = PartitionTable<PartitionState>()

    /// Per-device order and the window of sends handed to the sender.
    var window: SendWindow<PendingNotification>
    /// Fan-outs waiting for room in the window, per user in the order their events were released
    /// (``FanOutScheduler``: urgent first, users in turn, each within its share).
    var fanOuts: FanOutScheduler<FanOut>
    /// The send-rate caps (`relay.rate_limits`), asked before a notification enters the window.
    var rateLimits: SendRateLimits
    /// Bulk records read ahead and set aside, decoded, before the sequencer (``ParkedRecords``).
    var parked = ParkedRecords<ParkedRecord>()

    /// A record set aside: what its start needs.
    struct ParkedRecord {
        let message: KafkaMessage
        let event: PushEvent
        let reference: RecordReference
    }

    /// The send window's step, kept emptied between inputs for its storage (``throughWindow(now:into:_:)``).
    var windowStep = SendWindow<PendingNotification>.Step()

    package internal(set) var registry = DeviceRegistry()

    var awaitingChangelog = SerialTable<(event: EventInFlight, badge: Int64, late: Bool)>()

    var nextChangelogToken: UInt64 = 0

    /// Backpressure has the partitions paused.
    package internal(set) var isPaused = false

    /// Notifications handed to the send window and not yet answered or superseded.
    package var notificationsInFlight: Int { window.inFlight }

    /// Records read ahead: set aside before the sequencer (``parked``), or waiting for room in the window (``fanOuts``).
    package var readAheadRecordCount: Int { parked.count + fanOuts.waitingJobs }

    /// The sum of the partitions' `pending` (kept as it changes: backpressure reads it per record).
    var pendingTotal = 0
    /// Bulk records started and not finished, over every partition (their `bulkStarted`): what the read-ahead
    /// weighs against bulk's share of the window, urgent records left out.
    var bulkInProcess = 0

    package internal(set) var counters = RelayCounters()

    package internal(set) var lifecycle = Lifecycle.running

    /// `push.devices` was read to its end (or the engine does not wait for it).
    package internal(set) var isDeviceRegistryLoaded: Bool

    var nextGeneration: UInt64 = 0

    /// Hand-overs under way (revokes, the stop), in the order they began.
    var handOvers: [HandOverPlan] = []

    var nextHandOverID: UInt64 = 0

    /// Whether the stop's hand-over got every step done (the driver exits 0, else 1).
    var stopHandedOver = true

    /// Revokes waiting for hand-overs (their ids) before they are acknowledged.
    var revokesWaiting: [UInt64: Set<UInt64>] = [:]

    /// Failed effects waiting for their retry, and the failure bound's streaks.
    var retries: RetrySchedule

    /// The periodic commit's schedule and every commit request waiting for its answer.
    var commits: CommitRequests

    /// The ownership lease, the sender's permit, and what waits for the lease.
    var leaseGate: LeaseGate

    package init(configuration: Configuration) {
        self.configuration = configuration
        self.decoder = PushEventDecoder(transport: configuration.transport)
        self.isDeviceRegistryLoaded = !configuration.waitsForDeviceRegistry
        self.retries = RetrySchedule(base: configuration.retryBaseMilliseconds, cap: configuration.retryCapMilliseconds,
                                     bound: configuration.failureTimeoutMilliseconds, seed: configuration.jitterSeed)
        self.window = SendWindow(capacity: configuration.maxInFlight)
        self.fanOuts = FanOutScheduler(limits: configuration.fanOutLimits)
        self.rateLimits = SendRateLimits(rules: configuration.rateLimits)
        self.commits = CommitRequests(intervalMilliseconds: configuration.commitIntervalMilliseconds)
        self.leaseGate = LeaseGate(sessionTimeoutMilliseconds: configuration.sessionTimeout?.inMilliseconds)
    }

    // MARK: Inputs

    /// The relay starts: the device registry is read first when the engine waits for it.
    package mutating func start(now: RelayTime) -> [RelayEffect] {
        commits.start(now: now.monotonic)
        return isDeviceRegistryLoaded ? [] : [.loadDeviceRegistry]
    }

    /// The event consumer failed and cannot go on: the relay exits 1 (crash-only recovery), or `exitCode` (2: the
    /// configuration cannot work with the group, such as another kind of assignor than its members).
    package mutating func consumerFailed(_ error: String, exitCode: Int32 = 1) -> [RelayEffect] {
        guard isRunning || isStopping else { return [] }
        return fail("the event consumer failed: \(error)", code: exitCode)
    }

    /// A record of the events topic; its effects are appended to `effects`. The hot inputs (a record, a changelog
    /// acknowledgement, an answer) take the caller's array, so an input allocates none of its own.
    package mutating func consumed(_ message: KafkaMessage, now: RelayTime, into effects: inout [RelayEffect]) {
        // While stopping, fetched records are left for the next owner (not tracked, not committed).
        guard isRunning else { return }
        let registryLoaded = isDeviceRegistryLoaded
        let tracked = modify(message.topicPartition) { state -> Bool in
            // One placeholder result stands for "being processed" until the fan-out is known.
            state.offsets.track(message.offset, expectedResults: 1)
            state.pending += 1
            guard state.badges.phase == .restoring || state.revoking || !registryLoaded else { return false }
            state.waitingForRestore.append(message)
            return true
        }
        guard let waiting = tracked else { return }
        pendingTotal += 1
        counters.eventsConsumed += 1
        if !waiting { process(message, now: now, into: &effects) }
        effects += backpressure()
    }

    /// The trace context of the event whose badge change is changelog append `token`, while it is being stored.
    package func traceOfChangelogAppend(_ token: UInt64) -> TraceHeaders? {
        awaitingChangelog[token]?.event.event.trace
    }

    /// The changelog append with this token was acknowledged; the effects are appended to `effects`.
    package mutating func changelogged(_ token: UInt64, now: RelayTime, into effects: inout [RelayEffect]) {
        retries.succeeded(.publishing(.changelog))
        guard let (event, badge, late) = awaitingChangelog.removeValue(forKey: token) else { return }
        // A partition being handed over sends nothing new: the next owner finds the change in the
        // changelog and sends it (once). The flag alone is read: a copy of the partition's state bound
        // here would live through the fan-out and make its offset-table update copy the whole table.
        guard standing(of: event.record) == .serving else { return }
        fanOut(event, badge: event.event.badge == nil ? nil : badge, late: late, now: now, into: &effects)
        effects += backpressure()
    }

    /// A result or dead letter of `record` was published; `device` is the result's token, if any.
    package mutating func published(_ record: RecordReference, device: String? = nil, now: RelayTime) -> [RelayEffect] {
        retries.succeeded(.publishing(.records))
        let finished = modify(record) { state -> Bool in
            state.publishing = max(0, state.publishing - 1)
            state.offsets.resultPublished(record.offset)
            guard !state.offsets.isPending(record.offset) else {
                // Only records with results still to come keep a list (most records have one device).
                if let device { state.devicesDone[record.offset, default: []].append(DeviceDigest(token: device)) }
                return false
            }
            if !state.devicesDone.isEmpty { state.devicesDone[record.offset] = nil }
            guard state.pending > 0 else { return false }
            state.pending -= 1
            return true
        }
        var effects: [RelayEffect] = []
        if finished == true {
            pendingTotal -= 1
            bulkFinished(record)
            if !parked.isEmpty { startParked(now: now, into: &effects) }
        }
        return effects + backpressure() + advanceHandOvers(now: now)
    }

    /// A failed-token record or a progress marker was stored.
    package mutating func publishSucceeded(_ destination: PublishDestination) {
        retries.succeeded(.publishing(destination))
    }

    /// Stops everything: the driver reports unhealthy and exits with `code` (1: a failure a restart may get past; 2:
    /// one an operator must act on first).
    mutating func fail(_ reason: String, code: Int32 = 1) -> [RelayEffect] {
        lifecycle = .failed(reason)
        return [.exit(code: code, reason: reason)]
    }

    var isRunning: Bool { lifecycle == .running }

    var isStopping: Bool { if case .stopping = lifecycle { true } else { false } }

    var isFailed: Bool { if case .failed = lifecycle { true } else { false } }

    /// Time passes: releases gaps whose reorder window ran out (on the monotonic clock), runs
    /// retries that are due, commits every `commitIntervalMilliseconds` (one commit at a time:
    /// while the coordinator is slow they would only queue behind each other), and hands over
    /// revokes and a stop whose deadline passed.
    package mutating func tick(now: RelayTime) -> [RelayEffect] {
        guard !isFailed, lifecycle != .stopped else { return [] }
        var effects: [RelayEffect] = []
        for partition in partitions.keys where standing(of: partition) == .serving {
            let outcomes = modify(partition) { $0.badges.tick(now: now.monotonic) } ?? []
            handle(outcomes, now: now, into: &effects)
        }
        effects += dueRetries(now: now)
        // Room freed by a drop (a hand-over) lets waiting fan-outs, and records set aside, go on; fan-outs held for a
        // send-rate cap try again (its bucket filled meanwhile).
        if fanOuts.hasHeld { fanOuts.releaseHeld() }
        resumeFanOuts(now: now, into: &effects)
        startParked(now: now, into: &effects)
        // A commit the coordinator never answered does not hold the next one back forever (``CommitRequests``).
        if commits.periodicDue(now: now.monotonic, urgent: needsLeaseConfirmation(now: now)) {
            effects += commitDue(now: now, renewingLease: leaseWantsRenewal(now: now))
        }
        effects += checkLease(now: now)
        effects += advanceHandOvers(now: now)
        return effects
    }

    /// The earliest monotonic time `tick` has something to release.
    package var nextDeadline: Int64? {
        partitions.values.compactMap { $0.badges.sequencer.nextDeadline }.min()
    }

    /// Every assigned partition finished restoring.
    package var isRestored: Bool { partitions.allSatisfy { $0.badges.phase == .ready } }

    /// Records consumed and not finished, over all partitions.
    package var pendingRecordCount: Int { pendingTotal }

    // MARK: Partition state

    /// The address of `partition`'s offset table (``OffsetTracker/entriesAddress``), for tests of in-place updates.
    package func offsetTableAddress(of partition: TopicPartition) -> UnsafeRawPointer? {
        partitions[partition]?.offsets.entriesAddress
    }

    /// Mutates a partition's state in place (a copy out and back would copy its offset table and
    /// sets on every record); `nil` when the partition is not assigned.
    @discardableResult
    mutating func modify<Result>(_ partition: TopicPartition, _ body: (inout PartitionState) -> Result) -> Result? {
        // In place: `partitions[partition] != nil` alone copies the whole state (retaining each of its tables) to
        // compare it with nil, and this runs several times per record.
        partitions.modify(partition, body)
    }

    /// Mutates the state of `record`'s partition in place when the partition's current assignment consumed the record;
    /// `nil` when the partition is not assigned, or was given up and assigned again since (a completion of the earlier
    /// assignment touches nothing of the current one).
    @discardableResult
    mutating func modify<Result>(_ record: RecordReference, _ body: (inout PartitionState) -> Result) -> Result? {
        partitions.modify(record.partition) { state -> Result? in state.generation == record.generation ? body(&state) : nil } ?? nil
    }

    /// Where an assignment stands, for what an input may still do for it.
    enum AssignmentStanding: Equatable {
        /// Current and served: its work goes on.
        case serving
        /// Current and being handed over: nothing new starts.
        case handingOver
        /// Not the partition's current assignment (not assigned, or given up and assigned again since): an input of
        /// the earlier one touches nothing.
        case notCurrent
    }

    /// Where the assignment that consumed `record` stands (``modify(_:_:)-(RecordReference,_)``).
    mutating func standing(of record: RecordReference) -> AssignmentStanding {
        modify(record) { $0.revoking ? .handingOver : .serving } ?? .notCurrent
    }

    /// Where `partition`'s assignment stands. Reads the flag in place: binding the state (`if let state =
    /// partitions[partition]`) copies it, and a copy alive while the state is updated makes the update copy its tables.
    mutating func standing(of partition: TopicPartition) -> AssignmentStanding {
        read(partition) { $0.revoking ? .handingOver : .serving } ?? .notCurrent
    }

    /// Whether some partition's open records reach `1/share` of what its progress marker describes exactly.
    mutating func markerOpenRecordsReach(share: Int) -> Bool {
        let budget = configuration.markerRunsBudget
        // No partition has more open records than all of them together: below the limit of the widest offsets,
        // no partition needs a look (per record, this is the whole cost).
        guard pendingTotal * share >= ProgressMarker.openRecordLimit(through: .max, runsBudget: budget) else { return false }
        for partition in partitions.keys {
            let reached = read(partition) { state in
                let through = max(state.lastConsumed ?? 0, state.badges.previousProgress?.through ?? 0)
                return state.pending * share >= ProgressMarker.openRecordLimit(through: through, runsBudget: budget)
            }
            if reached == true { return true }
        }
        return false
    }

    /// Reads `partition`'s state in place (no copy of it); `nil` when it is not assigned. Mutating because only the
    /// dictionary's modify accessor yields the state in place: its getter copies the whole state, retaining each of
    /// its tables, for every input that reads it.
    mutating func read<Result>(_ partition: TopicPartition, _ body: (PartitionState) -> Result) -> Result? {
        modify(partition) { body($0) }
    }

    /// Pauses every assigned partition at `maxInFlight` records in process (consumed, not finished, not read ahead:
    /// neither set aside before the sequencer, ``parked``, nor waiting for room in the window, ``fanOuts``), or when
    /// those read ahead hold `relay.read_ahead_bytes`; resumes below half of both (below 1 when the bound is 1:
    /// integer half of 1 is 0, which nothing is below). Bulk records are set aside beyond `maxInFlight` less the
    /// urgent reserve in process, so bulk alone never pauses the reading: an urgent record behind a flood of bulk
    /// ones is still read, and starts at once.
    ///
    /// They pause too while one partition's open records reach what its progress marker can describe
    /// (``ProgressMarker/openRecordLimit(through:runsBudget:)``), and resume below half of it, so a
    /// marker stays exact within Kafka's record size however large `maxInFlight` is.
    mutating func backpressure() -> [RelayEffect] {
        let pending = pendingRecordCount - parked.count - fanOuts.waitingJobs
        let readAhead = fanOuts.waitingBytes + parked.bytes
        let readAheadLimit = configuration.readAheadBytes
        if !isPaused && (pending >= configuration.maxInFlight || readAhead >= readAheadLimit || markerOpenRecordsReach(share: 1)) {
            isPaused = true
            return [.pause(partitions.keys)]
        }
        if isPaused && pending < max(1, configuration.maxInFlight / 2) && readAhead < max(1, readAheadLimit / 2)
            && !markerOpenRecordsReach(share: 2) {
            isPaused = false
            return [.resume(partitions.keys)]
        }
        return []
    }
}
