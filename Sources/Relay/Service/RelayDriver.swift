import APNs
import DequeModule
import Foundation
import Kafka
import Logging
import NIOCore
import Tracing
import RelayCore

/// The relay's one loop: takes the inputs from the inbox, hands each to the engine and performs
/// the effects the engine answers. Nothing here decides anything; nothing here waits for Kafka or
/// APNs inside the loop: every answer comes back as an input.
struct RelayDriver {
    /// How the loop ended.
    enum Ending: Sendable, Equatable {
        /// The graceful stop's hand-over is over (`handedOver`: every step of it done).
        case stopped(handedOver: Bool)
        /// ``RelayService/abandon()`` (tests): dropped as a crash would.
        case abandoned
        /// The engine gave up, asking for exit `code`.
        case failed(String, code: Int32)
    }

    let configuration: RelayServiceConfiguration
    let clients: RelayKafkaClients
    let sender: any NotificationSending
    let input: RelayInbox
    private let batches: ConsumedBatchGate
    let status: RelayStatus
    let logger: Logger
    var engine: RelayEngine
    var sends = PartitionSends()
    /// Sends the engine asked for while the inbox's batch is handled: started together at its end
    /// (or before an effect that acts on sends), in one call to the sender.
    var dispatches: [DeviceDispatch<PendingNotification>] = []
    /// Records the engine asked for, until produced, then until their delivery reports come back.
    var outbox = RecordOutbox()
    /// The effects of the input being handled, for the inputs that come per record or notification: emptied after each,
    /// its storage kept (``executeEffects(in:)``).
    var effects: [RelayEffect] = []
    /// Revokes the consumer handed over, until the engine acknowledges them.
    var revokes: [UInt64: KafkaRevoke] = [:]
    /// The relay's transactions (`kafka.transactions: on`), `nil` without.
    var transactions: RelayTransactions?
    /// The relay's transactional producer, once made and initialised (`kafka.transactions: on`).
    var transactionalProducer: (any RelayTransactionalProducer)?
    /// Revokes whose hand-over is done, waiting for their partitions' writes to commit before they are acknowledged.
    var revokesCommitting: [UInt64] = []
    /// Transactions failed since the last commit: a replay that fails too starts its partitions again.
    var transactionFailuresInARow = 0
    /// When the first of them failed: past `relay.failure_timeout_s` without a commit, the relay gives up.
    var transactionsFailingSince: ContinuousClock.Instant?
    /// The consumer's lost assignments the engine has been told of (``RelayEventConsumer/membershipLosses``): a
    /// transaction built with fewer than the consumer has counted when its offsets are sent may hold writes for
    /// partitions that are another member's.
    var membershipLossesHandled = 0
    /// The spans of traced events (`tracing.otlp_endpoint`); `nil` when tracing is off.
    var spans: RelaySpans?
    /// When the interval last started a commit.
    var transactionsCommittedAt = ContinuousClock.now
    let metrics = RelayMetrics()
    private var reportedCounters = RelayCounters()
    private var ticks = 0
    /// The sender's streams the engine was last told of.
    private var senderStreams: Int?
    var ending: Ending?
    /// When the stop was asked for: its budget (`shutdownTimeout`) counts from here.
    private var stopAskedAt: ContinuousClock.Instant?
    private var failureLog = RepeatedFailureLog()
    // Deadlines run on the monotonic clock (a wall-clock step must not skip or hold a seq gap);
    // records carry wall-clock timestamps.
    private let monotonicOrigin = ContinuousClock.now

    init(configuration: RelayServiceConfiguration, clients: RelayKafkaClients, sender: any NotificationSending, input: RelayInbox,
         batches: ConsumedBatchGate, status: RelayStatus, tracer: RelayTracer?, logger: Logger) {
        self.configuration = configuration
        self.clients = clients
        self.sender = sender
        self.input = input
        self.batches = batches
        self.status = status
        self.logger = logger
        self.engine = RelayEngine(configuration: configuration.resolvedEngine(jitterSeed: UInt64.random(in: 0...UInt64.max)))
        self.transactions = clients.transactionalProducer == nil ? nil : RelayTransactions()
        self.spans = tracer.map {
            RelaySpans(tracer: $0.tracer, followsParentSampling: $0.followsParentSampling, resultsTopic: configuration.resultsTopic,
                       deadLetterTopic: configuration.deadLetterTopic, consumerGroup: configuration.groupID)
        }
    }

    /// Inputs handled on one clock reading (a fetch of events takes a reading of its own): the engine's time lags
    /// the clock by at most their handling (about a millisecond), far inside every deadline it keeps (the ownership
    /// lease has a third of the session timeout to spare; the sender checks the lease again on the clock as it writes).
    static let inputsPerClockReading = 128

    func now() -> RelayTime {
        RelayTime(monotonic: monotonic(ContinuousClock.now), epoch: Date.nowMilliseconds)
    }

    /// An instant as the engine's monotonic milliseconds.
    private func monotonic(_ instant: ContinuousClock.Instant) -> Int64 {
        (instant - monotonicOrigin).inMilliseconds
    }

    /// Runs until the stop's hand-over is over, the engine gives up, or the relay is abandoned;
    /// then closes the Kafka clients within what is left of the stop's budget.
    ///
    /// The inputs waiting are taken together, each handed to the engine without suspending, and
    /// the sends and records they bring go out together at the end of the batch.
    mutating func run(in group: inout DiscardingTaskGroup) async -> Ending {
        startTransactions(in: &group)
        execute(engine.start(now: now()), in: &group)
        await flush(in: &group)
        var batch = RelayInbox.Batch()
        loop: while await input.take(into: &batch) {
            // One clock reading per ``inputsPerClockReading`` inputs: they were all waiting when the loop
            // took them, and a notification brings several inputs, each of which would otherwise read two clocks.
            var takenAt = now()
            var sinceReading = 0
            // Each input moved out from the front, not copied: a copy retains what it carries, and the
            // batch's next refill released it again.
            while let next = batch.popFirst() {
                // What came before an abandon goes out first, as it would have one input at a time.
                if case .abandon = next { await flush(in: &group) }
                // A fetch of events takes a fresh reading (it may hold many events); the time never goes back.
                if sinceReading == Self.inputsPerClockReading || next.isFetch {
                    takenAt = now()
                    sinceReading = 0
                }
                sinceReading += 1
                handle(next, at: takenAt, in: &group)
                if ending != nil { break loop }
            }
            await flush(in: &group)
        }
        if ending != .abandoned { await flush(in: &group) }
        exportStatus()
        await close()
        return ending ?? .abandoned
    }

    // MARK: Inputs

    private mutating func handle(_ next: consuming RelayService.Input, at now: RelayTime, in group: inout DiscardingTaskGroup) {
        switch consume next {
        case .consumed(var events):
            events.reverse()
            while let event = events.popLast() {
                switch event {
                case .message(let message):
                    engine.consumed(message, now: now, into: &effects)
                    spans?.consumed(message)
                    executeEffects(in: &group)
                case .partitionsAssigned(let partitions, let at):
                    logger.info("partitions assigned; restoring their badge state", metadata: ["partitions": "\(partitions.count)"])
                    for partition in partitions { transactions?.own(partition) }
                    execute(engine.assigned(partitions, at: monotonic(at)), in: &group)
                case .partitionsRewound(let partitions):
                    logger.info("partitions read again from their committed offsets; restoring their badge state", metadata: ["partitions": "\(partitions)"])
                    for partition in partitions { transactions?.own(partition) }
                    execute(engine.assigned(partitions), in: &group)
                case .partitionsRevoked(let revoke):
                    revokes[revoke.id] = revoke
                    logger.info(revoke.lost ? "partitions lost: dropping their work at once" : "partitions revoked: handing them over",
                                metadata: ["partitions": "\(revoke.partitions)"])
                    execute(engine.revokeRequested(revoke.partitions, id: revoke.id, lost: revoke.lost,
                                                   consumerDeadline: revoke.deadline.map(monotonic), now: now), in: &group)
                    // Lost: the group gave them away already; nothing more of theirs goes into a transaction.
                    if revoke.lost {
                        membershipLossesHandled += 1
                        releaseTransactions(of: revoke.partitions)
                    }
                }
            }
            batches.handled()
        case .consumerFailed(let error, let exitCode):
            execute(engine.consumerFailed(error, exitCode: exitCode), in: &group)
        case .partitionCountObserved(let count):
            execute(engine.partitionCountObserved(count), in: &group)
        case .restored(let partition, let generation, let changelog):
            execute(engine.restored(partition, generation: generation, changelog: changelog, now: now), in: &group)
            let marker = engine.previousProgress(of: partition)
            logger.info("badge state restored", metadata: [
                "partition": "\(partition)", "records": "\(changelog.records)",
                "previous owner through": "\(marker.map { "\($0.through) (\($0.openCount) open)" } ?? "-")"])
        case .layoutProbed(let partition, let generation, let partitionZero):
            execute(engine.layoutProbed(partition, generation: generation, partitionZero: partitionZero, now: now), in: &group)
        case .restoreFailed(let partition, let generation, let error):
            logger.error("badge state restore failed; reading it again", metadata: ["partition": "\(partition)", "error": "\(error)"])
            execute(engine.restoreFailed(partition, generation: generation, error: error, now: now), in: &group)
        case .sent(let dispatch, let outcome):
            if !outcome.isAbandoned {
                metrics.recordAnswer(latencyMilliseconds: now.epoch - dispatch.notification.payload.consumedAt, status: outcome.deliveryStatus, reason: outcome.resultReason)
            }
            let answerSpan = spans?.answered(dispatch, outcome: outcome)
            engine.sent(dispatch, outcome: outcome, now: now, into: &effects)
            answerSpan?.end()
            executeEffects(in: &group)
        case .deliveries(let reports):
            for report in reports {
                guard let awaiting = outbox.reported(report.tag, failed: report.error != nil) else { continue }
                if let error = report.error {
                    publishFailed(awaiting.effect, PublishFailure(error), at: now, in: &group)
                } else if case .changelogged = awaiting.onSuccess, transactions != nil {
                    continue  // handed on by its transaction's commit (the commit flushed it: the report may come later)
                } else if awaiting.reportedBefore {
                    continue  // a replayed record: its first report told the engine
                } else {
                    delivered(awaiting.onSuccess, at: now, in: &group)
                }
            }
            if transactions != nil { commitTransaction(intervalPassed: false, in: &group) }
        case .publishFailed(let effect, let failure):
            publishFailed(effect, failure, at: now, in: &group)
        case .committed(let request, let offsets):
            execute(engine.committed(request: request, offsets: offsets, now: now), in: &group)
        case .transactionsReady(let producer):
            transactionsReady(producer, in: &group)
        case .transactionCommitted(let failure, let took):
            metrics.recordTransaction(succeeded: failure == nil, duration: took)
            transactionCommitted(failure: failure, now: now, in: &group)
        case .transactionRecovered(let replacement):
            transactionRecovered(replacement: replacement, in: &group)
        case .transactionsFailed(let reason):
            execute([.exit(code: 1, reason: reason)], in: &group)
        case .device(let key, let value, let window):
            defer { window.release() }
            if let rejection = engine.deviceRecord(key: key, value: value) {
                logger.warning("unreadable device registration skipped", metadata: [
                    "token": "\(APNsDeviceToken.shortened(hex: String(decoding: key ?? [], as: UTF8.self)))", "reason": "\(rejection.reason)"])
            }
        case .devicesLoaded:
            execute(engine.deviceRegistryLoaded(now: now), in: &group)
            exportStatus()
        case .devicesFailed(let error):
            logger.error("device registrations unavailable; reading them again", metadata: ["error": "\(error)"])
            execute(engine.deviceRegistryFailed(error, now: now), in: &group)
        case .deadTokens(let reports):
            execute(engine.tokensReportedDead(reports, reason: "Feedback"), in: &group)
        case .tick:
            spans?.endStale(at: .now)
            commitTransactionsDue(in: &group)
            followSenderStreams(at: now, in: &group)
            execute(engine.tick(now: now), in: &group)
            exportStatus()
            ticks += 1
            if ticks % 10 == 0 {
                metrics.recordLag(clients.consumer.lag())
                if let summary = failureLog.summary(at: ContinuousClock.now) {
                    logger.error("publishing kept failing", metadata: summary)
                }
            }
        case .stop(let askedAt):
            stopAskedAt = askedAt
            logger.info("stopping: handing the partitions over", metadata: ["pending": "\(engine.pendingRecordCount)"])
            execute(engine.stopRequested(now: now, askedAt: RelayTime(monotonic: monotonic(askedAt), epoch: now.epoch)), in: &group)
        case .abandon:
            logger.warning("abandoning: in-flight work is dropped and nothing is committed", metadata: ["pending": "\(engine.pendingRecordCount)"])
            ending = .abandoned
        }
    }

    /// Tells the engine when the sender's streams changed (connections opened, closed, or their peers' limits
    /// moved): its send window follows them. Read on every tick (they change with connections, seldom), under
    /// one lock per APNs pool.
    private mutating func followSenderStreams(at now: RelayTime, in group: inout DiscardingTaskGroup) {
        let streams = sender.streamCapacity
        guard streams != senderStreams else { return }
        senderStreams = streams
        execute(engine.senderStreamsChanged(streams, now: now), in: &group)
    }

    /// A produced record's delivery, told to the engine.
    private mutating func delivered(_ delivery: RelayService.Delivery, at now: RelayTime, in group: inout DiscardingTaskGroup) {
        switch delivery {
        case .changelogged(let token):
            spans?.applied(token)
            engine.changelogged(token, now: now, into: &effects)
            executeEffects(in: &group)
        case .published(let reference, let device):
            spans?.published(reference, device: device)
            execute(engine.published(reference, device: device, now: now), in: &group)
        case .publishSucceeded(let destination):
            engine.publishSucceeded(destination)
        case .progressStored(let handOver):
            execute(engine.progressStored(handOver: handOver, now: now), in: &group)
        case .layoutStored(let partition, let generation):
            execute(engine.layoutStored(partition, generation: generation, now: now), in: &group)
        }
    }

    private mutating func publishFailed(_ effect: RelayEffect, _ failure: PublishFailure, at now: RelayTime, in group: inout DiscardingTaskGroup) {
        if let line = failureLog.failed(effect.publishDestination, failure, at: ContinuousClock.now) {
            withEventTrace(effect.trace) { logger.error("publishing failed; publishing again after a backoff", metadata: line) }
        }
        execute(engine.publishFailed(effect, failure: failure, now: now), in: &group)
    }

    /// Metrics and status, on every tick rather than every input: per input they cost more than
    /// the work itself (a dozen metric updates and a status copy, six inputs per event).
    private mutating func exportStatus() {
        if engine.counters != reportedCounters {
            metrics.record(from: reportedCounters, to: engine.counters, pendingRecords: engine.pendingRecordCount,
                           pendingNotifications: engine.notificationsInFlight, isPaused: engine.isPaused,
                           readAheadRecords: engine.readAheadRecordCount)
            reportedCounters = engine.counters
        }
        // The values, not the engine: a closure capturing the engine copies it (a retain of each of its tables).
        let (pendingRecords, pendingNotifications, counters) = (engine.pendingRecordCount, engine.notificationsInFlight, engine.counters)
        let (partitionsRestored, devicesLoaded) = (engine.isRestored, engine.isDeviceRegistryLoaded)
        status.update {
            $0.pendingRecords = pendingRecords
            $0.pendingNotifications = pendingNotifications
            $0.counters = counters
            $0.partitionsRestored = partitionsRestored
            $0.devicesLoaded = devicesLoaded
        }
    }

    /// Nothing more is handled: sends end, the consumer leaves the group and the producers
    /// deliver what they hold, within what is left of the stop's budget. After a failure the producers
    /// close at once (a crash-only restart redoes what is unfinished) but the consumer still leaves, so
    /// the group moves the partitions now rather than after its session timeout; an abandon leaves
    /// nothing.
    private mutating func close() async {
        batches.close()
        sends.cancelAll(via: sender)
        spans?.endAll()
        // The engine's hand-over took at most 80% of the budget; closing gets what is left of 90%, the clients side by
        // side (one waiting on brokers that do not answer holds none of the others back); the rest is the other
        // services' and the process's exit. A failure counts its budget from now.
        let left = max(.zero, (stopAskedAt ?? .now) + configuration.shutdownTimeout * 0.9 - .now)
        let (graceful, leaving): (Bool, Duration) = switch ending {
        case .stopped: (true, left)
        case .failed: (false, left)
        case .abandoned, nil: (false, .zero)
        }
        let closing = closingTransactions(committing: graceful)
        await withDiscardingTaskGroup { group in
            group.addTask { [clients, logger] in
                if !(await clients.consumer.close(timeout: leaving)) {
                    logger.warning("the consumer did not leave the group in time; the group's session timeout will")
                }
            }
            let producing = graceful ? left : .zero
            if let closing { group.addTask { await closing(producing) } }
            for producer in [clients.forwardProducer, clients.changelogProducer, clients.producer] {
                group.addTask { await producer.close(timeout: producing) }
            }
        }
    }
}

extension RelayService.Input {
    /// Whether this is a fetch of events from the consumer.
    fileprivate var isFetch: Bool {
        if case .consumed = self { true } else { false }
    }
}
