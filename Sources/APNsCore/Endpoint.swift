// Where an APNs connection goes.

/// Where to connect.
public struct APNsEndpoint: Sendable, Hashable, CustomStringConvertible {
    /// Host name or IP literal.
    public var host: String
    /// TCP port.
    public var port: Int

    /// Creates an endpoint.
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Apple's production host.
    public static let production = APNsEndpoint(host: "api.push.apple.com", port: 443)
    /// Apple's sandbox host.
    public static let sandbox = APNsEndpoint(host: "api.sandbox.push.apple.com", port: 443)
    /// Apple's production host for broadcast channel management.
    public static let productionManagement = APNsEndpoint(host: "api-manage-broadcast.push.apple.com", port: 2196)
    /// Apple's sandbox host for broadcast channel management.
    public static let sandboxManagement = APNsEndpoint(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195)

    /// Parses `host:port` (the `apns.endpoint` key).
    public init?(parsing string: String) {
        guard let colon = string.lastIndex(of: ":"), let port = Int(string[string.index(after: colon)...]),
            port > 0, port < 65536
        else { return nil }
        var host = String(string[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        self.init(host: host, port: port)
    }

    public var description: String { "\(host):\(port)" }
}
