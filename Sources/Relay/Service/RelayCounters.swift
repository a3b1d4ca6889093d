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
}
