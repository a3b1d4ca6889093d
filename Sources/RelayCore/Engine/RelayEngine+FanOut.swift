// The engine's path of an event: decode, sequence, changelog, fan-out to devices (SendWindow).

import APNsCore
import KafkaCore

extension RelayEngine {
    /// One record of a restored partition: skipped when the previous owner finished it, else
    /// decoded and sequenced.
    mutating func process(_ message: KafkaMessage, now: RelayTime, into effects: inout [RelayEffect]) {
        let partition = message.topicPartition
        let processing = modify(partition) { state -> (generation: UInt64, finishedBefore: Bool) in
            state.lastConsumed = max(state.lastConsumed ?? message.offset, message.offset)
            guard let previous = state.badges.previousProgress else { return (state.generation, false) }
            guard previous.isFinished(message.offset) else {
                // Open for the previous owner: the devices it finished are not sent or published again.
                let done = previous.devicesDone(at: message.offset)
                if !done.isEmpty { state.devicesDone[message.offset] = done }
                return (state.generation, false)
            }
            state.offsets.markDone(message.offset)
            state.pending -= 1
            return (state.generation, true)
        }
        guard let processing else { return }
        guard !processing.finishedBefore else {
            pendingTotal -= 1
            counters.recordsAlreadyFinished += 1
            return
        }
        let reference = RecordReference(partition, message.offset, generation: processing.generation)

        var event: PushEvent
        do {
            event = try decoder.decode(message.value ?? [])
        } catch {
            effects += deadLetter(message, reference, reason: error.reason, now: now)
            return
        }
        if !message.headers.isEmpty { event.trace = TraceHeaders(of: message.headers) }
        if case .tokens(let tokens) = event.targets, tokens.count > configuration.maxTokensPerEvent {
            effects += deadLetter(message, reference, reason: "tokens: \(tokens.count) tokens, more than relay.max_tokens_per_event (\(configuration.maxTokensPerEvent))", now: now)
            return
        }
        if mustSetAside(event, readAt: partition) {
            // Its own bytes only: a record set aside outlives the others of its read, whose shared chunk it would keep
            // alive (64 KiB for a few hundred bytes), so `relay.read_ahead_bytes` would bound nothing.
            let kept = message.detached()
            let bytes = Self.heldBytes(of: event, devices: event.tokens?.count ?? 1) + kept.retainedBytes
                + kept.headers.reduce(0) { $0 + $1.key.utf8.count + ($1.value?.count ?? 0) }
            parked.park(ParkedRecord(message: kept, event: event, reference: reference), user: event.user, bytes: bytes)
            return
        }
        // A user's records start in the order they were read: its records set aside go first.
        if !parked.isEmpty, let user = event.user, parked.hasRecords(of: user) {
            for record in parked.takeAll(of: user) { start(record.message, event: record.event, reference: record.reference, now: now, into: &effects) }
        }
        start(message, event: event, reference: reference, now: now, into: &effects)
    }

    /// A bulk record read while bulk has as many records in process as it may (not counting those the sequencer holds),
    /// or behind others set aside, is set aside, decoded: an urgent record read behind it starts at once. Never one
    /// whose user has later seqs held by the sequencer of its home here: it may be the seq they wait for, and set
    /// aside behind a flood it would reach the sequencer after its gap's reorder window ran out (skipped, then applied
    /// late: a `set` lost).
    mutating func mustSetAside(_ event: PushEvent, readAt partition: TopicPartition) -> Bool {
        guard event.deliveryClass == .bulk else { return false }
        if let user = event.user {
            let home = configuration.layout.map { TopicPartition(partition.topic, $0.home(of: user)) } ?? partition
            if read(home, { $0.badges.sequencer.isHolding(user) }) == true { return false }
        }
        guard parked.isEmpty else { return true }
        // The count without the sequencer's first: it reads every partition.
        return bulkInProcess >= fanOuts.limits.bulkWindow && bulkInProcessNotHeld() >= fanOuts.limits.bulkWindow
    }

    /// Bulk records in process less every record the sequencer holds for an earlier seq (urgent or bulk: it does not
    /// tell them apart, so this errs toward starting): a held record may wait for one set aside, so held ones never
    /// keep those from starting.
    mutating func bulkInProcessNotHeld() -> Int {
        var held = 0
        for partition in partitions.keys { held += read(partition) { $0.badges.sequencer.heldUpdateCount } ?? 0 }
        return max(0, bulkInProcess - held)
    }

    /// A bulk record started: counted in bulk's share until it finishes (``bulkFinished(_:)``).
    mutating func bulkStarted(_ record: RecordReference) {
        if modify(record, { $0.bulkStarted.insert(record.offset).inserted }) == true { bulkInProcess += 1 }
    }

    /// A record finished: out of bulk's share if it was a bulk one.
    mutating func bulkFinished(_ record: RecordReference) {
        if modify(record, { $0.bulkStarted.remove(record.offset) != nil }) == true { bulkInProcess -= 1 }
    }

    /// Starts the records set aside, in the order read, while fewer bulk records are in process (not counting those
    /// the sequencer holds) than bulk may have (`relay.max_in_flight` less `relay.urgent_reserve`): urgent records in
    /// process never keep bulk set aside, and bulk alone never reaches the pause, so the partitions are read on past it
    /// and an urgent record behind it is found.
    mutating func startParked(now: RelayTime, into effects: inout [RelayEffect]) {
        guard !parked.isEmpty else { return }
        var room = fanOuts.limits.bulkWindow - bulkInProcessNotHeld()
        while room > 0, let record = parked.takeNext() {
            room -= 1
            guard isRunning, standing(of: record.reference) == .serving else { continue }
            start(record.message, event: record.event, reference: record.reference, now: now, into: &effects)
        }
    }

    /// A decoded record's way on: to its user's home partition, or into the sequencer and the changelog.
    mutating func start(_ message: KafkaMessage, event: PushEvent, reference: RecordReference, now: RelayTime, into effects: inout [RelayEffect]) {
        if event.deliveryClass == .bulk { bulkStarted(reference) }
        let partition = reference.partition
        // A user's events are counted at the user's home partition only: one read elsewhere goes there.
        var forwardedFrom: ForwardSource?
        if let layout = configuration.layout, let user = event.user {
            let home = layout.home(of: user)
            guard home == partition.partition else {
                if isCopyForwardedAgain(message, partition) {
                    counters.forwardsRepeated += 1
                    return finishWithoutResults(reference)
                }
                effects.append(forward(message, user: user, home: home, reference))
                return
            }
            forwardedFrom = Self.forwardSource(of: message)
        }
        let inFlight = EventInFlight(record: reference, event: event, consumedAt: now.epoch)
        guard let update = event.ledgerUpdate(tag: inFlight, position: message.offset, forwardedFrom: forwardedFrom) else {
            fanOut(inFlight, badge: nil, late: false, now: now, into: &effects)
            return
        }
        // Through `modify`: `partitions[partition]!.badges…` would get a copy of the whole state and set it back,
        // once per record.
        guard case .processed(let outcomes)? = modify(reference, { $0.badges.offer(update, now: now.monotonic) }) else { return }
        handle(outcomes, now: now, into: &effects)
    }

    mutating func handle(_ outcomes: [SequencerOutcome<EventInFlight>], now: RelayTime, into effects: inout [RelayEffect]) {
        for outcome in outcomes {
            switch outcome {
            case .duplicate(let update, let lastApplied):
                let event = update.tag
                counters.eventsDuplicate += 1
                expect(event.record, results: 1)
                effects.append(publish(
                    .forEvent(id: event.event.id, user: event.event.user, seq: event.event.seq, badge: nil, status: .duplicate,
                              reason: "seq \(event.event.seq ?? 0) <= last applied seq \(lastApplied)", at: now.epoch, trace: event.event.trace),
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
            case .repeatedForward(let update):
                counters.forwardsRepeated += 1
                finishWithoutResults(update.tag.record)
            }
        }
    }

    /// The changelog record of an applied update; the event is sent once it is stored.
    mutating func appendChangelog(_ update: BadgeUpdate<EventInFlight>, state: UserBadgeState, late: Bool, now: RelayTime) -> RelayEffect {
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
    mutating func changelogRecord(of user: String, state: UserBadgeState, in partition: TopicPartition, now: RelayTime) -> BadgeStateRecord {
        let (skippedSeqs, marks) = read(partition, { ($0.badges.sequencer.ledger.skippedSeqs(of: user), $0.badges.sequencer.ledger.forwardMarks(of: user)) })
            ?? ([], [])
        let skipped = skippedSeqs.filter { $0.upper < state.lastSeq }.map {
            SkippedSeqs(lower: $0.lower, upper: $0.upper, skippedAt: now.epoch(ofMonotonic: $0.skippedAt))
        }
        var appliedAt: [Int32: Int64] = [:]
        for mark in marks { if let at = mark.appliedAt { appliedAt[mark.partition] = at } }
        return BadgeStateRecord(state: state, skipped: skipped, forwarded: marks.map { ForwardSource(partition: $0.partition, offset: $0.offset) },
                                forwardedAt: appliedAt, updatedAt: now.epoch)
    }

    mutating func fanOut(_ inFlight: EventInFlight, badge: Int64?, late: Bool, now: RelayTime, into effects: inout [RelayEffect]) {
        let event = inFlight.event
        // Each token with its registration, if any: the registry is asked once per device (a user's
        // devices come with their registrations; given tokens are looked up).
        var devices: [(token: String, registration: DeviceRegistration?)] = []
        switch event.targets {
        case .tokens(let given):
            devices = given.map { ($0, registry.registration(for: $0)) }
        case .registeredDevices(let user):
            devices = registry.devices(of: user).map { ($0.token, $0) }
        case .liveActivity(let target, let user):
            devices = registry.liveActivityTokens(of: target, user: user).map { ($0.token, $0) }
        case .channel(let channel):
            broadcast(inFlight, to: channel, now: now, into: &effects)
            return
        }
        guard !devices.isEmpty else {
            expect(inFlight.record, results: 1)
            let reason = switch event.liveActivity {
            case .pushToStart(let type)?: "no registered push-to-start tokens for \(type)"
            case .activity(let id)?: "no registered update tokens for activity \(id)"
            case nil: "no registered devices"
            }
            var record = ResultRecord.forEvent(id: event.id, user: event.user, seq: event.seq, badge: badge, status: .noDevices,
                                               reason: reason, at: now.epoch, trace: event.trace)
            record.late = late
            effects.append(publish(record, for: inFlight.record))
            return
        }
        // Devices the previous owner delivered to (or answered for) before it handed the record over.
        if let done = modify(inFlight.record, { $0.devicesDone[inFlight.record.offset] ?? [] }), !done.isEmpty {
            let finished = Set(done)
            devices.removeAll { finished.contains(DeviceDigest(token: $0.token)) }
            // It finished every device left (the registry lost the others since): the record is done, with no result of ours.
            guard !devices.isEmpty else { return finishWithoutResults(inFlight.record) }
        }
        expect(inFlight.record, results: devices.count)
        // The payload depends on the event and the user's badge only: rendered once, its bytes shared by the devices.
        let payload = Result { () throws(EventRejection) in try event.renderPayload(badge: badge, transport: configuration.transport) }
        var job = FanOut(inFlight: inFlight, badge: badge, late: late, devices: devices, payload: payload, deliveryClass: event.deliveryClass)
        let lane = fanOuts.lane(for: Self.fanOutLaneKey(of: event, in: inFlight.record))
        // Nothing waits: straight into the window, as far as its bounds allow.
        var capped = false
        if fanOuts.isEmpty {
            capped = continueFanOut(&job, lane: lane, as: job.deliveryClass, now: now, into: &effects)
            if job.isDone { return fanOuts.finished(lane: lane) }
        }
        // Behind the lane's waiting fan-outs: a later event of a user never passes an earlier one.
        fanOuts.enqueue(job, lane: lane, as: job.deliveryClass, bytes: Self.heldBytes(of: event, devices: devices.count))
        if capped { fanOuts.hold(lane) }
        resumeFanOuts(now: now, into: &effects)
    }

    /// Events of a user wait in the user's lane; events without one in their partition's.
    static func fanOutLaneKey(of event: PushEvent, in record: RecordReference) -> FanOutLaneKey {
        event.user.map(FanOutLaneKey.user) ?? .anonymous(partition: record.partition.partition)
    }

    /// Roughly what a waiting fan-out holds: its event (decoded, its payload rendered once) and its device list.
    static func heldBytes(of event: PushEvent, devices: Int) -> Int {
        1_024 + 2 * event.payloadTemplate.byteCount + 96 * devices
    }

    /// Renders and dispatches `job`'s devices into `lane`, counted as `deliveryClass`, while the fan-out scheduler's
    /// bounds allow (`relay.max_in_flight`, the urgent reserve, the user's share) and the send-rate cap of the device's
    /// app and push type (`relay.rate_limits`) has room. Returns `true` when it stopped for that cap.
    @discardableResult
    mutating func continueFanOut(_ job: inout FanOut, lane: FanOutScheduler<FanOut>.Lane, as deliveryClass: DeliveryClass,
                                 now: RelayTime, into effects: inout [RelayEffect]) -> Bool {
        let event = job.inFlight.event
        while !job.isDone && fanOuts.mayDispatch(lane: lane, as: deliveryClass) {
            let (token, registration) = job.devices[job.next]
            let defaultTopic = registration.map(Self.topic(of:)) ?? configuration.defaultTopic
            if !rateLimits.isEmpty, let topic = event.topic(defaultTopic: defaultTopic),
               !rateLimits.take(topic: topic, pushType: event.pushType, now: now.monotonic) {
                counters.rateLimitWaits[RateLimitKey(topic: topic, pushType: event.pushType), default: 0] += 1
                return true
            }
            job.next += 1
            let notification: APNsNotification
            do {
                if let sibling = job.sibling, sibling.topic == event.topic(defaultTopic: defaultTopic) {
                    notification = try event.render(for: token, like: sibling)
                } else {
                    notification = try event.render(for: token, payload: job.payload, defaultTopic: defaultTopic)
                    job.sibling = notification
                }
            } catch {
                effects.append(invalidResult(of: job.inFlight, token: token, badge: job.badge, late: job.late, reason: error.reason, now: now))
                continue
            }
            // The registration wins over the event's apns.environment: a token belongs to one environment.
            let environment = registration?.environment ?? event.apns?.environment ?? configuration.defaultEnvironment
            let pending = PendingNotification(record: job.inFlight.record, eventID: event.id, user: event.user, seq: event.seq, badge: job.badge,
                                              token: token, notification: notification, environment: environment,
                                              consumedAt: job.inFlight.consumedAt, late: job.late, fanOutLane: lane,
                                              trace: event.trace)
            dispatch(pending, isBadgeOnly: event.isBadgeOnly, as: deliveryClass, now: now, into: &effects)
        }
        return false
    }

    /// The `apns-topic` a registration's notifications get when the event names none: its topic, and for a Live
    /// Activity token (registered under the app's bundle id) with the `liveactivity` suffix APNs requires.
    static func topic(of registration: DeviceRegistration) -> String {
        guard registration.liveActivity != nil else { return registration.topic }
        let suffix = APNsPushType.liveactivity.requiredTopicSuffixes[0]
        return registration.topic.hasSuffix(suffix) ? registration.topic : registration.topic + suffix
    }

    /// Room in the window again: the fan-outs that waited for it go on, in the scheduler's turns.
    mutating func resumeFanOuts(now: RelayTime, into effects: inout [RelayEffect]) {
        while let turn = fanOuts.nextTurn() {
            var job = turn.job
            let before = job.next
            let capped = continueFanOut(&job, lane: turn.lane, as: turn.deliveryClass, now: now, into: &effects)
            if job.isDone {
                fanOuts.finished(lane: turn.lane)
            } else {
                fanOuts.putBack(job, lane: turn.lane, as: job.deliveryClass)
                // Its cap is spent: the lane waits for the next tick, holding no room, while other lanes go on.
                if capped {
                    fanOuts.hold(turn.lane)
                    continue
                }
                // A turn the bounds allowed always dispatches; should one not, waiting for the next answer beats spinning.
                if job.next == before { return }
            }
        }
    }

    /// Drops the waiting fan-outs and the records set aside of partitions leaving: the rest of their devices, and those
    /// records, are the next owner's (the records stay open).
    mutating func dropFanOuts(of leaving: Set<TopicPartition>) {
        fanOuts.removeAll { leaving.contains($0.inFlight.record.partition) }
        parked.removeAll { leaving.contains($0.reference.partition) }
    }

    /// A notification left the window (answered, superseded or dropped): its lane's count goes down.
    mutating func leftWindow(_ notification: DeviceNotification<PendingNotification>) {
        if let lane = notification.payload.fanOutLane { fanOuts.left(lane: lane, as: notification.deliveryClass) }
    }

    /// A broadcast: one notification to the channel, one result whose `token` is the channel id. It goes through
    /// the dispatcher keyed by the channel id, so a channel has one broadcast in flight at a time, in event order.
    /// (Channel ids are base64 of 16 bytes, 24 characters: never one of the 64-200 character device tokens.)
    mutating func broadcast(_ inFlight: EventInFlight, to channel: APNsChannelID, now: RelayTime, into effects: inout [RelayEffect]) {
        let event = inFlight.event
        expect(inFlight.record, results: 1)
        let notification: APNsNotification
        do {
            notification = try event.renderBroadcast(to: channel, defaultTopic: configuration.defaultTopic)
        } catch {
            effects.append(invalidResult(of: inFlight, token: channel.value, badge: nil, late: false, reason: error.reason, now: now))
            return
        }
        let pending = PendingNotification(record: inFlight.record, eventID: event.id, user: nil, seq: event.seq, badge: nil,
                                          token: channel.value, notification: notification,
                                          environment: event.apns?.environment ?? configuration.defaultEnvironment,
                                          consumedAt: inFlight.consumedAt, late: false,
                                          fanOutLane: fanOuts.lane(for: Self.fanOutLaneKey(of: event, in: inFlight.record)), trace: event.trace)
        // Counted in the window like a fan-out's notification (one per event: it does not wait for room).
        dispatch(pending, isBadgeOnly: false, as: event.deliveryClass, now: now, into: &effects)
    }

    /// Hands a notification to the dispatcher (one in flight per token or channel).
    /// `deliveryClass` is what it counts as in its lane and where it waits for the sender (``SendWindow``).
    mutating func dispatch(_ pending: PendingNotification, isBadgeOnly: Bool, as deliveryClass: DeliveryClass, now: RelayTime,
                           into effects: inout [RelayEffect]) {
        modify(pending.record) { $0.notifications += 1 }
        if let lane = pending.fanOutLane { fanOuts.dispatched(lane: lane, as: deliveryClass) }
        let notification = DeviceNotification(token: pending.token, eventID: pending.eventID, badge: pending.badge, isBadgeOnly: isBadgeOnly,
                                              payload: pending, deliveryClass: deliveryClass)
        let maySend = maySend(now: now)
        throughWindow(now: now, into: &effects) { window, step in window.enqueue(notification, maySend: maySend, into: &step) }
    }

    /// The `invalid` result of a notification that breaks a rule of Apple's: nothing is sent.
    mutating func invalidResult(of inFlight: EventInFlight, token: String, badge: Int64?, late: Bool, reason: String, now: RelayTime) -> RelayEffect {
        let event = inFlight.event
        return publish(ResultRecord(
            eventID: event.id, user: event.user, token: token, seq: event.seq, badge: badge, status: .invalid, apnsID: nil,
            httpStatus: nil, reason: reason, attempts: 0, latencyMs: nil, at: now.epoch, late: late, trace: event.trace), for: inFlight.record)
    }
}
