import Metrics

/// The supervisor's counters and timer, made once: `apns_notifications_total{outcome}`, `apns_attempts_total`,
/// `apns_retries_total{cause}`, `apns_connections_{opened,closed}_total`, `apns_connect_failures_total`,
/// `apns_send_duration`, `apns_credential_refusals_total{reason}` (with the pool's gauge dimensions).
final class APNsSupervisorMetrics: Sendable {
    private let delivered = Counter(label: "apns_notifications_total", dimensions: [("outcome", "delivered")])
    private let permanent = Counter(label: "apns_notifications_total", dimensions: [("outcome", "permanent")])
    private let tokenDead = Counter(label: "apns_notifications_total", dimensions: [("outcome", "token_dead")])
    private let failed = Counter(label: "apns_notifications_total", dimensions: [("outcome", "failed")])
    private let expired = Counter(label: "apns_notifications_total", dimensions: [("outcome", "expired")])
    private let cancelled = Counter(label: "apns_notifications_total", dimensions: [("outcome", "cancelled")])
    let attempts = Counter(label: "apns_attempts_total")
    private let retries: [APNsRetryCause: Counter] = Dictionary(uniqueKeysWithValues: APNsRetryCause.allCases.map {
        ($0, Counter(label: "apns_retries_total", dimensions: [("cause", $0.rawValue)]))
    })
    let connectionsOpened = Counter(label: "apns_connections_opened_total")
    let connectFailures = Counter(label: "apns_connect_failures_total")
    let connectionsClosed = Counter(label: "apns_connections_closed_total")
    private let sendDuration = Metrics.Timer(label: "apns_send_duration")
    private let poolDimensions: [(String, String)]

    init(poolDimensions: [(String, String)]) {
        self.poolDimensions = poolDimensions
    }

    /// A send ended with `outcome` after its last attempt's `last`, `nanoseconds` after it began.
    func finished(_ outcome: APNsOutcome, last: APNsAttemptResult, nanoseconds: Int64) {
        switch (outcome.classification, last) {
        case (_, .failure(.expired)): expired.increment()
        case (_, .failure(.cancelled)): cancelled.increment()
        case (.delivered, _): delivered.increment()
        case (.permanent, _): permanent.increment()
        case (.tokenDead, _): tokenDead.increment()
        case (.retryable, _): failed.increment()
        }
        sendDuration.recordNanoseconds(max(0, nanoseconds))
    }

    func retried(_ cause: APNsRetryCause) { retries[cause]?.increment() }

    /// APNs refused the pool's credential for `reason` (rare: a configuration error).
    func credentialRefused(_ reason: String) {
        Counter(label: "apns_credential_refusals_total", dimensions: [("reason", reason)] + poolDimensions).increment()
    }
}
