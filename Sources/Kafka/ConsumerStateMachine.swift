import DequeModule

/// The group consumer's state, as a pure, deterministic state machine: what is buffered for the
/// application, what is parked behind a pause, which librdkafka pauses, resumes and seeks the poll
/// thread still has to make, the revoke handshake and closing.
///
/// It makes no librdkafka call, takes no lock and reads no clock: every input (the application's
/// requests, the poll thread's reads and rebalances, an expired wait) returns what its owner,
/// ``ConsumerDriver``, must do — wake a waiter, make a librdkafka call, wait — and the driver does it
/// outside its lock. The rules it keeps:
/// - an `assigned` event precedes every message of those partitions;
/// - messages of a partition that is not (or no longer) assigned are never handed out;
/// - messages of a paused partition are parked, in order, and handed out again after resume;
/// - librdkafka's own pause, resume and seek are made between two batch reads, never during one
///   (see ``FlowChange``), and each partition's offsets are checked for repeats;
/// - a revoke waits for its ``KafkaRevoke`` to be acknowledged, at most the revoke timeout.
struct ConsumerStateMachine {
    /// The settings the machine's decisions depend on.
    struct Configuration: Equatable {
        /// Most messages held for the application before the poll thread waits for room.
        var bufferLimit: Int
        /// Most messages per batch read.
        var batchSize: Int
        /// The longest the poll thread waits for room before it reads one message anyway.
        var longestPollPause: Duration
        /// The longest a revoke waits for its acknowledgement.
        var revokeTimeout: Duration

        init(bufferLimit: Int, batchSize: Int, longestPollPause: Duration, revokeTimeout: Duration) {
            self.bufferLimit = bufferLimit
            self.batchSize = max(1, batchSize)
            self.longestPollPause = longestPollPause
            self.revokeTimeout = revokeTimeout
        }

        init(_ consumer: KafkaConsumerConfiguration) {
            self.init(
                bufferLimit: consumer.bufferLimit, batchSize: consumer.batchSize,
                longestPollPause: consumer.longestPollPause, revokeTimeout: consumer.effectiveRevokeTimeout
            )
        }
    }

    /// A librdkafka pause or resume for the poll thread to make, of assigned partitions only.
    ///
    /// Filtered when asked and pruned at revoke: librdkafka (2.8 too) keeps a pause across revoke and
    /// assign, so a pause made for a partition no longer assigned would leave its next assignment
    /// unfetched. Made between reads, in the order asked, so the messages a read hands out are all
    /// either before or after it (the machine parks what a read brought of a partition paused meanwhile).
    struct FlowChange: Equatable {
        var pause: Bool
        var partitions: [TopicPartition]
    }

    /// A seek the application asked for; `id` finds its waiting caller.
    struct Seek: Equatable {
        var id: UInt64
        var partition: TopicPartition
        var offset: Int64
    }

    /// What the poll thread does next.
    enum PollStep: Equatable {
        /// The buffer is full: wait until woken or `timeout`, then ask again (after
        /// ``roomWaitExpired()`` when the wait ran out).
        case waitForRoom(timeout: Duration)
        /// Make these seeks, then these pauses and resumes (in order), then `then`.
        case perform(seeks: [Seek], flowChanges: [FlowChange], then: AfterChanges)
    }

    enum AfterChanges: Equatable {
        /// Read a batch of at most `limit` messages.
        case read(limit: Int)
        /// Closing: leave the group (``leavingGroup()``), then ``finished(failure:)``.
        case leaveGroup
    }

    /// What a revoke asks of the poll thread before it gives the partitions up.
    enum RevokeHandshake: Equatable {
        /// Wait until ``revokeWait(_:)`` says done, at most `timeout` (then ``revokeWaitExpired(_:)``).
        case waitForAcknowledgement(id: UInt64, timeout: Duration)
        /// Give them up at once: the consumer is leaving, or librdkafka already lost them.
        case giveUpNow
    }

    /// What an application input asks of the driver.
    struct Wakes: Equatable {
        /// Resume the iterator waiting for events.
        var iterator = false
        /// Wake the poll thread from its wait for room or for an acknowledgement.
        var poller = false
        /// Interrupt a batch read waiting on an empty queue, so a resume is made now rather than
        /// after the read's timeout.
        var read = false
    }

    /// What ``take(limit:)`` found.
    enum Take {
        case events([KafkaConsumerEvent], generation: UInt64)
        case finished(KafkaError?)
        case empty
    }

    private enum PollerWait: Equatable {
        case room
        case acknowledgement(UInt64)
    }

    let configuration: Configuration

    /// Events for the application, oldest first.
    private var buffer: Deque<KafkaConsumerEvent> = []
    private(set) var assignment: Set<TopicPartition> = []
    /// When the poll thread's last read returned: the group's answer behind a rebalance callback served by the
    /// next read came after it (an earlier one would have been served by that read).
    private var lastReadReturned: ContinuousClock.Instant?
    private var paused: Set<TopicPartition> = []
    private var parked: [TopicPartition: [KafkaMessage]] = [:]
    private var pendingSeeks: [Seek] = []
    private var nextSeekID: UInt64 = 0
    /// Partitions whose rewind's seek is pending: announced (``KafkaConsumerEvent/partitionsRewound(_:)``) once made.
    private var pendingRewinds: [TopicPartition] = []
    /// Rewinds whose seeks the poll thread is making now.
    private var rewindsUnderWay: [TopicPartition] = []
    private var flowChanges: [FlowChange] = []
    private var offsetGuard = KafkaOffsetGuard()
    private var iteratorWaiting = false
    private var pollerWait: PollerWait?
    /// A wait for room ran out: the next read takes one message, to stay in the group.
    private var readOneAnyway = false
    private var revokesIssued: UInt64 = 0
    /// The highest revoke id acknowledged; one revoke waits at a time, so it covers the older ones.
    private var revokesAcknowledged: UInt64 = 0
    private var closing = false
    /// The poll thread is leaving the group: revokes must not wait for the application.
    private var leaving = false
    private(set) var isFinished = false
    private var failure: KafkaError?

    /// Moves whenever what may be handed out changes (pause, resume, seek, revoke). The iterator
    /// takes events in chunks and gives back what it has not handed out when this moved, so the new
    /// rules apply to it.
    private(set) var generation: UInt64 = 0

    init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// Events waiting for the application.
    var bufferedCount: Int { buffer.count }

    // MARK: Application inputs

    /// The iterator takes every buffered event, up to `limit`.
    mutating func take(limit: Int) -> (Take, Wakes) {
        guard !buffer.isEmpty else { return (isFinished ? .finished(failure) : .empty, Wakes()) }
        // Moved, not copied: the chunk is handed out back to front (see `KafkaConsumer.Events.Iterator`).
        var chunk: [KafkaConsumerEvent] = []
        chunk.reserveCapacity(Swift.min(limit, buffer.count))
        while chunk.count < limit, let event = buffer.popFirst() { chunk.append(event) }
        // Woken at half, not at the first free slot, so the poll thread reads in batches.
        let wakePoller = pollerWait == .room && bufferedCount < configuration.bufferLimit / 2
        return (.events(chunk, generation: generation), Wakes(poller: wakePoller && wakesPoller()))
    }

    /// The iterator gives back events it took but did not hand out; the current rules apply to
    /// them: messages of unassigned partitions are dropped, those of paused partitions parked.
    mutating func giveBack(_ events: ArraySlice<KafkaConsumerEvent>) {
        guard !events.isEmpty else { return }
        var kept: [KafkaConsumerEvent] = []
        kept.reserveCapacity(events.count)
        // Given-back messages are older than anything parked for their partition since they were
        // taken (the pause parked the buffer behind them): they go in front of it.
        var parkedFirst: [TopicPartition: [KafkaMessage]] = [:]
        for event in events {
            if case .message(let message) = event {
                let partition = message.topicPartition
                guard assignment.contains(partition) else { continue }
                if paused.contains(partition) {
                    parkedFirst[partition, default: []].append(message)
                    continue
                }
            }
            kept.append(event)
        }
        for (partition, messages) in parkedFirst { parked[partition] = messages + (parked[partition] ?? []) }
        buffer.insert(contentsOf: kept, at: 0)
    }

    /// The iterator found nothing to take. Returns `true` when it should wait (it is then woken by
    /// a later input's ``Wakes/iterator``), `false` when there is something after all.
    mutating func iteratorWillWait() -> Bool {
        if !buffer.isEmpty || isFinished { return false }
        iteratorWaiting = true
        return true
    }

    /// The waiting iterator's task was cancelled: it is resumed by its owner, not by an input.
    mutating func iteratorCancelled() {
        iteratorWaiting = false
    }

    mutating func pauseRequested(_ partitions: [TopicPartition]) -> Wakes {
        paused.formUnion(partitions)
        let pausedNow = Set(partitions)
        var kept: [KafkaConsumerEvent] = []
        kept.reserveCapacity(bufferedCount)
        for event in buffer {
            if case .message(let message) = event, pausedNow.contains(message.topicPartition) {
                parked[message.topicPartition, default: []].append(message)
            } else {
                kept.append(event)
            }
        }
        buffer = Deque(kept)
        enqueueFlowChange(pause: true, partitions)
        generation += 1
        return Wakes(poller: pollerWait == .room && wakesPoller())
    }

    mutating func resumeRequested(_ partitions: [TopicPartition]) -> Wakes {
        let changed = enqueueFlowChange(pause: false, partitions)
        var returning: [KafkaConsumerEvent] = []
        for partition in partitions {
            paused.remove(partition)
            if let messages = parked.removeValue(forKey: partition) {
                returning.append(contentsOf: messages.map(KafkaConsumerEvent.message))
            }
        }
        buffer.insert(contentsOf: returning, at: 0)
        generation += 1
        return Wakes(iterator: takeIteratorIfReady(), poller: pollerWait == .room && wakesPoller(), read: changed)
    }

    /// A seek asked for: `nil` when the consumer is closing (the seek fails), otherwise the seek's
    /// id; the poll thread makes it before its next read.
    mutating func seekRequested(_ partition: TopicPartition, to offset: Int64) -> (id: UInt64, Wakes)? {
        guard !isFinished && !closing else { return nil }
        nextSeekID += 1
        pendingSeeks.append(Seek(id: nextSeekID, partition: partition, offset: offset))
        return (nextSeekID, Wakes(poller: pollerWait == .room && wakesPoller()))
    }

    /// A rewind asked for: a seek of each partition to its offset, then the partitions still assigned are announced
    /// (``rewindsMade()``). `nil` when the consumer is closing (the rewind fails).
    mutating func rewindRequested(_ offsets: [TopicPartition: Int64]) -> Wakes? {
        guard !isFinished && !closing else { return nil }
        for (partition, offset) in offsets.sorted(by: { $0.key < $1.key }) where assignment.contains(partition) {
            nextSeekID += 1
            pendingSeeks.append(Seek(id: nextSeekID, partition: partition, offset: offset))
            pendingRewinds.append(partition)
        }
        return Wakes(poller: pollerWait == .room && wakesPoller())
    }

    /// The poll thread made the seeks of ``nextPollStep()``: the rewinds among them are announced, before anything
    /// read from their new positions.
    mutating func rewindsMade() -> Wakes {
        let rewound = rewindsUnderWay.filter(assignment.contains)
        rewindsUnderWay.removeAll()
        guard !rewound.isEmpty else { return Wakes() }
        buffer.append(.partitionsRewound(rewound))
        return Wakes(iterator: takeIteratorIfReady())
    }

    /// The application acknowledged the revoke `id`: it is done with those partitions.
    mutating func acknowledged(revoke id: UInt64) -> Wakes {
        revokesAcknowledged = max(revokesAcknowledged, id)
        guard case .acknowledgement(let awaited) = pollerWait, awaited <= id else { return Wakes() }
        return Wakes(poller: wakesPoller())
    }

    /// `close()` asked for (or the consumer was released). Returns whether the consumer has already
    /// finished, and whom to wake so the poll thread leaves the group.
    mutating func closeRequested() -> (alreadyFinished: Bool, Wakes) {
        closing = true
        return (isFinished, Wakes(poller: pollerWait != nil && wakesPoller()))
    }

    // MARK: Poll thread inputs

    /// The poll thread asks what to do next. Pending seeks drop what was buffered and parked of
    /// their partitions now, as the poll thread makes them before it reads again.
    /// The poll thread's read returned at `instant` (see ``assigned(_:at:)``).
    mutating func readReturned(at instant: ContinuousClock.Instant) {
        lastReadReturned = instant
    }

    mutating func nextPollStep() -> PollStep {
        if !closing && pendingSeeks.isEmpty && flowChanges.isEmpty && !readOneAnyway
            && bufferedCount >= configuration.bufferLimit
        {
            pollerWait = .room
            return .waitForRoom(timeout: configuration.longestPollPause)
        }
        pollerWait = nil
        let seeks = pendingSeeks
        pendingSeeks.removeAll()
        rewindsUnderWay += pendingRewinds
        pendingRewinds.removeAll()
        if !seeks.isEmpty {
            let sought = Set(seeks.map(\.partition))
            offsetGuard.forget(sought)
            dropBuffered(of: sought)
            for partition in sought { parked[partition] = nil }
            generation += 1
        }
        let changes = flowChanges
        flowChanges.removeAll()
        if closing { return .perform(seeks: seeks, flowChanges: changes, then: .leaveGroup) }
        // librdkafka leaves the group when it is not polled for max.poll.interval.ms: after a wait
        // for room ran out, one message is read to keep the membership, so the buffer can exceed
        // its limit by one message per wait.
        let limit = readOneAnyway ? 1 : configuration.batchSize
        readOneAnyway = false
        return .perform(seeks: seeks, flowChanges: changes, then: .read(limit: limit))
    }

    /// The wait for room ran out without room.
    mutating func roomWaitExpired() {
        pollerWait = nil
        readOneAnyway = true
    }

    /// A batch read brought these messages (in librdkafka's order). Returns whether to wake the iterator.
    mutating func batchRead(_ batch: consuming [KafkaMessage]) -> Wakes {
        offsetGuard.filter(&batch)
        guard !batch.isEmpty else { return Wakes() }
        // Consecutive messages usually share a partition: decide once per run.
        var lastPartition: TopicPartition?
        var lastAccepted = false
        var lastParked = false
        // Moved out from the back of the reversed batch: no reference count traffic per message
        // (iterating would copy each one, and destroying the batch release it again).
        batch.reverse()
        while let message = batch.popLast() {
            let partition = message.topicPartition
            if partition != lastPartition {
                lastPartition = partition
                lastAccepted = assignment.contains(partition)
                lastParked = paused.contains(partition)
            }
            // Not assigned: revoked while this batch was being read; its next owner reads it.
            guard lastAccepted else { continue }
            if lastParked {
                parked[partition, default: []].append(message)
            } else {
                buffer.append(.message(message))
            }
        }
        return Wakes(iterator: takeIteratorIfReady())
    }

    /// The group assigned these partitions (librdkafka has been told, and resumed them).
    ///
    /// The event is dated when the read that served the callback began at the latest (the previous read's
    /// return), not when the callback ran: a poll thread held up (a freeze, a starved CPU) between the group's
    /// answer and the callback must not date the membership after the hold-up. Its user counts a lease from it.
    mutating func assigned(_ partitions: [TopicPartition], at instant: ContinuousClock.Instant = .now) -> Wakes {
        offsetGuard.forget(partitions)
        assignment.formUnion(partitions)
        buffer.append(.partitionsAssigned(partitions, at: min(lastReadReturned ?? instant, instant)))
        return Wakes(iterator: takeIteratorIfReady())
    }

    /// The group takes these partitions away (`lost`: librdkafka already lost them). Their
    /// buffered, parked and pending state goes; the application gets a ``KafkaRevoke`` that reports
    /// its acknowledgement to `acknowledger`, and the poll thread waits for it as the handshake says
    /// (from `instant` on).
    mutating func revokeRequested(
        _ partitions: [TopicPartition], lost: Bool, acknowledger: (any KafkaRevokeAcknowledging)?, at instant: ContinuousClock.Instant = .now
    ) -> (RevokeHandshake, Wakes) {
        let revoked = Set(partitions)
        assignment.subtract(revoked)
        pendingRewinds.removeAll(where: revoked.contains)
        paused.subtract(revoked)
        for partition in revoked { parked[partition] = nil }
        offsetGuard.forget(revoked)
        for index in flowChanges.indices { flowChanges[index].partitions.removeAll(where: revoked.contains) }
        flowChanges.removeAll { $0.partitions.isEmpty }
        dropBuffered(of: revoked)
        generation += 1
        revokesIssued += 1
        let waits = !(leaving || lost || closing)
        buffer.append(.partitionsRevoked(KafkaRevoke(id: revokesIssued, partitions: partitions, lost: lost,
                                                     deadline: waits ? instant + configuration.revokeTimeout : nil, acknowledger: acknowledger)))
        let wakes = Wakes(iterator: takeIteratorIfReady())
        if !waits { return (.giveUpNow, wakes) }
        return (.waitForAcknowledgement(id: revokesIssued, timeout: configuration.revokeTimeout), wakes)
    }

    /// The poll thread asks whether the revoke `id` may give its partitions up: `true` once it was
    /// acknowledged or the consumer is closing; `false` means wait to be woken.
    mutating func revokeWait(_ id: UInt64) -> Bool {
        if revokesAcknowledged >= id || closing {
            pollerWait = nil
            return true
        }
        pollerWait = .acknowledgement(id)
        return false
    }

    /// The revoke's wait ran out: its partitions are given up. Returns whether it was acknowledged
    /// (or the consumer began closing) just in time after all. When it was not, the application is told that the
    /// partitions are lost (a second, lost revoke of them): whatever it still does for them may reach Kafka after
    /// their next owner started, so it must not be written.
    mutating func revokeWaitExpired(_ id: UInt64, partitions: [TopicPartition] = []) -> (acknowledged: Bool, Wakes) {
        if pollerWait == .acknowledgement(id) { pollerWait = nil }
        let acknowledged = revokesAcknowledged >= id || closing
        guard !acknowledged, !partitions.isEmpty else { return (acknowledged, Wakes()) }
        revokesIssued += 1
        revokesAcknowledged = max(revokesAcknowledged, revokesIssued)
        buffer.append(.partitionsRevoked(KafkaRevoke(id: revokesIssued, partitions: partitions, lost: true, deadline: nil, acknowledger: nil)))
        generation += 1
        return (false, Wakes(iterator: takeIteratorIfReady()))
    }

    /// The poll thread is leaving the group: the revoke that comes with it does not wait.
    mutating func leavingGroup() {
        leaving = true
    }

    /// The poll thread is done. Returns the seeks that will never be made (they fail) and whether
    /// to wake the iterator, which then finds the end (or `failure`) after the buffered events.
    mutating func finished(failure: KafkaError?) -> (unmadeSeeks: [UInt64], Wakes) {
        isFinished = true
        self.failure = failure
        let unmade = pendingSeeks.map(\.id)
        pendingSeeks.removeAll()
        pollerWait = nil
        return (unmade, Wakes(iterator: takeIteratorIfReady()))
    }

    // MARK: Helpers

    @discardableResult
    private mutating func enqueueFlowChange(pause: Bool, _ partitions: [TopicPartition]) -> Bool {
        let assigned = partitions.filter(assignment.contains)
        guard !assigned.isEmpty else { return false }
        flowChanges.append(FlowChange(pause: pause, partitions: assigned))
        return true
    }

    /// Removes buffered messages of these partitions.
    private mutating func dropBuffered(of partitions: Set<TopicPartition>) {
        guard !partitions.isEmpty else { return }
        var kept: [KafkaConsumerEvent] = []
        kept.reserveCapacity(bufferedCount)
        for event in buffer {
            if case .message(let message) = event, partitions.contains(message.topicPartition) { continue }
            kept.append(event)
        }
        buffer = Deque(kept)
    }

    /// Whether to resume the waiting iterator: it waits and there is something for it.
    private mutating func takeIteratorIfReady() -> Bool {
        guard iteratorWaiting && (!buffer.isEmpty || isFinished) else { return false }
        iteratorWaiting = false
        return true
    }

    /// The poll thread is woken once per wait: it asks again (``nextPollStep()``, ``revokeWait(_:)``).
    private mutating func wakesPoller() -> Bool {
        pollerWait = nil
        return true
    }
}
