import APNs
import DequeModule
package import Kafka

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
        /// Per unfinished record, the devices whose result is published (by this owner, or by the
        /// previous one as its marker says): a hand-over's marker lists them, so the next owner
        /// sends and publishes nothing twice for a record that was delivered to some devices only.
        var devicesDone: [Int64: [DeviceDigest]] = [:]
        /// Which assignment this state belongs to: a restore started for an earlier one is ignored.
        var generation: UInt64
        /// Since when (monotonic) the restore keeps failing, and how often it failed.
        var restoreFailingSince: Int64?
        var restoreFailures = 0
    }

    /// A failed effect waiting for its retry.
    private struct Retry: Sendable {
        var due: Int64
        var effect: RelayEffect
    }

    /// Consecutive failures of one destination (a topic, a partition's restore, the registry).
    private struct FailureStreak: Sendable {
        var since: Int64
        var failures: Int
    }

    package let configuration: Configuration
    private let decoder: PushEventDecoder
    private var partitions: [TopicPartition: PartitionState] = [:]
    private var dispatcher = DeviceDispatcher<PendingNotification>()
    package private(set) var registry = DeviceRegistry()
    private var awaitingChangelog: [UInt64: (event: EventInFlight, badge: Int64, late: Bool)] = [:]
    private var nextChangelogToken: UInt64 = 0
    /// Backpressure has the partitions paused.
    package private(set) var isPaused = false
    /// Notifications handed to the dispatcher and not yet answered or superseded.
    package private(set) var notificationsInFlight = 0
    /// The sum of the partitions' `pending` (kept as it changes: backpressure reads it per record).
    private var pendingTotal = 0
    package private(set) var counters = RelayCounters()
    package private(set) var lifecycle = Lifecycle.running
    /// `push.devices` was read to its end (or the engine does not wait for it).
    package private(set) var isDeviceRegistryLoaded: Bool
    private var nextGeneration: UInt64 = 0
    /// Sends handed to the driver and not answered: at most `maxInFlight`.
    private var sendsOutstanding = 0
    /// Sends the dispatcher released beyond that window, in release order (head index: removing
    /// the first of an array shifts it).
    private var readyToSend: Deque<DeviceDispatch<PendingNotification>> = []
    /// Hand-overs under way (revokes, the stop), in the order they began.
    private var handOvers: [HandOverPlan] = []
    private var nextHandOverID: UInt64 = 0
    /// Whether the stop's hand-over got every step done (the driver exits 0, else 1).
    private var stopHandedOver = true
    /// Revokes waiting for hand-overs (their ids) before they are acknowledged.
    private var revokesWaiting: [UInt64: Set<UInt64>] = [:]
    private var retries: [Retry] = []
    private var publishStreaks: [FailureStreak?] = Array(repeating: nil, count: PublishDestination.allCases.count)
    private var registryStreak: FailureStreak?
    private var jitter: SplitMix64
    private var nextCommitAt: Int64 = .min
    /// The periodic commit waiting for its answer: its request and when it was made.
    private var commitInFlight: (request: UInt64, at: Int64)?
    /// When each commit request still unanswered was made (a success confirms the lease as of then).
    private var commitsRequested: [UInt64: Int64] = [:]
    private var nextCommitRequest: UInt64 = 0
    /// The group's confirmation that the partitions are still this relay's (see ``OwnershipLease``);
    /// `nil` when the configuration gives no session timeout (engine tests that do not model the group).
    package private(set) var lease: OwnershipLease?
    /// The lease expiry last handed to the driver for its sends (``RelayEffect/permitSends(until:)``).
    private var permittedUntil: Int64?
    /// Changelog appends made while the lease had lapsed, in order: written once it is confirmed.
    private var appendsAwaitingLease: [RelayEffect] = []
    /// Since when work has waited for the lease (the failure bound counts from there).
    private var waitingForLeaseSince: Int64?

    package init(configuration: Configuration) {
        self.configuration = configuration
        self.decoder = PushEventDecoder(transport: configuration.transport)
        self.isDeviceRegistryLoaded = !configuration.waitsForDeviceRegistry
        self.jitter = SplitMix64(seed: configuration.jitterSeed)
        self.lease = configuration.sessionTimeout.map { OwnershipLease(sessionTimeoutMilliseconds: $0.inMilliseconds) }
    }

    // MARK: Inputs

    /// The relay starts: the device registry is read first when the engine waits for it.
    package mutating func start(now: RelayTime) -> [RelayEffect] {
        nextCommitAt = now.monotonic + configuration.commitIntervalMilliseconds
        return isDeviceRegistryLoaded ? [] : [.loadDeviceRegistry]
    }

    /// Partitions were assigned (the group answered at `at`, monotonic, which confirms the lease):
    /// restore each before its events are processed.
    package mutating func assigned(_ assigned: [TopicPartition], at: Int64? = nil) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        if let at { lease?.confirm(at: at) }
        for partition in assigned {
            pendingTotal -= partitions[partition]?.pending ?? 0
            let sequencer = BadgeSequencer<EventInFlight>(reorderWindowMs: configuration.reorderWindowMilliseconds,
                                                          lateSeqMemory: configuration.lateSeqMemory)
            nextGeneration += 1
            partitions[partition] = PartitionState(badges: BadgePartition(sequencer: sequencer), generation: nextGeneration)
            effects.append(.restore(partition, generation: nextGeneration))
        }
        if isPaused { effects.append(.pause(assigned)) }
        return effects + permitSends()
    }

    // MARK: Ownership

    /// Whether the relay may send and write for its partitions at `now`: its lease holds.
    private func mayAct(now: RelayTime) -> Bool {
        lease?.isValid(at: now.monotonic) ?? true
    }

    /// Whether work waits for the lease: a commit is worth sending at once to confirm it.
    private func needsLeaseConfirmation(now: RelayTime) -> Bool {
        !mayAct(now: now) && (!readyToSend.isEmpty || !appendsAwaitingLease.isEmpty)
    }

    /// Time passes: past the failure bound with work waiting for the lease, the relay gives up
    /// (the group does not answer, or keeps refusing this member); a crash-only restart rejoins.
    private mutating func checkLease(now: RelayTime) -> [RelayEffect] {
        guard needsLeaseConfirmation(now: now) else {
            waitingForLeaseSince = nil
            return []
        }
        let since = waitingForLeaseSince ?? now.monotonic
        waitingForLeaseSince = since
        guard now.monotonic - since >= configuration.failureTimeoutMilliseconds else { return [] }
        return fail("the consumer group has not confirmed this relay's partitions for \((now.monotonic - since) / 1_000) s; sending and writing for them stopped")
    }

    /// The lease was confirmed: what waited for it goes out, and the sender may write until the new expiry.
    private mutating func leaseConfirmed(now: RelayTime) -> [RelayEffect] {
        guard mayAct(now: now) else { return [] }
        var effects = permitSends()
        let appends = appendsAwaitingLease
        appendsAwaitingLease = []
        for append in appends {
            // A partition given up meanwhile dropped its waiting event; its change is not written.
            guard case .appendChangelog(_, _, _, let token) = append, awaitingChangelog[token] != nil else { continue }
            effects.append(append)
        }
        return effects + releaseReadySends(now: now)
    }

    /// Tells the driver until when its sender may write (the lease's expiry), when that moved.
    private mutating func permitSends() -> [RelayEffect] {
        guard let expiry = lease?.expiry, expiry != permittedUntil else { return [] }
        permittedUntil = expiry
        return [.permitSends(until: expiry)]
    }

    /// A changelog append, or held until the lease is confirmed (in order: a user's changes are
    /// written in the order they were made).
    private mutating func emitAppend(_ append: RelayEffect, now: RelayTime) -> [RelayEffect] {
        guard mayAct(now: now), appendsAwaitingLease.isEmpty else {
            appendsAwaitingLease.append(append)
            return []
        }
        return [append]
    }

    /// The changelog partition matching `partition` was read to its end: `records` are its
    /// (key, value) pairs in offset order, users' states and the previous owner's progress marker.
    /// The records that waited for it run now (once the device registry is loaded too). A
    /// restore of an earlier assignment of the partition (`generation`) is ignored.
    package mutating func restored(_ partition: TopicPartition, generation: UInt64? = nil, records: [(key: [UInt8], value: [UInt8]?)], now: RelayTime) -> [RelayEffect] {
        var changelog = RestoredChangelog()
        for record in records { changelog.add(key: record.key[...], value: record.value?[...]) }
        return restored(partition, generation: generation, changelog: changelog, now: now)
    }

    /// The changelog partition was read to its end, decoded as it was read (see ``RestoredChangelog``).
    package mutating func restored(_ partition: TopicPartition, generation: UInt64? = nil, changelog: RestoredChangelog, now: RelayTime) -> [RelayEffect] {
        guard var state = partitions[partition], state.badges.phase == .restoring,
              generation == nil || generation == state.generation else { return [] }
        state.badges.restore(changelog, now: now)
        state.badges.finishRestore()
        state.restoreFailingSince = nil
        partitions[partition] = state
        return runWaiting(in: [partition], now: now)
    }

    /// Reading the changelog partition failed: read it again after a backoff, from its beginning
    /// (a partial read must never be the ledger). Past the failure bound the relay gives up.
    package mutating func restoreFailed(_ partition: TopicPartition, generation: UInt64, error: String, now: RelayTime) -> [RelayEffect] {
        guard isRunning, var state = partitions[partition], state.generation == generation, state.badges.phase == .restoring else { return [] }
        let since = state.restoreFailingSince ?? now.monotonic
        state.restoreFailingSince = since
        state.restoreFailures += 1
        counters.restoreFailures += 1
        let failures = state.restoreFailures
        partitions[partition] = state
        if now.monotonic - since >= configuration.failureTimeoutMilliseconds {
            return fail("the badge state of \(partition) could not be restored for \((now.monotonic - since) / 1_000) s: \(error)")
        }
        schedule(.restore(partition, generation: generation), afterFailures: failures, now: now)
        return []
    }

    /// `push.devices` was read to the end it had when reading started: events may run.
    package mutating func deviceRegistryLoaded(now: RelayTime) -> [RelayEffect] {
        registryStreak = nil
        guard !isDeviceRegistryLoaded else { return [] }
        isDeviceRegistryLoaded = true
        return runWaiting(in: partitions.keys.sorted(), now: now)
    }

    /// Reading `push.devices` failed: read it again from its beginning after a backoff (the
    /// registry's records apply idempotently). Past the failure bound the relay gives up.
    package mutating func deviceRegistryFailed(_ error: String, now: RelayTime) -> [RelayEffect] {
        guard isRunning else { return [] }
        var streak = registryStreak ?? FailureStreak(since: now.monotonic, failures: 0)
        streak.failures += 1
        registryStreak = streak
        counters.deviceRegistryFailures += 1
        if now.monotonic - streak.since >= configuration.failureTimeoutMilliseconds {
            return fail("the device registry could not be read for \((now.monotonic - streak.since) / 1_000) s: \(error)")
        }
        schedule(.loadDeviceRegistry, afterFailures: streak.failures, now: now)
        return []
    }

    /// The event consumer failed and cannot go on: the relay exits 1 (crash-only recovery).
    package mutating func consumerFailed(_ error: String) -> [RelayEffect] {
        guard isRunning || isStopping else { return [] }
        return fail("the event consumer failed: \(error)")
    }

    /// Runs the records that waited for the restore of these partitions and the device registry.
    private mutating func runWaiting(in partitionsToRun: [TopicPartition], now: RelayTime) -> [RelayEffect] {
        guard isDeviceRegistryLoaded, isRunning else { return [] }
        var effects: [RelayEffect] = []
        for partition in partitionsToRun {
            guard var state = partitions[partition], state.badges.phase == .ready, !state.revoking, !state.waitingForRestore.isEmpty else { continue }
            let waiting = state.waitingForRestore
            state.waitingForRestore = []
            partitions[partition] = state
            for message in waiting { effects += process(message, now: now) }
        }
        effects += backpressure()
        return effects
    }

    /// The consumer is taking these partitions away: from now on nothing new is sent or written
    /// for them. Queued notifications are dropped (their records stay unfinished, so the next
    /// owner sends them, once); sends in flight finish and their results are published; gaps are
    /// not released and acknowledged changelog writes start no sends. Their hand-over
    /// (``HandOverPlan``) goes on from there.
    private mutating func revoking(_ revoking: [TopicPartition], now: RelayTime) -> [RelayEffect] {
        let leaving = Set(revoking.filter { partitions.index(forKey: $0) != nil })
        guard !leaving.isEmpty else { return [] }
        for partition in leaving { modify(partition) { $0.revoking = true } }
        let dropped = dispatcher.removeQueued { leaving.contains($0.payload.record.partition) }
        notificationsInFlight -= dropped.count
        for notification in dropped { modify(notification.payload.record.partition) { $0.notifications -= 1 } }
        // Retries waiting for them are dropped: the next owner publishes (and stores) what is left.
        retries.removeAll { retry in
            if let partition = retry.effect.recordPartition {
                guard leaving.contains(partition) else { return false }
                partitions[partition]!.publishing -= 1
                return true
            }
            if case .appendChangelog(_, _, _, let token) = retry.effect, let waiting = awaitingChangelog[token],
               leaving.contains(waiting.event.record.partition) {
                awaitingChangelog[token] = nil
                return true
            }
            return false
        }
        // Released by the dispatcher but not handed to the driver: dropped like the queued ones;
        // each frees its device's slot for the device's next notification (of another partition).
        var effects: [RelayEffect] = []
        let releasedUnsent = readyToSend.filter { leaving.contains($0.notification.payload.record.partition) }
        readyToSend.removeAll { leaving.contains($0.notification.payload.record.partition) }
        for dispatch in releasedUnsent {
            notificationsInFlight -= 1
            modify(dispatch.notification.payload.record.partition) { $0.notifications -= 1 }
            effects += dispatchEffects(dispatcher.complete(dispatch.ticket, outcome: .finished), now: now)
        }
        return effects + backpressure()
    }

    /// The consumer is taking these partitions away: a hand-over (``HandOverPlan``) with the
    /// revoke's deadlines. Revoke `id` is acknowledged once every hand-over of its partitions is
    /// done (this one, and the stop's if it had begun). A `lost` revoke (the group gave them away
    /// already) hands nothing over: their state is dropped at once, nothing more is sent, written
    /// or committed for them, and what was unfinished is the next owner's.
    package mutating func revokeRequested(_ partitionsLeaving: [TopicPartition], id: UInt64 = 0, lost: Bool = false, now: RelayTime) -> [RelayEffect] {
        guard !isFailed else { return [] }
        let leaving = partitionsLeaving.filter { partitions.index(forKey: $0) != nil }
        var effects = revoking(leaving, now: now)
        guard !lost else {
            if !leaving.isEmpty { effects.append(.cancelSends(leaving)) }
            drop(leaving)
            // A hand-over of these partitions under way finds nothing of them left to hand over.
            return effects + [.acknowledgeRevoke(id)] + advanceHandOvers(now: now)
        }
        var waitsFor = Set(handOvers.filter { $0.partitions.contains(where: leaving.contains) }.map(\.id))
        let unplanned = leaving.filter { partition in !handOvers.contains { $0.partitions.contains(partition) } }
        if !unplanned.isEmpty || waitsFor.isEmpty {
            nextHandOverID += 1
            handOvers.append(HandOverPlan(id: nextHandOverID, purpose: .revoke, partitions: unplanned, now: now.monotonic,
                                          drain: configuration.revokeDrainMilliseconds,
                                          total: configuration.revokeDrainMilliseconds + configuration.handOverMilliseconds))
            waitsFor.insert(nextHandOverID)
        }
        revokesWaiting[id] = waitsFor
        return effects + advanceHandOvers(now: now)
    }

    /// A graceful stop: nothing new is consumed (the partitions pause; records fetched from now
    /// on are left for the next owner); work in flight finishes, then a hand-over of every
    /// partition (``HandOverPlan``), all within `shutdownTimeout`: 60% to finish work in flight,
    /// 20% to hand over; the driver keeps the rest to close its clients.
    package mutating func stopRequested(now: RelayTime) -> [RelayEffect] {
        guard isRunning else { return [] }
        lifecycle = .stopping
        // Records waiting for a restore or the registry never start: the next owner has them.
        for partition in partitions.keys {
            let waiting = modify(partition) { state -> Int in
                let count = state.waitingForRestore.count
                state.waitingForRestore = []
                state.pending -= count
                return count
            } ?? 0
            pendingTotal -= waiting
        }
        let leaving = partitions.keys.filter { partition in !handOvers.contains { $0.partitions.contains(partition) } }.sorted()
        nextHandOverID += 1
        let budget = configuration.shutdownTimeoutMilliseconds
        handOvers.append(HandOverPlan(id: nextHandOverID, purpose: .stop, partitions: leaving, now: now.monotonic,
                                      drain: budget * 6 / 10, total: budget * 8 / 10))
        return [.pause(partitions.keys.sorted())] + advanceHandOvers(now: now)
    }

    /// Moves every hand-over on as far as what is in flight and the clock allow.
    private mutating func advanceHandOvers(now: RelayTime) -> [RelayEffect] {
        guard !handOvers.isEmpty else { return [] }
        var effects: [RelayEffect] = []
        for index in handOvers.indices {
            var actions = handOvers[index].advance(observe(handOvers[index]), now: now.monotonic)
            while !actions.isEmpty {
                let action = actions.removeFirst()
                let plan = handOvers[index]
                switch action {
                case .cancelSends:
                    // The stop's partitions were not leaving until now: nothing new starts for them from here.
                    if plan.purpose == .stop { effects += revoking(plan.partitions, now: now) }
                    effects.append(.cancelSends(plan.partitions))
                case .storeMarkers:
                    // From what Kafka acknowledged: every result published by now is in the markers. None
                    // while the lease has lapsed: the partitions may be another member's already.
                    let markers = !mayAct(now: now) ? [] : plan.partitions.compactMap { partition in
                        read(partition, Self.progress(of:)).flatMap { $0 }.map { (partition, $0) }
                    }
                    for (partition, marker) in markers {
                        modify(partition) { $0.progressWritten = marker }
                        effects.append(.writeProgress(marker, partition: partition.partition, at: now.epoch, handOver: plan.id))
                    }
                    handOvers[index].markersWritten(markers.count)
                    actions += handOvers[index].advance(observe(handOvers[index]), now: now.monotonic)
                case .commit:
                    var offsets: [TopicPartition: Int64] = [:]
                    for partition in plan.partitions {
                        if let committable = read(partition, { $0.offsets.committable }) ?? nil { offsets[partition] = committable }
                    }
                    let request = newCommitRequest(now: now)
                    handOvers[index].commitRequested(request)
                    if offsets.isEmpty {
                        commitsRequested[request] = nil
                        actions += handOvers[index].commitAnswered(request)
                    } else {
                        effects.append(.commit(offsets, request: request))
                    }
                case .finish:
                    finish(handOvers[index])
                }
            }
        }
        for plan in handOvers where plan.isDone && plan.purpose == .stop { stopHandedOver = plan.isComplete }
        // A revoke is acknowledged once every hand-over of its partitions is done.
        let done = Set(handOvers.filter(\.isDone).map(\.id))
        if !done.isEmpty {
            for (revoke, plans) in revokesWaiting.sorted(by: { $0.key < $1.key }) {
                let left = plans.subtracting(done)
                revokesWaiting[revoke] = left.isEmpty ? nil : left
                if left.isEmpty { effects.append(.acknowledgeRevoke(revoke)) }
            }
        }
        handOvers.removeAll(where: \.isDone)
        if case .stopping = lifecycle, handOvers.isEmpty {
            lifecycle = .stopped
            effects.append(.stopped(handedOver: stopHandedOver))
        }
        return effects + backpressure()
    }

    /// What a hand-over waits for: for a revoke, its partitions' sends and publishes; for the
    /// stop, until its drain ends, every record consumed.
    private func observe(_ plan: HandOverPlan) -> HandOverPlan.Observation {
        var observation = HandOverPlan.Observation(inFlight: false, publishing: false)
        for partition in plan.partitions {
            guard let (notifications, publishing, pending, revoking) = read(partition, { ($0.notifications, $0.publishing, $0.pending, $0.revoking) }) else { continue }
            observation.inFlight = observation.inFlight || notifications > 0 || (!revoking && pending > 0)
            observation.publishing = observation.publishing || publishing > 0
        }
        return observation
    }

    /// The last step of a hand-over: a revoke's partitions are given up (their state dropped).
    private mutating func finish(_ plan: HandOverPlan) {
        if plan.purpose == .revoke { drop(plan.partitions) }
    }

    /// Forgets these partitions: nothing of theirs is tracked, sent, written or committed any more.
    private mutating func drop(_ leaving: [TopicPartition]) {
        for partition in leaving {
            guard var state = partitions.removeValue(forKey: partition) else { continue }
            pendingTotal -= state.pending
            state.badges.revoke()
        }
    }

    /// A record of the events topic.
    package mutating func consumed(_ message: KafkaMessage, now: RelayTime) -> [RelayEffect] {
        // While stopping, fetched records are left for the next owner (not tracked, not committed).
        guard isRunning else { return [] }
        let registryLoaded = isDeviceRegistryLoaded
        let tracked = modify(message.topicPartition) { state -> Bool in
            // One placeholder result stands for "being processed" until the fan-out is known.
            state.offsets.track(message.offset, expectedResults: 1)
            state.pending += 1
            guard state.badges.phase == .restoring || state.revoking || !registryLoaded else { return false }
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
    package mutating func changelogged(_ token: UInt64, now: RelayTime) -> [RelayEffect] {
        publishStreaks[PublishDestination.changelog.rawValue] = nil
        guard let (event, badge, late) = awaitingChangelog.removeValue(forKey: token) else { return [] }
        // A partition being handed over sends nothing new: the next owner finds the change in the
        // changelog and sends it (once). The flag alone is read: a copy of the partition's state bound
        // here would live through the fan-out and make its offset-table update copy the whole table.
        guard isRevoking(event.record.partition) == false else { return [] }
        return fanOut(event, badge: event.event.badge == nil ? nil : badge, late: late, now: now) + backpressure()
    }

    /// APNs answered a dispatched notification.
    package mutating func sent(_ dispatch: DeviceDispatch<PendingNotification>, outcome: SendOutcome, now: RelayTime) -> [RelayEffect] {
        let notification = dispatch.notification.payload
        var effects: [RelayEffect] = []
        sendsOutstanding -= 1
        if outcome.isAbandoned, isRunning, isRevoking(notification.record.partition) == false {
            // Refused once the lease lapsed (or cancelled for it): still this relay's to send, in
            // its place (the device's slot stays taken), once the lease is confirmed.
            readyToSend.prepend(dispatch)
            return releaseReadySends(now: now)
        }
        notificationsInFlight -= 1
        let owned = modify(notification.record.partition) { $0.notifications = max(0, $0.notifications - 1) } != nil
        // An abandoned send has no result: its record stays unfinished, for the partition's next owner.
        if owned && !outcome.isAbandoned {
            counters.notificationsByStatus[outcome.status, default: 0] += 1
            effects.append(publish(result(for: notification, status: outcome.status, outcome: outcome, now: now), for: notification.record))
            if outcome.isDeliveredInOtherEnvironment { effects.append(.publishWrongEnvironment(wrongEnvironmentRecord(for: notification, outcome: outcome, now: now))) }
        }
        // A broadcast's channel is no device token: it is never reported dead.
        if let since = outcome.tokenDeadSince, notification.notification.token != nil {
            let token = notification.token
            let registration = registry.reportDead(token: token, since: since)
            let record = registration.map { FailedTokenRecord(registration: $0, reason: outcome.reason ?? "Unregistered", since: since, eventID: notification.eventID) }
                ?? FailedTokenRecord(token: token, user: notification.user, topic: notification.notification.topic, environment: notification.environment,
                                     reason: outcome.reason ?? "Unregistered", since: since, eventID: notification.eventID)
            effects.append(.publishFailedToken(record))
        }
        let step = dispatcher.complete(dispatch.ticket, outcome: .finished)
        effects += dispatchEffects(step, now: now)
        effects += releaseReadySends(now: now)
        effects += advanceHandOvers(now: now)
        return effects
    }

    /// A result or dead letter of `record` was published; `device` is the result's token, if any.
    package mutating func published(_ record: RecordReference, device: String? = nil, now: RelayTime) -> [RelayEffect] {
        publishStreaks[PublishDestination.records.rawValue] = nil
        let finished = modify(record.partition) { state -> Bool in
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
        if finished == true { pendingTotal -= 1 }
        return backpressure() + advanceHandOvers(now: now)
    }

    /// A failed-token record or a progress marker was stored.
    package mutating func publishSucceeded(_ destination: PublishDestination) {
        publishStreaks[destination.rawValue] = nil
    }

    /// A progress marker was stored; `handOver` names the hand-over that wrote it, if any.
    package mutating func progressStored(handOver: UInt64?, now: RelayTime) -> [RelayEffect] {
        publishStreaks[PublishDestination.progress.rawValue] = nil
        guard let handOver, let index = handOvers.firstIndex(where: { $0.id == handOver }) else { return [] }
        handOvers[index].markerSettled(stored: true)
        return advanceHandOvers(now: now)
    }

    /// Publishing `effect` failed (after librdkafka's own retries). A dead letter too large to
    /// publish becomes a reference to its input; a changelog append is retried with the user's
    /// current state (never an older one over a newer); anything else is published again after a
    /// jittered backoff. When a destination keeps failing past the failure bound the relay gives
    /// up (exit 1). Nothing is published again for a partition that is leaving or gone.
    package mutating func publishFailed(_ effect: RelayEffect, failure: PublishFailure, now: RelayTime) -> [RelayEffect] {
        guard !isFailed else { return [] }
        if case .fatal(let error) = failure {
            // librdkafka fails everything a fatally failed producer is given: retrying only floods.
            // Crash-only: a restart makes new producers, and the next owner redoes what is unfinished.
            return fail("a Kafka producer failed for good: \(error)")
        }
        let destination: PublishDestination
        switch effect {
        case .publishDeadLetter(let message, let error) where failure == .tooLarge:
            let reference = RecordReference(message.topicPartition, message.offset)
            guard stillPublishing(in: reference.partition) else { return [] }
            return [.publishDeadLetterReference(DeadLetterReference(source: reference, key: message.key.map(Array.init), size: message.value?.count ?? 0, error: error))]
        case .publishResult, .publishDeadLetter, .publishDeadLetterReference:
            guard stillPublishing(in: effect.recordPartition!) else { return [] }
            destination = .records
        case .appendChangelog(_, _, _, let token):
            guard let waiting = awaitingChangelog[token], isRevoking(waiting.event.record.partition) == false else {
                awaitingChangelog[token] = nil
                return []
            }
            destination = .changelog
        case .publishFailedToken:
            destination = .failedTokens
        case .publishWrongEnvironment:
            destination = .wrongEnvironment
        case .writeProgress(_, _, _, let handOver):
            // A periodic one: the next marker (a second later) covers it; until then a new owner would
            // resend more. A hand-over's: it no longer holds the hand-over, which goes on to the commit.
            guard let handOver, let index = handOvers.firstIndex(where: { $0.id == handOver }) else { return [] }
            handOvers[index].markerSettled(stored: false)
            return advanceHandOvers(now: now)
        default:
            return []
        }
        counters.publishFailures += 1
        var streak = publishStreaks[destination.rawValue] ?? FailureStreak(since: now.monotonic, failures: 0)
        streak.failures += 1
        publishStreaks[destination.rawValue] = streak
        if now.monotonic - streak.since >= configuration.failureTimeoutMilliseconds {
            return fail("publishing \(destination) failed for \((now.monotonic - streak.since) / 1_000) s: \(failure)")
        }
        schedule(effect, afterFailures: streak.failures, now: now)
        return []
    }

    /// Whether a result or dead letter of a record of `partition` may still be published (the
    /// partition is ours and not leaving); when not, it no longer counts as publishing.
    private mutating func stillPublishing(in partition: TopicPartition) -> Bool {
        guard let revoking = isRevoking(partition) else { return false }
        guard !revoking else {
            modify(partition) { $0.publishing = max(0, $0.publishing - 1) }
            return false
        }
        return true
    }

    /// Queues `effect` for a retry after a jittered, doubling delay.
    private mutating func schedule(_ effect: RelayEffect, afterFailures failures: Int, now: RelayTime) {
        let exponent = min(failures - 1, 20)
        let delay = min(configuration.retryCapMilliseconds, configuration.retryBaseMilliseconds << exponent)
        let jittered = delay / 2 + Int64.random(in: 0...max(0, delay / 2), using: &jitter)
        retries.append(Retry(due: now.monotonic + jittered, effect: effect))
    }

    /// The retries due at `now`, checked again against what changed meanwhile.
    private mutating func dueRetries(now: RelayTime) -> [RelayEffect] {
        guard !retries.isEmpty else { return [] }
        var effects: [RelayEffect] = []
        var later: [Retry] = []
        for retry in retries {
            guard retry.due <= now.monotonic else {
                later.append(retry)
                continue
            }
            switch retry.effect {
            case .restore(let partition, let generation):
                guard let state = partitions[partition], state.generation == generation, state.badges.phase == .restoring else { continue }
                effects.append(retry.effect)
            case .appendChangelog(let user, _, let partition, let token):
                // The user's state now, which includes this event and any applied since: storing
                // it can only move the changelog forward. The event is sent with that count.
                guard var waiting = awaitingChangelog[token],
                      let state = partitions[waiting.event.record.partition], !state.revoking,
                      let current = state.badges.sequencer.ledger[user] else {
                    awaitingChangelog[token] = nil
                    continue
                }
                waiting.badge = current.badge
                awaitingChangelog[token] = waiting
                effects += emitAppend(.appendChangelog(user: user, record: changelogRecord(of: user, state: current, in: waiting.event.record.partition, now: now),
                                                       partition: partition, token: token), now: now)
            case .publishResult, .publishDeadLetter, .publishDeadLetterReference:
                // Leaving partitions dropped theirs at the revoke; gone ones have nothing to finish.
                if let partition = retry.effect.recordPartition, partitions.index(forKey: partition) != nil { effects.append(retry.effect) }
            default:
                effects.append(retry.effect)
            }
        }
        retries = later
        return effects
    }

    /// Stops everything: the driver reports unhealthy and exits 1.
    private mutating func fail(_ reason: String) -> [RelayEffect] {
        lifecycle = .failed(reason)
        return [.exit(code: 1, reason: reason)]
    }

    private var isRunning: Bool { lifecycle == .running }
    private var isStopping: Bool { if case .stopping = lifecycle { true } else { false } }
    private var isFailed: Bool { if case .failed = lifecycle { true } else { false } }

    /// Time passes: releases gaps whose reorder window ran out (on the monotonic clock).
    /// Time passes: releases gaps whose reorder window ran out (on the monotonic clock), runs
    /// retries that are due, commits every `commitIntervalMilliseconds` (one commit at a time:
    /// while the coordinator is slow they would only queue behind each other), and hands over
    /// revokes and a stop whose deadline passed.
    package mutating func tick(now: RelayTime) -> [RelayEffect] {
        guard !isFailed, lifecycle != .stopped else { return [] }
        var effects: [RelayEffect] = []
        for partition in partitions.keys.sorted() where isRevoking(partition) == false {
            let outcomes = modify(partition) { $0.badges.tick(now: now.monotonic) } ?? []
            effects += handle(outcomes, now: now)
        }
        effects += dueRetries(now: now)
        // A commit the coordinator never answered does not hold the next one back forever.
        if let pending = commitInFlight, now.monotonic - pending.at >= Self.commitAnswerTimeoutMilliseconds {
            commitInFlight = nil
            commitsRequested[pending.request] = nil
        }
        if commitInFlight == nil && (now.monotonic >= nextCommitAt || needsLeaseConfirmation(now: now)) {
            nextCommitAt = now.monotonic + configuration.commitIntervalMilliseconds
            effects += commitDue(now: now)
        }
        effects += checkLease(now: now)
        effects += advanceHandOvers(now: now)
        return effects
    }

    /// How long a commit may go unanswered before the next one is sent anyway.
    static let commitAnswerTimeoutMilliseconds: Int64 = 10_000

    /// The progress markers and offsets to store now: the markers that moved, and every finished
    /// offset (an unchanged one too: each commit the coordinator accepts confirms the ownership
    /// lease). The offset stays put while an early record waits for a seq gap; the marker still
    /// moves past the records finished after it. Nothing is written while the lease has lapsed.
    package mutating func commitDue(now: RelayTime) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        var offsets: [TopicPartition: Int64] = [:]
        let writes = mayAct(now: now)
        for partition in partitions.keys.sorted() where isRevoking(partition) == false {
            modify(partition) { state in
                if writes, let marker = Self.progress(of: state), marker != state.progressWritten {
                    state.progressWritten = marker
                    effects.append(.writeProgress(marker, partition: partition.partition, at: now.epoch, handOver: nil))
                }
                if let committable = state.offsets.committable { offsets[partition] = committable }
            }
        }
        if !offsets.isEmpty {
            let request = newCommitRequest(now: now)
            commitInFlight = (request, now.monotonic)
            effects.append(.commit(offsets, request: request))
        }
        return effects
    }

    private mutating func newCommitRequest(now: RelayTime) -> UInt64 {
        nextCommitRequest += 1
        commitsRequested[nextCommitRequest] = now.monotonic
        return nextCommitRequest
    }

    /// Commit request `request` was answered: `offsets` when it succeeded, `nil` when it failed
    /// (a coordinator mid-rebalance, or this member no longer in the group). A success confirms
    /// the ownership lease as of when the request was made.
    package mutating func committed(request: UInt64, offsets: [TopicPartition: Int64]?, now: RelayTime) -> [RelayEffect] {
        if commitInFlight?.request == request { commitInFlight = nil }
        let requestedAt = commitsRequested.removeValue(forKey: request)
        var effects: [RelayEffect] = []
        if let offsets {
            for (partition, offset) in offsets { modify(partition) { $0.lastCommitted = offset } }
            if let requestedAt, lease != nil {
                lease?.confirm(at: requestedAt)
                effects += leaseConfirmed(now: now)
            }
        }
        for index in handOvers.indices {
            for action in handOvers[index].commitAnswered(request) where action == .finish {
                finish(handOvers[index])
            }
        }
        return effects + advanceHandOvers(now: now)
    }

    /// The partition's progress as its next owner should read it: what this owner finished, and
    /// what the previous owner had finished beyond what this one has read so far.
    package func progress(of partition: TopicPartition) -> ProgressMarker? {
        partitions[partition].flatMap(Self.progress(of:))
    }

    private static func progress(of state: PartitionState) -> ProgressMarker? {
        var through = state.lastConsumed ?? -1
        var open = state.offsets.pendingRuns()
        var devicesDone = state.devicesDone
        // What the previous owner finished beyond what this one has read still holds.
        if let previous = state.badges.previousProgress, previous.through > through {
            for run in previous.open where run.upperBound > through {
                open.append(max(run.lowerBound, through + 1)...run.upperBound)
            }
            for (offset, devices) in previous.devicesDone where offset > through { devicesDone[offset] = devices }
            through = previous.through
        }
        return through >= 0 ? ProgressMarker(through: through, runs: open, devicesDone: devicesDone) : nil
    }

    /// The previous owner's progress, as restored.
    package func previousProgress(of partition: TopicPartition) -> ProgressMarker? { partitions[partition]?.badges.previousProgress }

    /// A `push.devices` record.
    package mutating func deviceRecord(key: ArraySlice<UInt8>?, value: ArraySlice<UInt8>?) -> EventRejection? {
        guard let key else { return EventRejection(field: "key", reason: "key is missing (the device token)") }
        return registry.apply(key: String(decoding: key, as: UTF8.self), value: value)
    }

    /// The legacy feedback service reported tokens dead: each registration made before its `since` is removed
    /// (later events no longer target it) and a failed-token record with `reason` is published.
    package mutating func tokensReportedDead(_ reports: [DeadTokenReport], reason: String) -> [RelayEffect] {
        reports.map { report in
            let token = report.token.lowercased()
            let record = registry.reportDead(token: token, since: report.since)
                .map { FailedTokenRecord(registration: $0, reason: reason, since: report.since, eventID: nil) }
                ?? FailedTokenRecord(token: token, user: nil, topic: nil, environment: nil, reason: reason, since: report.since, eventID: nil)
            return .publishFailedToken(record)
        }
    }

    /// The earliest monotonic time `tick` has something to release.
    package var nextDeadline: Int64? {
        partitions.values.compactMap { $0.badges.sequencer.nextDeadline }.min()
    }

    /// Every assigned partition finished restoring.
    package var isRestored: Bool { partitions.values.allSatisfy { $0.badges.phase == .ready } }

    /// Records consumed and not finished, over all partitions.
    package var pendingRecordCount: Int { pendingTotal }

    // MARK: Steps

    /// One record of a restored partition: skipped when the previous owner finished it, else
    /// decoded and sequenced.
    private mutating func process(_ message: KafkaMessage, now: RelayTime) -> [RelayEffect] {
        let reference = RecordReference(message.topicPartition, message.offset)
        let finishedBefore = modify(reference.partition) { state -> Bool in
            state.lastConsumed = max(state.lastConsumed ?? message.offset, message.offset)
            guard let previous = state.badges.previousProgress else { return false }
            guard previous.isFinished(message.offset) else {
                // Open for the previous owner: the devices it finished are not sent or published again.
                let done = previous.devicesDone(at: message.offset)
                if !done.isEmpty { state.devicesDone[message.offset] = done }
                return false
            }
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
            return deadLetter(message, reason: error.reason, now: now)
        }
        if case .tokens(let tokens) = event.targets, tokens.count > configuration.maxTokensPerEvent {
            return deadLetter(message, reason: "tokens: \(tokens.count) tokens, more than relay.max_tokens_per_event (\(configuration.maxTokensPerEvent))", now: now)
        }
        let inFlight = EventInFlight(record: reference, event: event, consumedAt: now.epoch)
        guard let update = event.ledgerUpdate(tag: inFlight, position: message.offset) else {
            return fanOut(inFlight, badge: nil, late: false, now: now)
        }
        // Through `modify`: the subscript's `!` yields the whole optional state from a coroutine whose frame is
        // malloc'ed (the state is too large for its inline buffer) and copied out and back, once per record.
        guard case .processed(let outcomes)? = modify(reference.partition, { $0.badges.offer(update, now: now.monotonic) }) else { return [] }
        return handle(outcomes, now: now)
    }

    /// Bad input: a dead letter and an `invalid` result. The reason is bounded (an error that
    /// echoes a huge value would make both records too large to publish).
    private mutating func deadLetter(_ message: KafkaMessage, reason: String, now: RelayTime) -> [RelayEffect] {
        let reference = RecordReference(message.topicPartition, message.offset)
        let reason = reason.bounded(toUTF8Bytes: 1_024)
        counters.eventsInvalid += 1
        counters.deadLetters += 1
        expect(reference, results: 2)
        let id = message.key.map { String(decoding: $0, as: UTF8.self).bounded(toUTF8Bytes: 1_024) } ?? "offset-\(message.offset)"
        modify(reference.partition) { $0.publishing += 1 }
        return [
            .publishDeadLetter(message, error: reason),
            publish(.forEvent(id: id, user: nil, seq: nil, badge: nil, status: .invalid, reason: reason, at: now.epoch), for: reference),
        ]
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
                effects += emitAppend(appendChangelog(update, state: state, late: false, now: now), now: now)
            case .applied(let update, let state, let skipped):
                counters.eventsApplied += 1
                if skipped > 0 { counters.seqGapsSkipped += 1 }
                effects += emitAppend(appendChangelog(update, state: state, late: false, now: now), now: now)
            case .appliedLate(let update, let state):
                counters.eventsApplied += 1
                counters.eventsLate += 1
                effects += emitAppend(appendChangelog(update, state: state, late: true, now: now), now: now)
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
        return .appendChangelog(user: update.user, record: changelogRecord(of: update.user, state: state, in: partition, now: now),
                                partition: partition.partition, token: token)
    }

    /// The badge-state record of `user` at `state`. The ledger holds the user's skipped seqs after
    /// the whole step; the record carries those below its own seq, the ones remembered when it was
    /// applied (a tick that skips two gaps writes the first application before the second skip).
    private func changelogRecord(of user: String, state: UserBadgeState, in partition: TopicPartition, now: RelayTime) -> BadgeStateRecord {
        let skipped = read(partition, { $0.badges.sequencer.ledger.skippedSeqs(of: user) })?.filter { $0.upper < state.lastSeq }.map {
            SkippedSeqs(lower: $0.lower, upper: $0.upper, skippedAt: now.epoch(ofMonotonic: $0.skippedAt))
        } ?? []
        return BadgeStateRecord(state: state, skipped: skipped, updatedAt: now.epoch)
    }

    private mutating func fanOut(_ inFlight: EventInFlight, badge: Int64?, late: Bool, now: RelayTime) -> [RelayEffect] {
        let event = inFlight.event
        // Each token with its registration, if any: the registry is asked once per device (a user's
        // devices come with their registrations; given tokens are looked up).
        var devices: [(token: String, registration: DeviceRegistration?)] = []
        switch event.targets {
        case .tokens(let given):
            devices = given.map { ($0, registry.registration(for: $0)) }
        case .registeredDevices(let user):
            devices = registry.devices(of: user).map { ($0.token, $0) }
        case .channel(let channel):
            return broadcast(inFlight, to: channel, now: now)
        }
        guard !devices.isEmpty else {
            expect(inFlight.record, results: 1)
            var record = ResultRecord.forEvent(id: event.id, user: event.user, seq: event.seq, badge: badge, status: .noDevices,
                                               reason: "no registered devices", at: now.epoch)
            record.late = late
            return [publish(record, for: inFlight.record)]
        }
        // Devices the previous owner delivered to (or answered for) before it handed the record over.
        if let done = read(inFlight.record.partition, { $0.devicesDone[inFlight.record.offset] ?? [] }), !done.isEmpty {
            let finished = Set(done)
            devices.removeAll { finished.contains(DeviceDigest(token: $0.token)) }
        }
        expect(inFlight.record, results: devices.count)
        var effects: [RelayEffect] = []
        // The payload depends on the event and the user's badge only: rendered once, its bytes shared by the devices.
        let payload = Result { () throws(EventRejection) in try event.renderPayload(badge: badge, transport: configuration.transport) }
        for (token, registration) in devices {
            let notification: APNsNotification
            do {
                notification = try event.render(for: token, payload: payload, defaultTopic: registration?.topic ?? configuration.defaultTopic)
            } catch {
                effects.append(invalidResult(of: inFlight, token: token, badge: badge, late: late, reason: error.reason, now: now))
                continue
            }
            // The registration wins over the event's apns.environment: a token belongs to one environment.
            let environment = registration?.environment ?? event.apns?.environment ?? configuration.defaultEnvironment
            let pending = PendingNotification(record: inFlight.record, eventID: event.id, user: event.user, seq: event.seq, badge: badge,
                                              token: token, notification: notification, environment: environment,
                                              consumedAt: inFlight.consumedAt, late: late)
            effects += dispatch(pending, isBadgeOnly: event.isBadgeOnly, now: now)
        }
        return effects
    }

    /// A broadcast: one notification to the channel, one result whose `token` is the channel id. It goes through
    /// the dispatcher keyed by the channel id, so a channel has one broadcast in flight at a time, in event order.
    /// (Channel ids are base64 of 16 bytes, 24 characters: never one of the 64-200 character device tokens.)
    private mutating func broadcast(_ inFlight: EventInFlight, to channel: APNsChannelID, now: RelayTime) -> [RelayEffect] {
        let event = inFlight.event
        expect(inFlight.record, results: 1)
        let notification: APNsNotification
        do {
            notification = try event.renderBroadcast(to: channel, defaultTopic: configuration.defaultTopic)
        } catch {
            return [invalidResult(of: inFlight, token: channel.value, badge: nil, late: false, reason: error.reason, now: now)]
        }
        let pending = PendingNotification(record: inFlight.record, eventID: event.id, user: nil, seq: event.seq, badge: nil,
                                          token: channel.value, notification: notification,
                                          environment: event.apns?.environment ?? configuration.defaultEnvironment,
                                          consumedAt: inFlight.consumedAt)
        return dispatch(pending, isBadgeOnly: false, now: now)
    }

    /// Hands a notification to the dispatcher (one in flight per token or channel).
    private mutating func dispatch(_ pending: PendingNotification, isBadgeOnly: Bool, now: RelayTime) -> [RelayEffect] {
        notificationsInFlight += 1
        modify(pending.record.partition) { $0.notifications += 1 }
        let step = dispatcher.enqueue(DeviceNotification(token: pending.token, eventID: pending.eventID, badge: pending.badge,
                                                         isBadgeOnly: isBadgeOnly, payload: pending))
        return dispatchEffects(step, now: now)
    }

    /// The `invalid` result of a notification that breaks a rule of Apple's: nothing is sent.
    private mutating func invalidResult(of inFlight: EventInFlight, token: String, badge: Int64?, late: Bool, reason: String, now: RelayTime) -> RelayEffect {
        let event = inFlight.event
        return publish(ResultRecord(
            eventID: event.id, user: event.user, token: token, seq: event.seq, badge: badge, status: .invalid, apnsID: nil,
            httpStatus: nil, reason: reason, attempts: 0, latencyMs: nil, at: now.epoch, late: late), for: inFlight.record)
    }

    private mutating func dispatchEffects(_ step: DispatchStep<PendingNotification>, now: RelayTime) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        for dispatch in step.send {
            // Never more sends outstanding than the sender's queue holds (`maxInFlight`), and none
            // while the ownership lease has lapsed: the rest wait here, in release order (one per
            // device, so per-device order holds).
            if sendsOutstanding < configuration.maxInFlight && readyToSend.isEmpty && mayAct(now: now) {
                sendsOutstanding += 1
                effects.append(.send(dispatch))
            } else {
                readyToSend.append(dispatch)
            }
        }
        notificationsInFlight -= step.superseded.count
        for notification in step.superseded {
            let pending = notification.payload
            counters.notificationsByStatus[.superseded, default: 0] += 1
            modify(pending.record.partition) { $0.notifications -= 1 }
            effects.append(publish(result(for: pending, status: .superseded, outcome: nil, now: now), for: pending.record))
        }
        return effects
    }

    /// Hands waiting sends to the driver while the window has room and the lease holds.
    private mutating func releaseReadySends(now: RelayTime) -> [RelayEffect] {
        guard mayAct(now: now) else { return [] }
        var effects: [RelayEffect] = []
        while sendsOutstanding < configuration.maxInFlight, let next = readyToSend.popFirst() {
            effects.append(.send(next))
            sendsOutstanding += 1
        }
        return effects
    }

    private func result(for notification: PendingNotification, status: DeliveryStatus, outcome: SendOutcome?, now: RelayTime) -> ResultRecord {
        let ownReason = status == .superseded ? "replaced by a newer badge update" : (notification.late ? "late" : nil)
        return ResultRecord(
            eventID: notification.eventID, user: notification.user, token: notification.token, seq: notification.seq,
            badge: notification.badge, status: status, apnsID: outcome == nil ? nil : notification.apnsID,
            httpStatus: outcome?.httpStatus, reason: outcome?.reason ?? ownReason,
            attempts: outcome?.attempts ?? 0, latencyMs: outcome == nil ? nil : max(0, now.epoch &- notification.consumedAt), at: now.epoch,
            late: notification.late, environment: outcome?.environment, apnsUniqueID: outcome?.apnsUniqueID)
    }

    /// Who should hear that `notification`'s token was delivered in the other environment: its registration's owner
    /// (the registration named the wrong environment), else the event's producer.
    private func wrongEnvironmentRecord(for notification: PendingNotification, outcome: SendOutcome, now: RelayTime) -> WrongEnvironmentRecord {
        let registration = registry.registration(for: notification.token)
        return WrongEnvironmentRecord(
            token: notification.token, user: registration?.user ?? notification.user, topic: registration?.topic ?? notification.notification.topic,
            environment: outcome.environment ?? notification.environment, wrongEnvironment: notification.environment,
            source: registration?.environment == notification.environment ? .registration : .event, eventID: notification.eventID, at: now.epoch)
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

    /// The address of `partition`'s offset table (``OffsetTracker/entriesAddress``), for tests of in-place updates.
    package func offsetTableAddress(of partition: TopicPartition) -> UnsafeRawPointer? {
        partitions[partition]?.offsets.entriesAddress
    }

    /// Mutates a partition's state in place (a copy out and back would copy its offset table and
    /// sets on every record); `nil` when the partition is not assigned.
    @discardableResult
    private mutating func modify<Result>(_ partition: TopicPartition, _ body: (inout PartitionState) -> Result) -> Result? {
        // One lookup, and no copy: `partitions[partition] != nil` alone copied the whole state (retaining each of
        // its tables) to compare it with nil, several times per record.
        guard let index = partitions.index(forKey: partition) else { return nil }
        return body(&partitions.values[index])
    }

    /// Whether `partition` is being handed over; `nil` when it is not assigned. Reads the flag in place: binding
    /// the state (`if let state = partitions[partition]`) copies it, and a copy alive while the state is updated
    /// makes the update copy its tables.
    private func isRevoking(_ partition: TopicPartition) -> Bool? {
        read(partition) { $0.revoking }
    }

    /// Reads `partition`'s state in place (no copy of it); `nil` when it is not assigned.
    private func read<Result>(_ partition: TopicPartition, _ body: (PartitionState) -> Result) -> Result? {
        partitions.index(forKey: partition).map { body(partitions.values[$0]) }
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
