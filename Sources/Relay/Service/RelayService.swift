import APNs
public import Kafka
public import Logging
public import ServiceLifecycle
import Synchronization

/// Where and how the relay runs: the Kafka side of the configuration plus the relay settings.
public struct RelayServiceConfiguration: Sendable {
    public var kafka: KafkaConfiguration
    public var groupID: String
    public var eventsTopic: String
    public var devicesTopic: String
    public var resultsTopic: String
    public var failedTokensTopic: String
    public var deadLetterTopic: String
    public var badgeStateTopic: String
    public var engine: RelayEngine.Configuration
    public var shutdownTimeout: Duration
    /// How often finished offsets are committed.
    public var commitInterval: Duration

    public init(
        kafka: KafkaConfiguration, groupID: String = "apns-relay",
        eventsTopic: String = "push.events", devicesTopic: String = "push.devices", resultsTopic: String = "push.results",
        failedTokensTopic: String = "push.failed-tokens", deadLetterTopic: String = "push.dlq", badgeStateTopic: String = "push.badge-state",
        engine: RelayEngine.Configuration = .init(), shutdownTimeout: Duration = .seconds(25), commitInterval: Duration = .seconds(1)
    ) {
        self.kafka = kafka
        self.groupID = groupID
        self.eventsTopic = eventsTopic
        self.devicesTopic = devicesTopic
        self.resultsTopic = resultsTopic
        self.failedTokensTopic = failedTokensTopic
        self.deadLetterTopic = deadLetterTopic
        self.badgeStateTopic = badgeStateTopic
        self.engine = engine
        self.shutdownTimeout = shutdownTimeout
        self.commitInterval = commitInterval
    }
}

/// A value shared between tasks behind a lock (a class, so escaping closures can share it).
final class LockedBox<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    init(_ value: Value) { mutex = Mutex(value) }

    func withLock<Result: Sendable>(_ body: (inout Value) -> Result) -> Result { mutex.withLock { body(&$0) } }
}

/// Hands events from the consumer task to the loop one at a time: the consumer waits until the
/// loop has handled the previous one. `close()` releases a waiting consumer and every later one.
final class AcknowledgementGate: Sendable {
    private let state = Mutex<(waiter: CheckedContinuation<Void, Never>?, closed: Bool)>((nil, false))

    /// Registers as waiting, runs `deliver`, and returns when the loop acknowledged (or closed).
    func submit(_ deliver: () -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let closed = state.withLock { state in
                if state.closed { return true }
                state.waiter = continuation
                return false
            }
            if closed {
                continuation.resume()
            } else {
                deliver()
            }
        }
    }

    func acknowledge() {
        state.withLock { state in
            defer { state.waiter = nil }
            return state.waiter
        }?.resume()
    }

    func close() {
        state.withLock { state in
            state.closed = true
            defer { state.waiter = nil }
            return state.waiter
        }?.resume()
    }
}

/// What the service reports about itself (readiness, counters), readable from any task.
public final class RelayStatus: Sendable {
    private let state = Mutex(Snapshot())

    public struct Snapshot: Sendable {
        public var devicesLoaded = false
        public var partitionsRestored = false
        public var pendingRecords = 0
        public var counters = RelayCounters()
    }

    public init() {}

    public var snapshot: Snapshot { state.withLock { $0 } }

    func update(_ body: (inout Snapshot) -> Void) { state.withLock { body(&$0) } }
}

/// The relay: consumes events, keeps badges, delivers through `sender`, publishes results.
///
/// `run()` returns after `stop()` (or cancellation): it stops fetching, lets in-flight work
/// finish within `shutdownTimeout`, publishes, commits and closes its clients.
public final class RelayService: Service {
    private let configuration: RelayServiceConfiguration
    private let sender: any NotificationSending
    private let logger: Logger
    private let clock: any Clock<Duration>
    public let status = RelayStatus()
    /// Shard tasks that sends run under (see `runUntilStopped`).
    static let sendShardCount = 64
    private let stopSignal: AsyncStream<StopKind>
    private let stopContinuation: AsyncStream<StopKind>.Continuation
    private let deadTokenReports: AsyncStream<[DeadTokenReport]>
    private let deadTokenContinuation: AsyncStream<[DeadTokenReport]>.Continuation

    private enum StopKind: Sendable { case graceful, abandon }

    public init(configuration: RelayServiceConfiguration, sender: any NotificationSending, logger: Logger) {
        self.configuration = configuration
        self.sender = sender
        self.logger = logger
        self.clock = ContinuousClock()
        (stopSignal, stopContinuation) = AsyncStream<StopKind>.makeStream()
        (deadTokenReports, deadTokenContinuation) = AsyncStream<[DeadTokenReport]>.makeStream()
    }

    /// Tokens the legacy feedback service reported dead: removed from the device registry and published as
    /// failed tokens with reason `Feedback` (handled in order with everything else while `run()` runs).
    public func reportDeadTokens(_ reports: [DeadTokenReport]) {
        deadTokenContinuation.yield(reports)
    }

    /// Asks `run()` to stop gracefully.
    public func stop() {
        stopContinuation.yield(.graceful)
        stopContinuation.finish()
    }

    /// Stops at once, as a crash would: nothing more is sent, published, flushed or committed, and
    /// work in flight is dropped. For failure tests: the next owner must recover from the changelog
    /// and the last commit alone.
    func abandon() {
        stopContinuation.yield(.abandon)
        stopContinuation.finish()
    }

    /// The driver's inputs, all handled by one loop that owns the engine.
    enum Input: Sendable {
        case consumed(KafkaConsumerEvent)
        case restored(TopicPartition, [(key: [UInt8], value: [UInt8]?)])
        case changelogged(UInt64)
        case sent(Dispatch<PendingNotification>, SendOutcome)
        case published(RecordReference)
        /// A periodic commit finished: these offsets when it succeeded, `nil` when it failed.
        case committed([TopicPartition: Int64]?)
        case device(key: [UInt8]?, value: [UInt8]?)
        case devicesLoaded
        case deadTokens([DeadTokenReport])
        case tick
        case stop
        case abandon
    }

    /// Runs until `stop()`, cancellation, or graceful shutdown of its ServiceGroup (SIGTERM/SIGINT).
    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await runUntilStopped()
        } onGracefulShutdown: {
            self.stop()
        }
    }

    private func runUntilStopped() async throws {
        let kafka = configuration.kafka
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        let consumerConfiguration = KafkaConsumerConfiguration(kafka: kafka, groupID: configuration.groupID, topics: [configuration.eventsTopic])
        let consumer = try KafkaConsumer(configuration: consumerConfiguration, logger: logger)
        let (inputs, input) = AsyncStream<Input>.makeStream()
        let gate = AcknowledgementGate()

        await withDiscardingTaskGroup { group in
            // Events: one at a time into the loop, which acknowledges when it has handled each
            // (so the consumer never runs ahead of backpressure, and revokes finish before the
            // consumer gives partitions up).
            group.addTask {
                do {
                    for try await event in consumer.events {
                        await gate.submit { input.yield(.consumed(event)) }
                    }
                } catch {
                    self.logger.error("event consumer failed", metadata: ["error": "\(error)"])
                }
            }
            // Devices: read everything, then follow.
            group.addTask {
                await self.followDevices(into: input)
            }
            group.addTask {
                for await kind in self.stopSignal {
                    input.yield(kind == .graceful ? .stop : .abandon)
                    break
                }
            }
            group.addTask {
                for await reports in self.deadTokenReports {
                    if Task.isCancelled { break }
                    input.yield(.deadTokens(reports))
                }
            }
            group.addTask {
                while !Task.isCancelled {
                    try? await self.clock.sleep(for: .milliseconds(100))
                    input.yield(.tick)
                }
            }

            // Sends run as child tasks of a few shard tasks rather than of this group: a task group
            // removes a finished child in time linear in its children, which with thousands of
            // sends in flight in one group dominated the profile.
            var sendShards: [AsyncStream<Dispatch<PendingNotification>>.Continuation] = []
            var nextSendShard = 0
            for _ in 0..<Self.sendShardCount {
                let (stream, continuation) = AsyncStream<Dispatch<PendingNotification>>.makeStream()
                sendShards.append(continuation)
                group.addTask {
                    await withDiscardingTaskGroup { sends in
                        for await dispatch in stream {
                            sends.addTask {
                                let outcome = await self.sender.send(dispatch.notification.payload)
                                input.yield(.sent(dispatch, outcome))
                            }
                        }
                    }
                }
            }

            var engine = RelayEngine(configuration: configuration.engine)
            let metrics = RelayMetrics()
            var reportedCounters = RelayCounters()
            var ticks = 0
            let ticksPerCommit = max(1, Int(configuration.commitInterval / .milliseconds(100)))
            var stopping = false
            var abandoned = false
            var periodicCommitInFlight = false
            var stopDeadline: ContinuousClock.Instant?

            // Deadlines run on the monotonic clock (a wall-clock step must not skip or hold a seq
            // gap); records carry wall-clock timestamps.
            let monotonicOrigin = ContinuousClock.now
            func now() -> RelayTime {
                let elapsed = (ContinuousClock.now - monotonicOrigin).components
                return RelayTime(monotonic: elapsed.seconds * 1_000 + elapsed.attoseconds / 1_000_000_000_000_000, epoch: Date.nowMilliseconds)
            }

            /// Metrics and status, on every tick rather than every input: per input they cost more
            /// than the work itself (a dozen metric updates and a status copy, six inputs per event).
            func exportStatus() {
                if engine.counters != reportedCounters {
                    metrics.record(from: reportedCounters, to: engine.counters, pendingRecords: engine.pendingRecordCount,
                                   pendingNotifications: engine.notificationsInFlight, isPaused: engine.isPaused)
                    reportedCounters = engine.counters
                }
                status.update {
                    $0.pendingRecords = engine.pendingRecordCount
                    $0.counters = engine.counters
                    $0.partitionsRestored = engine.isRestored
                }
            }

            /// Partitions being revoked and when to give up waiting for their in-flight work; below
            /// the consumer's revoke timeout.
            var revoking: ([TopicPartition], ContinuousClock.Instant)?
            /// Events wait until the device registry has been read to its end.
            var devicesReady = false
            var deferredMessage: KafkaMessage?
            // The consumer gives the partitions up after its revoke timeout whatever happens; leave
            // room within it for the flush and the commit.
            let revokeDrainLimit = min(configuration.shutdownTimeout, .seconds(8), consumerConfiguration.effectiveRevokeTimeout * 0.6)

            /// Stores the progress markers, then commits: the markers go where the partitions'
            /// next owner reads anyway, so a refused commit (a broker mid-rebalance) costs nothing.
            func storeProgressAndCommit(_ effects: [RelayEffect]) async {
                for case .writeProgress(let marker, let partition, let at) in effects {
                    logger.info("progress stored for the next owner", metadata: [
                        "partition": "\(partition)", "through": "\(marker.through)", "open": "\(marker.open.count)"])
                    await writeProgress(marker, partition: partition, at: at)
                }
                // Every changelog append made so far, and the markers, must be stored before the
                // partitions' next owner restores from the changelog, or it could apply them again.
                do { try await producer.flush(timeout: configuration.shutdownTimeout) } catch {
                    logger.warning("flush of the badge changelog failed", metadata: ["error": "\(error)"])
                }
                for case .commit(let offsets) in effects {
                    do { try await consumer.commit(offsets) } catch {
                        logger.warning("commit failed; the progress markers stand in for it", metadata: ["error": "\(error)"])
                    }
                }
            }

            func finishRevoke(_ partitions: [TopicPartition]) async {
                await storeProgressAndCommit(engine.revoked(partitions, now: now()))
            }

            func writeProgress(_ marker: ProgressMarker, partition: Int32, at: Int64) async {
                let logger = self.logger
                do {
                    try await producer.enqueue(KafkaRecord(topic: configuration.badgeStateTopic, partition: partition, key: ProgressMarker.key, value: marker.encoded(at: at)))
                        .onReport { result in
                            if case .failure(let error) = result {
                                // The next marker covers it; until then a new owner would resend more.
                                logger.warning("progress marker not stored", metadata: ["partition": "\(partition)", "error": "\(error)"])
                            }
                        }
                } catch {
                    logger.warning("progress marker refused", metadata: ["partition": "\(partition)", "error": "\(error)"])
                }
            }

            func execute(_ effects: [RelayEffect]) async {
                for effect in effects {
                    switch effect {
                    case .publishResult(let record, let reference):
                        await publish(KafkaRecord(topic: configuration.resultsTopic, key: Array(record.eventID.utf8), value: record.encoded()), reference: reference)
                    case .publishDeadLetter(let message, let error):
                        let headers = [
                            KafkaHeader(key: "x-error", value: error),
                            KafkaHeader(key: "x-source-topic", value: message.topic),
                            KafkaHeader(key: "x-source-partition", value: "\(message.partition)"),
                            KafkaHeader(key: "x-source-offset", value: "\(message.offset)"),
                        ]
                        await publish(KafkaRecord(topic: configuration.deadLetterTopic, key: message.key, value: message.value, headers: headers),
                                      reference: RecordReference(message.topicPartition, message.offset))
                    case .publishFailedToken(let record):
                        await publish(KafkaRecord(topic: configuration.failedTokensTopic, key: Array(record.token.utf8), value: record.encoded()), reference: nil)
                    case .appendChangelog(let user, let record, let partition, let token):
                        do {
                            // A callback, not a task per append. Reports of one partition come in
                            // append order, which is the order a user's events need.
                            let logger = self.logger
                            try await producer.enqueue(KafkaRecord(topic: configuration.badgeStateTopic, partition: partition, key: Array(user.utf8), value: record.encoded()))
                                .onReport { result in
                                    switch result {
                                    case .success: input.yield(.changelogged(token))
                                    case .failure(let error):
                                        // The engine keeps the event waiting; its offset is never committed,
                                        // so after a restart it is processed again.
                                        logger.error("badge changelog append failed", metadata: ["error": "\(error)"])
                                    }
                                }
                        } catch {
                            logger.error("badge changelog append refused", metadata: ["error": "\(error)"])
                        }
                    case .send(let dispatch):
                        sendShards[nextSendShard].yield(dispatch)
                        nextSendShard = (nextSendShard + 1) % sendShards.count
                    case .writeProgress(let marker, let partition, let at):
                        await writeProgress(marker, partition: partition, at: at)
                    case .restore(let partition):
                        let badgeState = TopicPartition(configuration.badgeStateTopic, partition.partition)
                        group.addTask {
                            // The last value per key: users' states (keys compared as bytes) and the
                            // previous owner's progress marker.
                            let records = LockedBox<[[UInt8]: [UInt8]?]>([:])
                            do {
                                _ = try await reader.readToEnd([badgeState]) { message in
                                    guard let key = message.key else { return }
                                    records.withLock { $0[key] = .some(message.value) }
                                }
                            } catch {
                                self.logger.error("badge state restore failed; starting the partition from what was read", metadata: ["partition": "\(badgeState)", "error": "\(error)"])
                            }
                            let restored = records.withLock { $0.map { (key: $0.key, value: $0.value) } }
                            input.yield(.restored(partition, restored))
                        }
                    case .commit(let offsets):
                        periodicCommitInFlight = true
                        group.addTask {
                            do {
                                try await consumer.commit(offsets)
                                input.yield(.committed(offsets))
                            } catch {
                                self.logger.warning("commit failed; retrying with the next one", metadata: ["error": "\(error)"])
                                input.yield(.committed(nil))
                            }
                        }
                    case .pause(let partitions):
                        consumer.pause(partitions)
                    case .resume(let partitions):
                        consumer.resume(partitions)
                    }
                }
            }

            func publish(_ record: KafkaRecord, reference: RecordReference?) async {
                do {
                    // A callback, not a task per record: thousands are in flight at once.
                    let logger = self.logger
                    let topic = record.topic
                    try await producer.enqueue(record).onReport { result in
                        switch result {
                        case .success:
                            if let reference { input.yield(.published(reference)) }
                        case .failure(let error):
                            logger.error("publishing to \(topic) failed; the record will be processed again after a restart", metadata: ["error": "\(error)"])
                        }
                    }
                } catch {
                    logger.error("publishing to \(record.topic) refused", metadata: ["error": "\(error)"])
                }
            }

            loop: for await next in inputs {
                switch next {
                case .consumed(let event):
                    switch event {
                    case .message(let message):
                        if !devicesReady {
                            // Registrations first (contract): hold this event, unacknowledged, so the
                            // consumer waits too.
                            deferredMessage = message
                            break
                        }
                        // While stopping, fetched records are left for the next owner (not committed).
                        if !stopping { await execute(engine.consumed(message, now: now())) }
                        gate.acknowledge()
                    case .partitionsAssigned(let partitions):
                        await execute(engine.assigned(partitions))
                        gate.acknowledge()
                    case .partitionsRevoked(let partitions):
                        // Nothing new is sent for these partitions from now on; the sends in flight
                        // finish and their results are published (the consumer waits for the
                        // acknowledgement), then the progress marker tells the next owner what is
                        // left, and it sends that, once.
                        await execute(engine.revoking(partitions))
                        revoking = (partitions, ContinuousClock.now.advanced(by: revokeDrainLimit))
                    }
                case .restored(let partition, let records):
                    await execute(engine.restored(partition, records: records, now: now()))
                    let marker = engine.previousProgress(of: partition)
                    logger.info("badge state restored", metadata: [
                        "partition": "\(partition)", "records": "\(records.count)",
                        "previous owner through": "\(marker.map { "\($0.through) (\($0.open.count) open)" } ?? "-")"])
                case .changelogged(let token):
                    await execute(engine.changelogged(token, now: now()))
                case .sent(let dispatch, let outcome):
                    let answeredAt = now()
                    metrics.recordAnswer(latencyMilliseconds: answeredAt.epoch - dispatch.notification.payload.consumedAt, status: outcome.status, reason: outcome.reason)
                    await execute(engine.sent(dispatch, outcome: outcome, now: answeredAt))
                case .published(let reference):
                    await execute(engine.published(reference))
                case .committed(let offsets):
                    periodicCommitInFlight = false
                    if let offsets { engine.committed(offsets) }
                case .device(let key, let value):
                    if let rejection = engine.deviceRecord(key: key, value: value) {
                        logger.warning("unreadable device registration skipped", metadata: ["token": "\(APNsDeviceToken.shortened(hex: String(decoding: key ?? [], as: UTF8.self)))", "reason": "\(rejection.reason)"])
                    }
                case .devicesLoaded:
                    devicesReady = true
                    status.update { $0.devicesLoaded = true }
                    if let message = deferredMessage {
                        deferredMessage = nil
                        if !stopping { await execute(engine.consumed(message, now: now())) }
                        gate.acknowledge()
                    }
                case .deadTokens(let reports):
                    await execute(engine.tokensReportedDead(reports, reason: "Feedback"))
                case .tick:
                    await execute(engine.tick(now: now()))
                    exportStatus()
                    ticks += 1
                    // One periodic commit at a time: while the coordinator is slow (a rebalance) they
                    // would only queue up behind each other, and the revoke's own commit after them.
                    if ticks % ticksPerCommit == 0 && !periodicCommitInFlight {
                        await execute(engine.commitDue(now: now()))
                        metrics.recordLag(consumer.lag())
                    }
                    if stopping, let deadline = stopDeadline, engine.pendingRecordCount == 0 || ContinuousClock.now >= deadline {
                        break loop
                    }
                case .stop:
                    logger.info("stopping: finishing in-flight work", metadata: ["pending": "\(engine.pendingRecordCount)"])
                    stopping = true
                    stopDeadline = ContinuousClock.now.advanced(by: configuration.shutdownTimeout)
                    consumer.pause(consumer.assignment)
                case .abandon:
                    logger.warning("abandoning: in-flight work is dropped and nothing is committed", metadata: ["pending": "\(engine.pendingRecordCount)"])
                    abandoned = true
                    break loop
                }
                if let (partitions, deadline) = revoking, engine.revokeSettled(partitions) || ContinuousClock.now >= deadline {
                    revoking = nil
                    await finishRevoke(partitions)
                    gate.acknowledge()
                }
            }
            exportStatus()

            // Nothing more is handled: release the event reader, then commit what finished and close.
            gate.close()
            if !abandoned {
                await storeProgressAndCommit(engine.commitDue(now: now()))
            }
            await consumer.close()
            await producer.close(timeout: abandoned ? .zero : .seconds(5))
            for shard in sendShards { shard.finish() }
            group.cancelAll()
        }
    }

    /// Reads `push.devices` from the beginning in a group of its own (so every replica sees every
    /// registration), says when it reached the end present at start, then follows new records.
    private func followDevices(into input: AsyncStream<Input>.Continuation) async {
        do {
            let admin = try KafkaAdmin(configuration: configuration.kafka, logger: logger)
            let partitions = try await admin.partitionCount(of: configuration.devicesTopic) ?? 0
            var ends: [Int32: Int64] = [:]
            for partition in 0..<Int32(partitions) {
                let marks = try await admin.watermarks(of: TopicPartition(configuration.devicesTopic, partition))
                if marks.high > marks.low { ends[partition] = marks.high }
            }
            if ends.isEmpty { input.yield(.devicesLoaded) }
            let consumer = try KafkaConsumer(
                configuration: KafkaConsumerConfiguration(
                    kafka: configuration.kafka, groupID: "\(configuration.groupID).devices.\(UInt64.random(in: 0...UInt64.max))",
                    topics: [configuration.devicesTopic]
                ),
                logger: logger
            )
            for try await event in consumer.events {
                guard !Task.isCancelled else { break }
                guard case .message(let message) = event else { continue }
                input.yield(.device(key: message.key, value: message.value))
                if let end = ends[message.partition], message.offset + 1 >= end {
                    ends[message.partition] = nil
                    if ends.isEmpty { input.yield(.devicesLoaded) }
                }
            }
            await consumer.close()
        } catch {
            logger.error("device registrations unavailable", metadata: ["error": "\(error)"])
        }
    }
}

import Foundation

extension Date {
    static var nowMilliseconds: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}
