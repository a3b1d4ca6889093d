/// Counters the service exports as metrics.
public struct RelayCounters: Sendable, Equatable {
    public var eventsConsumed = 0
    public var eventsApplied = 0
    public var eventsDuplicate = 0
    /// Redelivered events a previous owner had applied but maybe not sent (after a crash), sent
    /// again with the user's current badge.
    public var eventsReplayed = 0
    /// Events whose seq had been skipped, applied late at arrival.
    public var eventsLate = 0
    /// Redelivered records the previous owner's progress marker shows finished: skipped.
    public var recordsAlreadyFinished = 0
    public var eventsInvalid = 0
    /// Gaps skipped after their reorder window (one per gap, however many seqs it spans: a
    /// producer's seq can jump by up to 2^63, which no counter should add).
    public var seqGapsSkipped = 0
    public var deadLetters = 0
    /// Publishes that failed (each is published again until the failure timeout).
    public var publishFailures = 0
    /// Badge-state restores that failed (each is read again).
    public var restoreFailures = 0
    /// Reads of `push.devices` that failed (each is read again).
    public var deviceRegistryFailures = 0
    public var notificationsByStatus: [DeliveryStatus: Int] = [:]
    /// Events read away from their user's home partition and forwarded there, by the partition they were read on.
    public var eventsForwarded: [Int32: Int] = [:]
    /// Forwarded events that repeat a forward already handled (their forwarder crashed before storing its progress):
    /// finished without a result.
    public var forwardsRepeated = 0
    /// Partitions refused because their badge state was placed for another layout.
    public var layoutRefusals = 0
    /// Reports of a dead token (APNs' 410, the feedback service) whose token was registered again since the
    /// report's time: alive, kept, not published as failed.
    public var deadReportsOfTokensRegisteredAgain: [DeadTokenSource: Int] = [:]
    /// Times an event's notifications waited for the send-rate cap of their app and push type (`relay.rate_limits`).
    package var rateLimitWaits: [RateLimitKey: Int] = [:]

    /// All zero.
    package init() {}
}

/// Who reported a token dead.
public enum DeadTokenSource: String, Sendable, Hashable, CaseIterable {
    /// APNs answered 410 `Unregistered` (HTTP/2).
    case apns
    /// The legacy feedback service listed it.
    case feedback
}
