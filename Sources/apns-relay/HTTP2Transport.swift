import APNs
import APNsNGHTTP2
import Logging

extension RelayConfiguration.APNsSettings {
    /// The factory of provider API (HTTP/2) connections for `environment` with `credential`, on the client
    /// `apns.http2_client` names. Both clients share the connector (TLS, proxy), the credential's JWTs and the
    /// mapping of APNs' answers; they differ in the HTTP/2 framing underneath.
    func http2ConnectionFactory(for environment: APNsEnvironment, credential: APNsCredential, logger: Logger) throws -> any APNsConnectionFactory {
        let configuration = APNsHTTP2ConnectionConfiguration(endpoint: http2Endpoint(for: environment), credential: credential, caFile: caFile, proxy: proxy)
        switch http2Client {
        case .nio: return try APNsHTTP2ConnectionFactory(configuration: configuration, logger: logger)
        case .nghttp2: return try APNsNGHTTP2ConnectionFactory(configuration: configuration, logger: logger)
        }
    }
}
