import APNs
import Foundation
import Kafka
public import Logging
public import ServiceLifecycle
import Synchronization

/// The relay: consumes events, keeps badges, delivers through `sender`, publishes results.
///
/// `run()` returns after `stop()` (or cancellation): it stops fetching, lets in-flight work
/// finish within `shutdownTimeout`, publishes, commits and closes its clients.
public final class RelayService: Service {
    private let configuration: RelayServiceConfiguration
    private let sender: any NotificationSending
    private let clients: RelayKafkaClients?
    private let logger: Logger
    private let clock: any Clock<Duration>
    public let status = RelayStatus()
    private let stopSignal: AsyncStream<StopKind>
    private let stopContinuation: AsyncStream<StopKind>.Continuation
    private let deadTokenReports: AsyncStream<[DeadTokenReport]>
    private let deadTokenContinuation: AsyncStream<[DeadTokenReport]>.Continuation

    private enum StopKind: Sendable { case graceful, abandon }

    /// Most events handed to the loop at once: a poll's worth, small against `max_in_flight`, so
    /// backpressure (which applies from the next batch) overshoots little.
    static let consumedBatchSize = 256

    /// - Parameter clients: the Kafka clients to run with; ``RelayKafkaClients/kafka(_:logger:)``
    ///   of `configuration` when `nil` (created when `run()` starts).
    public init(configuration: RelayServiceConfiguration, sender: any NotificationSending, clients: RelayKafkaClients? = nil, logger: Logger) {
        self.configuration = configuration
        self.sender = sender
        self.clients = clients
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
        /// Events in the consumer's order; a revoke is always the last of its batch.
        case consumed([KafkaConsumerEvent])
        case consumerFailed(String)
        case restored(TopicPartition, generation: UInt64, RestoredChangelog)
        case restoreFailed(TopicPartition, generation: UInt64, String)
        case changelogged(UInt64)
        case sent(DeviceDispatch<PendingNotification>, SendOutcome)
        /// A result (of `device`, when it has a token) or a dead letter of the record was published.
        case published(RecordReference, device: String?)
        case publishSucceeded(PublishDestination)
        case publishFailed(RelayEffect, PublishFailure)
        /// A periodic commit finished: these offsets when it succeeded, `nil` when it failed.
        case committed([TopicPartition: Int64]?)
        /// A `push.devices` record; `window` is released once it is applied.
        case device(key: ArraySlice<UInt8>?, value: ArraySlice<UInt8>?, window: DeviceRecordWindow)
        case devicesLoaded
        case devicesFailed(String)
        case deadTokens([DeadTokenReport])
        case tick
        case stop
        case abandon
    }

    /// Runs until `stop()`, cancellation, or graceful shutdown of its ServiceGroup (SIGTERM/SIGINT).
    ///
    /// - Throws: ``RelayFailure`` when the engine gives up (a destination, a restore or the
    ///   registry failing past the bound, the consumer dead): the process exits 1.
    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await runUntilStopped()
        } onGracefulShutdown: {
            self.stop()
        }
    }

    /// The engine's configuration with the service's timings, and a random jitter seed.
    private func engineConfiguration(revokeTimeout: Duration) -> RelayEngineConfiguration {
        var engine = configuration.engine
        engine.waitsForDeviceRegistry = true
        engine.shutdownTimeout = configuration.shutdownTimeout
        engine.commitInterval = configuration.commitInterval
        // The consumer gives the partitions up after its revoke timeout whatever happens: the
        // drain takes at most 60% of it and the hand-over (markers, commit) 30%.
        engine.revokeDrain = min(configuration.shutdownTimeout, .seconds(8), revokeTimeout * 0.6)
        engine.handOver = revokeTimeout * 0.3
        engine.jitterSeed = UInt64.random(in: 0...UInt64.max)
        return engine
    }

    private func runUntilStopped() async throws {
        let clients = try self.clients ?? RelayKafkaClients.kafka(configuration, logger: logger)
        let (consumer, producer, reader, devices) = (clients.consumer, clients.producer, clients.changelog, clients.devices)
        let changelogProducer = clients.changelogProducer
        let consumerConfiguration = configuration.consumer
        let input = RelayInbox()
        let gate = AcknowledgementGate()
        var failure: String?

        await withDiscardingTaskGroup { group in
            // Events: a batch at a time into the loop, which acknowledges when it has handled it
            // (so the consumer runs at most a batch ahead of backpressure, and a revoke, always
            // last in its batch, waits for its hand-over).
            group.addTask {
                do {
                    try await consumer.forEachBatch(maxCount: Self.consumedBatchSize) { events in
                        await gate.submit { input.yield(.consumed(events)) }
                    }
                } catch {
                    input.yield(.consumerFailed("\(error)"))
                }
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

            var engine = RelayEngine(configuration: engineConfiguration(revokeTimeout: consumerConfiguration.effectiveRevokeTimeout))
            var sends = SendLanes()
            let metrics = RelayMetrics()
            var reportedCounters = RelayCounters()
            var finished = false
            var abandoned = false
            var ticks = 0

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
                    $0.devicesLoaded = engine.isDeviceRegistryLoaded
                }
            }

            /// Hands a record to its producer (badge changes and markers to the changelog's); its delivery
            /// report comes back as an input.
            func produce(_ record: KafkaRecord, for effect: RelayEffect, onSuccess: Input) async {
                let target: any RelayRecordProducer
                switch effect {
                case .appendChangelog, .writeProgress: target = changelogProducer
                default: target = producer
                }
                do {
                    // A callback, not a task per record: thousands are in flight at once.
                    try await target.produce(record) { result in
                        switch result {
                        case .success: input.yield(onSuccess)
                        case .failure(let error): input.yield(.publishFailed(effect, error.isMessageTooLarge ? .tooLarge : .other("\(error)")))
                        }
                    }
                } catch let error as KafkaError {
                    input.yield(.publishFailed(effect, error.isMessageTooLarge ? .tooLarge : .other("\(error)")))
                } catch {
                    input.yield(.publishFailed(effect, .other("\(error)")))
                }
            }

            func deadLetterHeaders(error: String, source: RecordReference) -> [KafkaHeader] {
                [
                    KafkaHeader(key: "x-error", value: error),
                    KafkaHeader(key: "x-source-topic", value: source.partition.topic),
                    KafkaHeader(key: "x-source-partition", value: "\(source.partition.partition)"),
                    KafkaHeader(key: "x-source-offset", value: "\(source.offset)"),
                ]
            }

            func progressRecord(_ marker: ProgressMarker, partition: Int32, at: Int64) -> KafkaRecord {
                let (value, dropped) = marker.encodedCountingDrops(at: at)
                if dropped > 0 {
                    logger.warning("progress marker over its size bound: some open records' done devices left out (the next owner sends to them again)",
                                   metadata: ["partition": "\(partition)", "records": "\(dropped)"])
                }
                return KafkaRecord(topic: configuration.badgeStateTopic, partition: partition, key: ProgressMarker.key, value: value)
            }

            /// Markers, then (flushed, within the hand-over's deadline) the commit, then what follows.
            func handOver(_ handOver: HandOver) async {
                for (marker, partition) in handOver.progress {
                    let effect = RelayEffect.writeProgress(marker, partition: partition, at: handOver.at)
                    await produce(progressRecord(marker, partition: partition, at: handOver.at), for: effect, onSuccess: .publishSucceeded(.progress))
                }
                func left() -> Duration { .milliseconds(max(0, handOver.deadline - now().monotonic)) }
                do {
                    try await changelogProducer.flush(timeout: left())
                } catch {
                    logger.warning("progress markers not stored in time; the next owner resends more", metadata: ["error": "\(error)"])
                }
                // Results in flight, within what is left of the deadline (their records' offsets are committed
                // only once published, so this only saves the next owner resending them).
                try? await producer.flush(timeout: left())
                if !handOver.offsets.isEmpty {
                    do {
                        try await consumer.commit(handOver.offsets)
                        engine.committed(handOver.offsets)
                    } catch {
                        logger.warning("commit at hand-over failed; the progress markers cover it", metadata: ["error": "\(error)"])
                    }
                }
                switch handOver.then {
                case .acknowledgeRevoke(let partitions):
                    sends.close(partitions)
                    logger.info("progress stored for the next owner", metadata: [
                        "partitions": "\(partitions)", "through": "\(handOver.progress.map { "\($0.partition):\($0.marker.through)" })"])
                    gate.acknowledge()
                case .stop:
                    finished = true
                }
            }

            func execute(_ effects: [RelayEffect]) async {
                for effect in effects {
                    switch effect {
                    case .publishResult(let record, let reference):
                        await produce(KafkaRecord(topic: configuration.resultsTopic, key: Array(record.eventID.utf8), value: record.encoded()),
                                      for: effect, onSuccess: .published(reference, device: record.token))
                    case .publishDeadLetter(let message, let error):
                        let source = RecordReference(message.topicPartition, message.offset)
                        await produce(KafkaRecord(topic: configuration.deadLetterTopic, key: message.key.map(Array.init), value: message.value.map(Array.init),
                                                  headers: deadLetterHeaders(error: error, source: source)),
                                      for: effect, onSuccess: .published(source, device: nil))
                    case .publishDeadLetterReference(let reference):
                        logger.warning("dead letter too large to publish; publishing a reference to the input", metadata: [
                            "source": "\(reference.source)", "size": "\(reference.size)"])
                        await produce(KafkaRecord(topic: configuration.deadLetterTopic, key: reference.key, value: reference.encoded(),
                                                  headers: deadLetterHeaders(error: reference.error, source: reference.source)
                                                    + [KafkaHeader(key: "x-dead-letter", value: "reference")]),
                                      for: effect, onSuccess: .published(reference.source, device: nil))
                    case .publishFailedToken(let record):
                        await produce(KafkaRecord(topic: configuration.failedTokensTopic, key: Array(record.token.utf8), value: record.encoded()),
                                      for: effect, onSuccess: .publishSucceeded(.failedTokens))
                    case .appendChangelog(let user, let record, let partition, let token):
                        // Reports of one partition come in append order, which is the order a user's events need.
                        await produce(KafkaRecord(topic: configuration.badgeStateTopic, partition: partition, key: Array(user.utf8), value: record.encoded()),
                                      for: effect, onSuccess: .changelogged(token))
                    case .writeProgress(let marker, let partition, let at):
                        await produce(progressRecord(marker, partition: partition, at: at), for: effect, onSuccess: .publishSucceeded(.progress))
                    case .send(let dispatch):
                        for lane in sends.send(dispatch, via: sender, answering: input) {
                            group.addTask { await SendLanes.run(lane, sender: self.sender, input: input) }
                        }
                    case .cancelSends(let partitions):
                        logger.warning("abandoning sends still in flight", metadata: ["partitions": "\(partitions)"])
                        sends.cancel(partitions, via: sender)
                    case .restore(let partition, let generation):
                        let badgeState = TopicPartition(configuration.badgeStateTopic, partition.partition)
                        group.addTask {
                            // The last value per key, decoded as it is read: users' states and the
                            // previous owner's progress marker. Only a complete read is used.
                            let changelog = LockedBox(RestoredChangelog())
                            do {
                                _ = try await reader.readToEnd([badgeState]) { message in
                                    guard let key = message.key else { return }
                                    changelog.withLock { $0.add(key: key, value: message.value) }
                                }
                                input.yield(.restored(partition, generation: generation, changelog.withLock { $0 }))
                            } catch {
                                input.yield(.restoreFailed(partition, generation: generation, "\(error)"))
                            }
                        }
                    case .loadDeviceRegistry:
                        group.addTask { await self.followDevices(devices, into: input) }
                    case .commit(let offsets):
                        group.addTask {
                            do {
                                try await consumer.commit(offsets)
                                input.yield(.committed(offsets))
                            } catch {
                                self.logger.warning("commit failed; retrying with the next one", metadata: ["error": "\(error)"])
                                input.yield(.committed(nil))
                            }
                        }
                    case .handOver(let value):
                        await handOver(value)
                    case .pause(let partitions):
                        consumer.pause(partitions)
                    case .resume(let partitions):
                        consumer.resume(partitions)
                    case .exit(_, let reason):
                        failure = reason
                        status.update { $0.failure = reason }
                        logger.critical("the relay cannot go on; exiting for a restart", metadata: ["reason": "\(reason)"])
                    }
                }
            }

            await execute(engine.start(now: now()))
            var batch: [Input] = []
            loop: while await input.take(into: &batch) {
                // Each input moved out (from the back of the reversed batch), not copied: a copy retains
                // what it carries, and the batch's next refill released it again.
                batch.reverse()
                while let next = batch.popLast() {
                    switch consume next {
                    case .consumed(var events):
                        // One clock reading for the batch: its events were fetched together.
                        let consumedAt = now()
                        var revoked = false
                        events.reverse()
                        while let event = events.popLast() {
                            switch event {
                            case .message(let message):
                                await execute(engine.consumed(message, now: consumedAt))
                            case .partitionsAssigned(let partitions):
                                logger.info("partitions assigned; restoring their badge state", metadata: ["partitions": "\(partitions.count)"])
                                await execute(engine.assigned(partitions))
                            case .partitionsRevoked(let revoke):
                                // Acknowledged by the hand-over: nothing new is sent for these partitions from
                                // now on, what is in flight finishes or is abandoned before the deadline.
                                revoked = true
                                await execute(engine.revokeRequested(revoke.partitions, now: now()))
                            }
                        }
                        if !revoked { gate.acknowledge() }
                    case .consumerFailed(let error):
                        await execute(engine.consumerFailed(error))
                    case .restored(let partition, let generation, let changelog):
                        await execute(engine.restored(partition, generation: generation, changelog: changelog, now: now()))
                        let marker = engine.previousProgress(of: partition)
                        logger.info("badge state restored", metadata: [
                            "partition": "\(partition)", "records": "\(changelog.records)",
                            "previous owner through": "\(marker.map { "\($0.through) (\($0.openCount) open)" } ?? "-")"])
                    case .restoreFailed(let partition, let generation, let error):
                        logger.error("badge state restore failed; reading it again", metadata: ["partition": "\(partition)", "error": "\(error)"])
                        await execute(engine.restoreFailed(partition, generation: generation, error: error, now: now()))
                    case .changelogged(let token):
                        await execute(engine.changelogged(token, now: now()))
                    case .sent(let dispatch, let outcome):
                        let answeredAt = now()
                        metrics.recordAnswer(latencyMilliseconds: answeredAt.epoch - dispatch.notification.payload.consumedAt, status: outcome.status, reason: outcome.reason)
                        await execute(engine.sent(dispatch, outcome: outcome, now: answeredAt))
                    case .published(let reference, let device):
                        await execute(engine.published(reference, device: device, now: now()))
                    case .publishSucceeded(let destination):
                        engine.publishSucceeded(destination)
                    case .publishFailed(let effect, let publishFailure):
                        logger.error("publishing failed; publishing again after a backoff", metadata: ["error": "\(publishFailure)"])
                        await execute(engine.publishFailed(effect, failure: publishFailure, now: now()))
                    case .committed(let offsets):
                        if let offsets { engine.committed(offsets) } else { engine.commitFailed() }
                    case .device(let key, let value, let window):
                        defer { window.release() }
                        if let rejection = engine.deviceRecord(key: key, value: value) {
                            logger.warning("unreadable device registration skipped", metadata: ["token": "\(APNsDeviceToken.shortened(hex: String(decoding: key ?? [], as: UTF8.self)))", "reason": "\(rejection.reason)"])
                        }
                    case .devicesLoaded:
                        await execute(engine.deviceRegistryLoaded(now: now()))
                        exportStatus()
                    case .devicesFailed(let error):
                        logger.error("device registrations unavailable; reading them again", metadata: ["error": "\(error)"])
                        await execute(engine.deviceRegistryFailed(error, now: now()))
                    case .deadTokens(let reports):
                        await execute(engine.tokensReportedDead(reports, reason: "Feedback"))
                    case .tick:
                        await execute(engine.tick(now: now()))
                        exportStatus()
                        ticks += 1
                        if ticks % 10 == 0 { metrics.recordLag(consumer.lag()) }
                    case .stop:
                        logger.info("stopping: finishing in-flight work", metadata: ["pending": "\(engine.pendingRecordCount)"])
                        await execute(engine.stopRequested(now: now()))
                    case .abandon:
                        logger.warning("abandoning: in-flight work is dropped and nothing is committed", metadata: ["pending": "\(engine.pendingRecordCount)"])
                        abandoned = true
                        break loop
                    }
                    if finished || failure != nil { break loop }
                }
            }
            exportStatus()

            // Nothing more is handled: release the event reader, close.
            gate.close()
            sends.cancelAll(via: sender)
            await consumer.close()
            await changelogProducer.close(timeout: abandoned || failure != nil ? .zero : .seconds(5))
            await producer.close(timeout: abandoned || failure != nil ? .zero : .seconds(5))
            group.cancelAll()
        }
        if let failure { throw RelayFailure(reason: failure) }
    }

    /// Most `push.devices` records on their way to the loop at once.
    static let deviceRecordsInFlight = 4_096

    /// Follows `push.devices` into the loop; a failure is an input: the engine reads it again.
    private func followDevices(_ devices: any DeviceRegistryFeed, into input: RelayInbox) async {
        let window = DeviceRecordWindow(records: Self.deviceRecordsInFlight)
        do {
            try await withTaskCancellationHandler {
                try await devices.follow {
                    input.yield(.devicesLoaded)
                } body: { message in
                    guard window.acquire() else { return }
                    input.yield(.device(key: message.key, value: message.value, window: window))
                }
            } onCancel: {
                window.close()
            }
        } catch {
            if !Task.isCancelled { input.yield(.devicesFailed("\(error)")) }
        }
        window.close()
    }
}
