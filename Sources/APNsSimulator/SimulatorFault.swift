public import NIOCore

/// A fault the simulator injects into matching requests.
public enum SimulatorFault: Sendable, Hashable {
    /// Answer with this status and reason (for example 429 TooManyRequests, 500 InternalServerError, 503 ServiceUnavailable).
    case status(Int, reason: String)
    /// Answer 410 Unregistered with this timestamp (epoch ms).
    case unregistered(timestamp: Int64)
    /// Answer 400 BadDeviceToken.
    case badDeviceToken
    /// Hold the request this long before handling it (a reset stream is then not recorded).
    case delay(TimeAmount)
    /// Accept the request, then send GOAWAY (last-stream-id = the highest stream seen) and close once the
    /// streams up to it are answered. Later streams are refused and never recorded.
    case goAway
    /// Accept the request, then send GOAWAY (NO_ERROR) naming it as the last stream, as APNs does when it
    /// rotates a connection: streams the client opened after it are refused unprocessed (RST_STREAM
    /// REFUSED_STREAM, never recorded), and the connection closes once the streams up to it are answered.
    case goAwayAfterStream
    /// Close the TCP connection abruptly; the request is not recorded.
    case closeConnection
    /// Stop reading the connection: no responses, no PING acknowledgements.
    case freeze
    /// Accept the request, then announce a new SETTINGS_MAX_CONCURRENT_STREAMS on every connection.
    case setMaxConcurrentStreams(Int)
    /// HTTP/2: answer 503 Shutdown. Binary gateway: process the notification, answer error 10 naming it (the last
    /// one processed), ignore what follows and close.
    case shutdown
    /// Binary gateway only: answer the error response with this status for the notification, ignore what follows
    /// and close (HTTP/2 ignores it).
    case binaryStatus(UInt8)
    /// HTTP/2: answer 429 TooManyRequests, with `Retry-After: N` when `retryAfterSeconds` is given.
    case tooManyRequests(retryAfterSeconds: Int?)
    /// HTTP/2: answer 403 ExpiredProviderToken.
    case expiredProviderToken
    /// HTTP/2: reset the request's stream with INTERNAL_ERROR (the request is not recorded).
    case resetStream
}

/// How an unresponsive APNs host behaves towards new connections (``APNsSimulator/silence(_:)``).
public enum SimulatorSilence: Sendable, Hashable {
    /// Accepts TCP connections and never answers the TLS handshake.
    case beforeTLS
    /// Completes TLS (ALPN h2) and never speaks HTTP/2: no SETTINGS, no answer.
    case afterTLS
}
