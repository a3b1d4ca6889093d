import Kafka
import Metrics
import RelayCore

/// The relay's metrics through swift-metrics (exported as Prometheus by the CLI).
/// Counters move by the difference between two snapshots of the engine's counters.
struct RelayMetrics {
    /// Where the metrics go: the process's metrics system, unless a test gives its own.
    private let factory: any MetricsFactory
    private let consumed: Counter
    private let applied: Counter
    private let duplicate: Counter
    private let replayed: Counter
    private let late: Counter
    private let alreadyFinished: Counter
    /// Event consumed → APNs answered (or gave up), per notification.
    private let answerLatency: Metrics.Timer
    private let invalid: Counter
    private let gapsSkipped: Counter
    private let deadLetters: Counter
    private let inFlight: Gauge
    private let notificationsInFlight: Gauge
    /// 1 while backpressure has the events partitions paused.
    private let paused: Gauge
    /// Records read ahead: set aside before the sequencer, or waiting for room in the window.
    private let readAhead: Gauge
    private var notifications: [DeliveryStatus: Counter] = [:]
    /// Dead-token reports ignored because the token was registered again since, by who reported it.
    private var deadReportsIgnored: [DeadTokenSource: Counter] = [:]
    /// Forwarded events their home recognised as repeats (or copies its source forwards again) and finished unsent.
    private let forwardsRepeated: Counter
    private let publishFailures: Counter
    private let restoreFailures: Counter
    private let registryFailures: Counter
    /// Events partitions this replica owns (those whose lag it knows).
    private let partitionsAssigned: Gauge
    /// Partition transactions that committed, and those that failed (`kafka.transactions: on`).
    private let transactionsCommitted: Counter
    private let transactionsFailed: Counter
    /// How long a partition's commit took, from its start to its end (begin, offsets, flush, commit).
    private let transactionCommitDuration: Metrics.Timer
    /// The partitions whose lag was last exported: one given up since reads 0 from then on.
    private let lagExported = LockedBox<Set<TopicPartition>>([])

    init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
        consumed = Counter(label: "apns_relay_events_consumed_total", factory: factory)
        applied = Counter(label: "apns_relay_events_applied_total", factory: factory)
        duplicate = Counter(label: "apns_relay_events_duplicate_total", factory: factory)
        replayed = Counter(label: "apns_relay_events_replayed_total", factory: factory)
        late = Counter(label: "apns_relay_events_late_total", factory: factory)
        alreadyFinished = Counter(label: "apns_relay_records_already_finished_total", factory: factory)
        answerLatency = Metrics.Timer(label: "apns_relay_event_to_answer_seconds", preferredDisplayUnit: .seconds, factory: factory)
        invalid = Counter(label: "apns_relay_events_invalid_total", factory: factory)
        gapsSkipped = Counter(label: "apns_relay_seq_gaps_skipped_total", factory: factory)
        deadLetters = Counter(label: "apns_relay_dead_letters_total", factory: factory)
        inFlight = Gauge(label: "apns_relay_records_in_flight", factory: factory)
        notificationsInFlight = Gauge(label: "apns_relay_notifications_in_flight", factory: factory)
        paused = Gauge(label: "apns_relay_consumption_paused", factory: factory)
        readAhead = Gauge(label: "apns_relay_records_read_ahead", factory: factory)
        forwardsRepeated = Counter(label: "apns_relay_forwards_repeated_total", factory: factory)
        publishFailures = Counter(label: "apns_relay_failures_total", dimensions: [("kind", "publish")], factory: factory)
        restoreFailures = Counter(label: "apns_relay_failures_total", dimensions: [("kind", "restore")], factory: factory)
        registryFailures = Counter(label: "apns_relay_failures_total", dimensions: [("kind", "device_registry")], factory: factory)
        partitionsAssigned = Gauge(label: "apns_relay_partitions_assigned", factory: factory)
        transactionsCommitted = Counter(label: "apns_relay_kafka_transactions_total", dimensions: [("outcome", "committed")], factory: factory)
        transactionsFailed = Counter(label: "apns_relay_kafka_transactions_total", dimensions: [("outcome", "failed")], factory: factory)
        transactionCommitDuration = Metrics.Timer(label: "apns_relay_kafka_transaction_commit_seconds", preferredDisplayUnit: .seconds, factory: factory)
        for source in DeadTokenSource.allCases {
            deadReportsIgnored[source] = Counter(label: "apns_relay_dead_token_reports_ignored_total", dimensions: [("source", source.rawValue)],
                                                 factory: factory)
        }
        for status in DeliveryStatus.allCases {
            notifications[status] = Counter(label: "apns_relay_notifications_total", dimensions: [("status", status.rawValue)], factory: factory)
        }
    }

    func record(from old: RelayCounters, to new: RelayCounters, pendingRecords: Int, pendingNotifications: Int, isPaused: Bool,
                readAheadRecords: Int = 0) {
        consumed.increment(by: new.eventsConsumed - old.eventsConsumed)
        applied.increment(by: new.eventsApplied - old.eventsApplied)
        duplicate.increment(by: new.eventsDuplicate - old.eventsDuplicate)
        replayed.increment(by: new.eventsReplayed - old.eventsReplayed)
        invalid.increment(by: new.eventsInvalid - old.eventsInvalid)
        gapsSkipped.increment(by: new.seqGapsSkipped - old.seqGapsSkipped)
        late.increment(by: new.eventsLate - old.eventsLate)
        alreadyFinished.increment(by: new.recordsAlreadyFinished - old.recordsAlreadyFinished)
        deadLetters.increment(by: new.deadLetters - old.deadLetters)
        publishFailures.increment(by: new.publishFailures - old.publishFailures)
        restoreFailures.increment(by: new.restoreFailures - old.restoreFailures)
        registryFailures.increment(by: new.deviceRegistryFailures - old.deviceRegistryFailures)
        for (status, count) in new.notificationsByStatus {
            let delta = count - (old.notificationsByStatus[status] ?? 0)
            if delta > 0 { notifications[status]?.increment(by: delta) }
        }
        forwardsRepeated.increment(by: new.forwardsRepeated - old.forwardsRepeated)
        for (partition, count) in new.eventsForwarded {
            // Per source partition: where the producers that key events wrongly write (one label per partition).
            let delta = count - (old.eventsForwarded[partition] ?? 0)
            if delta > 0 {
                Counter(label: "apns_relay_events_forwarded_total", dimensions: [("partition", "\(partition)")], factory: factory).increment(by: delta)
            }
        }
        for (key, count) in new.rateLimitWaits {
            let delta = count - (old.rateLimitWaits[key] ?? 0)
            if delta > 0 {
                Counter(label: "apns_relay_rate_limit_waits_total", dimensions: [("topic", key.topic), ("push_type", key.pushType.rawValue)],
                        factory: factory).increment(by: delta)
            }
        }
        for (source, count) in new.deadReportsOfTokensRegisteredAgain {
            let delta = count - (old.deadReportsOfTokensRegisteredAgain[source] ?? 0)
            if delta > 0 { deadReportsIgnored[source]?.increment(by: delta) }
        }
        inFlight.record(pendingRecords)
        notificationsInFlight.record(pendingNotifications)
        paused.record(isPaused ? 1 : 0)
        readAhead.record(readAheadRecords)
    }

    /// APNs answered a notification `latencyMilliseconds` after its event was consumed.
    /// A partition's commit ended after `duration`.
    /// The open transaction broke before its commit (a record refused, the producer fenced).
    func recordBrokenTransaction() {
        transactionsFailed.increment()
    }

    func recordTransaction(succeeded: Bool, duration: Duration) {
        (succeeded ? transactionsCommitted : transactionsFailed).increment()
        transactionCommitDuration.recordNanoseconds(duration.inNanoseconds)
    }

    func recordAnswer(latencyMilliseconds: Int64, status: DeliveryStatus, reason: String?) {
        answerLatency.recordMilliseconds(max(0, latencyMilliseconds))
        if let reason {
            // APNs' reasons (and the transport's) are single words from a fixed set; anything else
            // (a local validation sentence) is folded into one value so the label stays bounded.
            let label = reason.count <= 40 && reason.allSatisfy({ $0.isLetter || $0.isNumber }) ? reason : "other"
            Counter(label: "apns_relay_notifications_by_reason_total", dimensions: [("status", status.rawValue), ("reason", label)], factory: factory).increment()
        }
    }

    /// Consumer lag per assigned partition, and how many there are. A partition this replica gave up reads 0: a gauge
    /// keeps its last value, and its new owner reports it now (a sum over replicas would count it twice).
    func recordLag(_ lag: [TopicPartition: Int64]) {
        let givenUp = lagExported.withLock { exported in
            defer { exported = Set(lag.keys) }
            return exported.subtracting(lag.keys)
        }
        for (partition, behind) in lag.map({ ($0.key, $0.value) }) + givenUp.map({ ($0, 0) }) {
            Gauge(label: "apns_relay_consumer_lag", dimensions: [("topic", partition.topic), ("partition", "\(partition.partition)")], factory: factory)
                .record(behind)
        }
        partitionsAssigned.record(lag.count)
    }
}
