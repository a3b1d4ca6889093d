/// Settings of a supervisor.
public struct APNsSupervisorConfiguration: Sendable {
    /// The pool.
    public var pool: APNsPoolConfiguration
    /// Retries.
    public var retry: APNsRetryPolicy
    /// The per-request deadline (time for one attempt's response).
    public var requestTimeout: Duration
    /// Extra dimensions of the `apns_connections{state}` gauge. A gauge holds the last value recorded, so
    /// supervisors side by side in one process (one per APNs environment) each need their own series.
    public var connectionGaugeDimensions: [(String, String)]

    /// Creates settings.
    public init(pool: APNsPoolConfiguration = .init(), retry: APNsRetryPolicy = .init(), requestTimeout: Duration = .seconds(10),
                connectionGaugeDimensions: [(String, String)] = []) {
        self.pool = pool
        self.retry = retry
        self.requestTimeout = requestTimeout
        self.connectionGaugeDimensions = connectionGaugeDimensions
    }
}
