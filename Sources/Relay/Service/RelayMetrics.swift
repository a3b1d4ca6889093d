import Kafka
import Metrics

/// The relay's metrics through swift-metrics (exported as Prometheus by the CLI).
/// Counters move by the difference between two snapshots of the engine's counters.
struct RelayMetrics {
    private let consumed = Counter(label: "apns_relay_events_consumed_total")
    private let applied = Counter(label: "apns_relay_events_applied_total")
    private let duplicate = Counter(label: "apns_relay_events_duplicate_total")
    private let invalid = Counter(label: "apns_relay_events_invalid_total")
    private let gapsSkipped = Counter(label: "apns_relay_seq_gaps_skipped_total")
    private let deadLetters = Counter(label: "apns_relay_dead_letters_total")
    private let inFlight = Gauge(label: "apns_relay_records_in_flight")
    private var notifications: [DeliveryStatus: Counter] = [:]

    init() {
        for status in DeliveryStatus.allCases {
            notifications[status] = Counter(label: "apns_relay_notifications_total", dimensions: [("status", status.rawValue)])
        }
    }

    func record(from old: RelayCounters, to new: RelayCounters, pendingRecords: Int) {
        consumed.increment(by: new.eventsConsumed - old.eventsConsumed)
        applied.increment(by: new.eventsApplied - old.eventsApplied)
        duplicate.increment(by: new.eventsDuplicate - old.eventsDuplicate)
        invalid.increment(by: new.eventsInvalid - old.eventsInvalid)
        gapsSkipped.increment(by: Int(new.seqGapsSkipped - old.seqGapsSkipped))
        deadLetters.increment(by: new.deadLetters - old.deadLetters)
        for (status, count) in new.notificationsByStatus {
            let delta = count - (old.notificationsByStatus[status] ?? 0)
            if delta > 0 { notifications[status]?.increment(by: delta) }
        }
        inFlight.record(pendingRecords)
    }

    /// Consumer lag per assigned partition.
    func recordLag(_ lag: [TopicPartition: Int64]) {
        for (partition, behind) in lag {
            Gauge(label: "apns_relay_consumer_lag", dimensions: [("topic", partition.topic), ("partition", "\(partition.partition)")]).record(behind)
        }
    }
}
