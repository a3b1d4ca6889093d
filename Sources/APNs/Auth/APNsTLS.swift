public import NIOSSL
import NIOCore

/// Builds the client TLS configuration: always verifies the server (system trust store plus `apns.ca_file`),
/// ALPN `h2`, and the client certificate for certificate auth.
public enum APNsTLS {
    /// Makes the configuration.
    public static func clientConfiguration(
        caFile: String?,
        clientCertificate: APNsClientCertificate?,
        applicationProtocols: [String] = ["h2"]
    ) -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        tls.certificateVerification = .fullVerification
        tls.trustRoots = .default
        if let caFile { tls.additionalTrustRoots = [.file(caFile)] }
        tls.applicationProtocols = applicationProtocols
        if let clientCertificate {
            tls.certificateChain = clientCertificate.chain.map { .certificate($0) }
            tls.privateKey = .privateKey(clientCertificate.privateKey)
        }
        return tls
    }
}

extension APNsEndpoint {
    /// Whether the host is an IP literal (no SNI; the certificate is checked against the IP).
    public var isIPAddress: Bool {
        (try? SocketAddress(ipAddress: host, port: 0)) != nil
    }
}
