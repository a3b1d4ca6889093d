/// Which APNs interface carries a notification; it decides the largest payload.
public enum APNsTransport: Sendable, Hashable {
    /// Apple's HTTP/2 provider API: 4,096 bytes, 5,120 for VoIP.
    case http2
    /// The legacy binary interface in one of its command formats: 256 bytes for the simple and
    /// enhanced formats, 2,048 for the framed one.
    case binary(APNsBinaryFormat)

    /// The largest payload, in bytes, for a notification of `pushType` on this transport.
    public func maximumPayloadSize(for pushType: APNsPushType) -> Int {
        switch self {
        case .http2: pushType.maximumPayloadSize
        case .binary(let format): format.maximumPayloadSize
        }
    }
}
