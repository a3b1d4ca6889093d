/// A token a service outside the send path (the legacy feedback service) reported dead.
public struct DeadTokenReport: Sendable, Hashable {
    /// The token (hex).
    public var token: String
    /// When it died, epoch milliseconds.
    public var since: Int64

    /// Creates a report.
    public init(token: String, since: Int64) {
        self.token = token
        self.since = since
    }
}
