// The legacy binary interface's formats and statuses (the model; the wire encoding is in APNs).

/// The notification formats of Apple's legacy binary interface (`apns.binary_command`).
public enum APNsBinaryFormat: Int, Sendable, Hashable, CaseIterable {
    /// Command 0: token and payload only; no identifier, so errors cannot be attributed.
    case simple = 0
    /// Command 1: adds a 4-byte identifier and a 4-byte expiry.
    case enhanced = 1
    /// Command 2: a frame of typed items (token, payload, identifier, expiration, priority).
    case framed = 2

    /// The largest payload this format carries, in bytes.
    public var maximumPayloadSize: Int { self == .framed ? 2_048 : 256 }

    /// The only token length the binary interface accepts, in bytes.
    public static let tokenLength = 32
}

/// The status byte of a legacy error response (`8 | status | identifier`).
public enum APNsBinaryStatus: Sendable, Hashable, RawRepresentable, CaseIterable {
    case noErrors, processingError, missingDeviceToken, missingTopic, missingPayload, invalidTokenSize
    case invalidTopicSize, invalidPayloadSize, invalidToken, shutdown, unknown
    /// A status Apple never documented (kept verbatim).
    case other(UInt8)

    public static let allCases: [APNsBinaryStatus] = [
        .noErrors, .processingError, .missingDeviceToken, .missingTopic, .missingPayload, .invalidTokenSize,
        .invalidTopicSize, .invalidPayloadSize, .invalidToken, .shutdown, .unknown,
    ]

    public init(rawValue: UInt8) {
        switch rawValue {
        case 0: self = .noErrors
        case 1: self = .processingError
        case 2: self = .missingDeviceToken
        case 3: self = .missingTopic
        case 4: self = .missingPayload
        case 5: self = .invalidTokenSize
        case 6: self = .invalidTopicSize
        case 7: self = .invalidPayloadSize
        case 8: self = .invalidToken
        case 10: self = .shutdown
        case 255: self = .unknown
        default: self = .other(rawValue)
        }
    }

    public var rawValue: UInt8 {
        switch self {
        case .noErrors: return 0
        case .processingError: return 1
        case .missingDeviceToken: return 2
        case .missingTopic: return 3
        case .missingPayload: return 4
        case .invalidTokenSize: return 5
        case .invalidTopicSize: return 6
        case .invalidPayloadSize: return 7
        case .invalidToken: return 8
        case .shutdown: return 10
        case .unknown: return 255
        case .other(let value): return value
        }
    }

    /// The legacy status name, used as the `reason` of results and failed-token records.
    public var name: String {
        switch self {
        case .noErrors: return "NoErrors"
        case .processingError: return "ProcessingError"
        case .missingDeviceToken: return "MissingDeviceToken"
        case .missingTopic: return "MissingTopic"
        case .missingPayload: return "MissingPayload"
        case .invalidTokenSize: return "InvalidTokenSize"
        case .invalidTopicSize: return "InvalidTopicSize"
        case .invalidPayloadSize: return "InvalidPayloadSize"
        case .invalidToken: return "InvalidToken"
        case .shutdown: return "Shutdown"
        case .unknown: return "Unknown"
        case .other(let value): return "Status\(value)"
        }
    }

    /// How the notification the status names is treated: 8 means the token is dead; 10 (shutdown) and 0 mean
    /// the named notification was the last one processed (the ones after it are resent); every other status
    /// rejects the notification for good.
    public var classification: APNsOutcomeClass {
        switch self {
        case .invalidToken: return .tokenDead
        case .noErrors, .shutdown: return .delivered
        default: return .permanent
        }
    }

    /// The answer as an ``APNsResponse`` (status 200 for processed notifications, 400 otherwise; `http_status`
    /// is not reported for the binary transport).
    public var response: APNsResponse {
        let processed = classification == .delivered
        return APNsResponse(
            status: processed ? 200 : 400, reason: processed ? nil : APNsReason(rawValue: name), legacyStatus: self)
    }
}
