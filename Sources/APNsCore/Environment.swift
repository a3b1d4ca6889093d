/// Apple's two APNs environments. A device token belongs to one: a sandbox token sent to the
/// production host is answered 400 BadDeviceToken.
public enum APNsEnvironment: String, Sendable, Hashable, CaseIterable {
    /// Apple's production or sandbox (development) hosts.
    case production, sandbox

    /// Apple's HTTP/2 provider host for this environment.
    public var endpoint: APNsEndpoint {
        switch self {
        case .production: .production
        case .sandbox: .sandbox
        }
    }

    /// Apple's broadcast channel management host for this environment (its own host and port; sends of
    /// broadcasts go to ``endpoint``).
    public var managementEndpoint: APNsEndpoint {
        switch self {
        case .production: .productionManagement
        case .sandbox: .sandboxManagement
        }
    }
}
