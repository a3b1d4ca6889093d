import Kafka
import Metrics

/// The relay's metrics through swift-metrics (exported as Prometheus by the CLI).
/// Counters move by the difference between two snapshots of the engine's counters.
struct RelayMetrics {
    private let consumed = Counter(label: "apns_relay_events_consumed_total")
    private let applied = Counter(label: "apns_relay_events_applied_total")
    private let duplicate = Counter(label: "apns_relay_events_duplicate_total")
    private let replayed = Counter(label: "apns_relay_events_replayed_total")
    private let late = Counter(label: "apns_relay_events_late_total")
    private let alreadyFinished = Counter(label: "apns_relay_records_already_finished_total")
    /// Event consumed → APNs answered (or gave up), per notification.
    private let answerLatency = Metrics.Timer(label: "apns_relay_event_to_answer_seconds", preferredDisplayUnit: .seconds)
    private let invalid = Counter(label: "apns_relay_events_invalid_total")
    private let gapsSkipped = Counter(label: "apns_relay_seq_gaps_skipped_total")
    private let deadLetters = Counter(label: "apns_relay_dead_letters_total")
    private let inFlight = Gauge(label: "apns_relay_records_in_flight")
    private let notificationsInFlight = Gauge(label: "apns_relay_notifications_in_flight")
    /// 1 while backpressure has the events partitions paused.
    private let paused = Gauge(label: "apns_relay_consumption_paused")
    private var notifications: [DeliveryStatus: Counter] = [:]
    private let publishFailures = Counter(label: "apns_relay_failures_total", dimensions: [("kind", "publish")])
    private let restoreFailures = Counter(label: "apns_relay_failures_total", dimensions: [("kind", "restore")])
    private let registryFailures = Counter(label: "apns_relay_failures_total", dimensions: [("kind", "device_registry")])

    init() {
        for status in DeliveryStatus.allCases {
            notifications[status] = Counter(label: "apns_relay_notifications_total", dimensions: [("status", status.rawValue)])
        }
    }

    func record(from old: RelayCounters, to new: RelayCounters, pendingRecords: Int, pendingNotifications: Int, isPaused: Bool) {
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
        inFlight.record(pendingRecords)
        notificationsInFlight.record(pendingNotifications)
        paused.record(isPaused ? 1 : 0)
    }

    /// APNs answered a notification `latencyMilliseconds` after its event was consumed.
    func recordAnswer(latencyMilliseconds: Int64, status: DeliveryStatus, reason: String?) {
        answerLatency.recordMilliseconds(max(0, latencyMilliseconds))
        if let reason {
            // APNs' reasons (and the transport's) are single words from a fixed set; anything else
            // (a local validation sentence) is folded into one value so the label stays bounded.
            let label = reason.count <= 40 && reason.allSatisfy({ $0.isLetter || $0.isNumber }) ? reason : "other"
            Counter(label: "apns_relay_notifications_by_reason_total", dimensions: [("status", status.rawValue), ("reason", label)]).increment()
        }
    }

    /// Consumer lag per assigned partition.
    func recordLag(_ lag: [TopicPartition: Int64]) {
        for (partition, behind) in lag {
            Gauge(label: "apns_relay_consumer_lag", dimensions: [("topic", partition.topic), ("partition", "\(partition.partition)")]).record(behind)
        }
    }
}
