public import Foundation

/// The `reason` strings Apple documents for the HTTP/2 provider API, including those of broadcast sends and
/// channel management (`MissingChannelId` ... `MissingPushType`).
public enum APNsReason: Sendable, Hashable, RawRepresentable, CaseIterable {
    // Equality and hashing are synthesised from the cases (not from `rawValue`).
    case badCollapseId, badDeviceToken, badExpirationDate, badMessageId, badPriority, badTopic
    case deviceTokenNotForTopic, duplicateHeaders, idleTimeout, invalidPushType, missingDeviceToken
    case missingTopic, payloadEmpty, topicDisallowed, badCertificate, badCertificateEnvironment
    case expiredProviderToken, forbidden, invalidProviderToken, missingProviderToken
    case unrelatedKeyIdInToken, badEnvironmentKeyIdInToken, badPath, methodNotAllowed, expiredToken
    /// `BadEnvironmentKeyInToken`: the same refusal as ``badEnvironmentKeyIdInToken`` in the spelling that APNs has
    /// also been seen to send (APNSwift #229); both are understood, each kept as Apple sent it.
    case badEnvironmentKeyInToken
    case unregistered, payloadTooLarge, tooManyProviderTokenUpdates, tooManyRequests
    case internalServerError, serviceUnavailable, shutdown
    case missingChannelId, badChannelId, channelNotRegistered, cannotCreateChannelConfig, featureNotEnabled, missingPushType
    /// A reason Apple did not document (kept verbatim).
    case other(String)

    public static let allCases: [APNsReason] = [
        .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
        .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
        .missingTopic, .payloadEmpty, .topicDisallowed, .badCertificate, .badCertificateEnvironment,
        .expiredProviderToken, .forbidden, .invalidProviderToken, .missingProviderToken,
        .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken, .badPath, .methodNotAllowed,
        .expiredToken, .unregistered, .payloadTooLarge, .tooManyProviderTokenUpdates, .tooManyRequests,
        .internalServerError, .serviceUnavailable, .shutdown,
        .missingChannelId, .badChannelId, .channelNotRegistered, .cannotCreateChannelConfig, .featureNotEnabled, .missingPushType,
    ]

    private static let byName: [String: APNsReason] = Dictionary(uniqueKeysWithValues: allCases.map { ($0.rawValue, $0) })

    public init(rawValue: String) {
        self = Self.byName[rawValue] ?? .other(rawValue)
    }

    public var rawValue: String {
        switch self {
        case .badCollapseId: return "BadCollapseId"
        case .badDeviceToken: return "BadDeviceToken"
        case .badExpirationDate: return "BadExpirationDate"
        case .badMessageId: return "BadMessageId"
        case .badPriority: return "BadPriority"
        case .badTopic: return "BadTopic"
        case .deviceTokenNotForTopic: return "DeviceTokenNotForTopic"
        case .duplicateHeaders: return "DuplicateHeaders"
        case .idleTimeout: return "IdleTimeout"
        case .invalidPushType: return "InvalidPushType"
        case .missingDeviceToken: return "MissingDeviceToken"
        case .missingTopic: return "MissingTopic"
        case .payloadEmpty: return "PayloadEmpty"
        case .topicDisallowed: return "TopicDisallowed"
        case .badCertificate: return "BadCertificate"
        case .badCertificateEnvironment: return "BadCertificateEnvironment"
        case .expiredProviderToken: return "ExpiredProviderToken"
        case .forbidden: return "Forbidden"
        case .invalidProviderToken: return "InvalidProviderToken"
        case .missingProviderToken: return "MissingProviderToken"
        case .unrelatedKeyIdInToken: return "UnrelatedKeyIdInToken"
        case .badEnvironmentKeyIdInToken: return "BadEnvironmentKeyIdInToken"
        case .badEnvironmentKeyInToken: return "BadEnvironmentKeyInToken"
        case .badPath: return "BadPath"
        case .methodNotAllowed: return "MethodNotAllowed"
        case .expiredToken: return "ExpiredToken"
        case .unregistered: return "Unregistered"
        case .payloadTooLarge: return "PayloadTooLarge"
        case .tooManyProviderTokenUpdates: return "TooManyProviderTokenUpdates"
        case .tooManyRequests: return "TooManyRequests"
        case .internalServerError: return "InternalServerError"
        case .serviceUnavailable: return "ServiceUnavailable"
        case .shutdown: return "Shutdown"
        case .missingChannelId: return "MissingChannelId"
        case .badChannelId: return "BadChannelId"
        case .channelNotRegistered: return "ChannelNotRegistered"
        case .cannotCreateChannelConfig: return "CannotCreateChannelConfig"
        case .featureNotEnabled: return "FeatureNotEnabled"
        case .missingPushType: return "MissingPushType"
        case .other(let value): return value
        }
    }

    /// The HTTP status Apple answers with this reason.
    public var httpStatus: Int {
        switch self {
        case .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden,
            .invalidProviderToken, .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken,
            .badEnvironmentKeyInToken:
            return 403
        case .badPath, .channelNotRegistered: return 404
        case .methodNotAllowed: return 405
        case .expiredToken, .unregistered: return 410
        case .payloadTooLarge: return 413
        case .tooManyProviderTokenUpdates, .tooManyRequests: return 429
        case .internalServerError: return 500
        case .serviceUnavailable, .shutdown: return 503
        default: return 400
        }
    }
}

/// How the relay must treat an outcome.
public enum APNsOutcomeClass: String, Sendable, Hashable {
    /// APNs accepted the notification (200).
    case delivered
    /// APNs rejected it for good; sending it again will not help.
    case permanent
    /// The device token is dead (410 Unregistered / ExpiredToken, 400 BadDeviceToken, 400 DeviceTokenNotForTopic).
    case tokenDead = "token_dead"
    /// Try again (429, 5xx, ExpiredProviderToken, IdleTimeout, connection loss, deadline); as a final outcome:
    /// the retries ended without a final answer (`failed`).
    case retryable
}

/// One HTTP/2 response from APNs.
public struct APNsResponse: Sendable, Hashable {
    /// The HTTP status.
    public var status: Int
    /// The `apns-id` response header, when present.
    public var apnsID: UUID?
    /// The `reason` of an error body.
    public var reason: APNsReason?
    /// The `timestamp` of a 410 body (epoch milliseconds).
    public var timestamp: Int64?
    /// The `Retry-After` header in seconds, when present.
    public var retryAfterSeconds: Int?
    /// The status of the legacy binary interface this answer stands for (`nil` on HTTP/2); it decides the
    /// classification, and `status` is then not an HTTP status Apple sent.
    public var legacyStatus: APNsBinaryStatus?
    /// The `apns-unique-id` header: Apple's development environment names the notification's entry in the Push
    /// Notifications Console's delivery log with it. Kept when it is printable ASCII of at most
    /// ``maximumUniqueIDLength`` bytes (Apple's is a UUID).
    public var uniqueID: String?

    /// The longest `apns-unique-id` kept: it goes into every result record, so an unexpected value stays small.
    public static let maximumUniqueIDLength = 128

    /// Creates a response.
    public init(status: Int, apnsID: UUID? = nil, reason: APNsReason? = nil, timestamp: Int64? = nil, retryAfterSeconds: Int? = nil,
                legacyStatus: APNsBinaryStatus? = nil, uniqueID: String? = nil) {
        self.status = status
        self.apnsID = apnsID
        self.reason = reason
        self.timestamp = timestamp
        self.retryAfterSeconds = retryAfterSeconds
        self.legacyStatus = legacyStatus
        self.uniqueID = uniqueID
    }

    /// Parses a response from its status, headers and body (`{"reason":"...","timestamp":N}`).
    public static func parse(status: Int, apnsIDHeader: String?, retryAfterHeader: String?, uniqueIDHeader: String? = nil,
                             body: [UInt8]) -> APNsResponse {
        parse(status: status, apnsID: apnsIDHeader.flatMap { APNsUUIDText.parse($0) }, retryAfterHeader: retryAfterHeader,
              uniqueIDHeader: uniqueIDHeader, body: body)
    }

    /// Parses a response whose `apns-id` header was already read as a UUID (`nil`: absent, or not a UUID), as
    /// ``parse(status:apnsIDHeader:retryAfterHeader:uniqueIDHeader:body:)`` does the rest.
    public static func parse(status: Int, apnsID: UUID?, retryAfterHeader: String?, uniqueIDHeader: String? = nil,
                             body: [UInt8]) -> APNsResponse {
        var response = APNsResponse(status: status)
        response.apnsID = apnsID
        response.uniqueID = uniqueIDHeader.flatMap { value in
            let bytes = value.utf8
            return !bytes.isEmpty && bytes.count <= maximumUniqueIDLength && bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) ? value : nil
        }
        response.retryAfterSeconds = retryAfterHeader.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        if !body.isEmpty,
            let object = try? JSONSerialization.jsonObject(with: Data(body), options: []) as? [String: Any]
        {
            if let reason = object["reason"] as? String { response.reason = APNsReason(rawValue: reason) }
            if let number = object["timestamp"] as? NSNumber { response.timestamp = number.int64Value }
        }
        if status != 200 && response.reason == nil {
            response.reason = .other("HTTP \(status)")
        }
        return response
    }

    /// The classification of this response: what ``APNsRetryTable/treatment(of:)-(APNsResponse)`` retries is
    /// `retryable` (`failed` once the retries end), the rest is final.
    public var classification: APNsOutcomeClass {
        if let legacyStatus { return legacyStatus.classification }
        switch status {
        case 200: return .delivered
        case 410: return .tokenDead
        case 400 where reason == .badDeviceToken || reason == .deviceTokenNotForTopic: return .tokenDead
        default: return APNsRetryTable.treatment(of: self).rule == .final ? .permanent : .retryable
        }
    }
}

/// Why an attempt did not produce a response.
public enum APNsTransportFailure: Sendable, Hashable {
    /// The server refused the stream before processing it (RST_STREAM REFUSED_STREAM), the stream could not be
    /// opened, or its connection closed before it was written: the notification was certainly not delivered.
    case refused
    /// The stream was above the last-stream-id of the connection's GOAWAY, or opened after it: certainly not
    /// delivered, and the connection takes no more streams.
    case goingAway
    /// The connection was lost while the stream was in flight; it may or may not have been delivered.
    case connectionLost
    /// No response within the per-request deadline.
    case deadlineExceeded
    /// No connection could be had before the notification's deadline (``APNsRetryPolicy/maxRetryDuration``): APNs
    /// was unreachable. Waiting for a connection spends no attempt.
    case noConnection
    /// The notification's `apns-expiration` passed before it could be sent.
    case expired
    /// The task calling `send` was cancelled before APNs gave a final answer: the caller abandoned the
    /// notification. A cancelled send is never (re)tried; it may or may not have reached APNs if it was on the wire.
    case cancelled
    /// The supervisor's queue is full (backpressure); try again later.
    case overloaded
    /// The supervisor is shutting down and does not accept or retry work.
    case shuttingDown
    /// No credential of the sender's signs for the notification's topic: it was never sent.
    case noCredential
    /// The stream failed for another reason.
    case streamError(String)
}

/// The result of one attempt on one connection.
public enum APNsAttemptResult: Sendable, Hashable {
    /// APNs answered.
    case response(APNsResponse)
    /// The attempt failed in transport.
    case failure(APNsTransportFailure)

    /// The classification of this attempt.
    public var classification: APNsOutcomeClass {
        switch self {
        case .response(let response): return response.classification
        case .failure(.shuttingDown), .failure(.noCredential): return .permanent
        // Past its expiration a notification may not be sent, so no retry can help.
        case .failure(.expired): return .permanent
        case .failure: return .retryable
        }
    }
}

/// The final outcome of `send`: what the relay publishes as a result.
///
/// `classification == .retryable` on a final outcome means the retries ended without a final answer (the
/// notification's deadline, `relay.max_retry_s` after it was handed over, passed with APNs still unusable; or
/// `relay.max_attempts` failures of the request itself), no connection could be had before that deadline
/// (`.failure(.noConnection)`), or the supervisor is overloaded: the relay reports it as `failed`. `.failure(.expired)` (classified `.permanent`) means the notification's `apns-expiration` passed
/// before it could be sent: the relay reports it as `expired`.
public struct APNsOutcome: Sendable, Hashable {
    /// The classification.
    public var classification: APNsOutcomeClass
    /// The last attempt's result.
    public var lastAttempt: APNsAttemptResult
    /// How many attempts were sent (0 when the notification never reached a connection).
    public var attempts: Int
    /// The notification's `apns-id`.
    public var apnsID: UUID
    /// The environment that gave this outcome when it is not the notification's own: refused there with
    /// `BadDeviceToken`, the notification was sent once more in this one (`attempts` counts both).
    public var environment: APNsEnvironment?

    /// Creates an outcome.
    public init(classification: APNsOutcomeClass, lastAttempt: APNsAttemptResult, attempts: Int, apnsID: UUID,
                environment: APNsEnvironment? = nil) {
        self.classification = classification
        self.lastAttempt = lastAttempt
        self.attempts = attempts
        self.apnsID = apnsID
        self.environment = environment
    }

    /// The outcome of a last attempt (classified as the attempt is).
    public init(_ lastAttempt: APNsAttemptResult, attempts: Int, apnsID: UUID) {
        self.init(classification: lastAttempt.classification, lastAttempt: lastAttempt, attempts: attempts, apnsID: apnsID)
    }

    /// A send its caller gave up before APNs gave a final answer (`.failure(.cancelled)`).
    public static func abandoned(apnsID: UUID, attempts: Int = 0) -> APNsOutcome {
        APNsOutcome(.failure(.cancelled), attempts: attempts, apnsID: apnsID)
    }

    /// Whether the caller gave the send up (it was cancelled): not an outcome for the device.
    public var isAbandoned: Bool { lastAttempt == .failure(.cancelled) }

    /// The HTTP status of the last response, if there was one (never for the legacy binary interface).
    public var httpStatus: Int? {
        if case .response(let response) = lastAttempt, response.legacyStatus == nil { return response.status }
        return nil
    }

    /// The legacy binary status of the last response, if there was one.
    public var legacyStatus: APNsBinaryStatus? {
        if case .response(let response) = lastAttempt { return response.legacyStatus }
        return nil
    }

    /// The APNs reason of the last response, if there was one.
    public var reason: APNsReason? {
        if case .response(let response) = lastAttempt { return response.reason }
        return nil
    }

    /// The 410 timestamp (epoch ms), if there was one.
    public var timestamp: Int64? {
        if case .response(let response) = lastAttempt { return response.timestamp }
        return nil
    }

    /// The last response's `apns-unique-id` (Apple's development environment), if there was one.
    public var uniqueID: String? {
        if case .response(let response) = lastAttempt { return response.uniqueID }
        return nil
    }

    /// Whether the last response refused the device token as one APNs does not know here: 400 `BadDeviceToken`, or
    /// the legacy interface's status 8 (invalid token). Apple answers so for a token of the other environment.
    public var isBadDeviceToken: Bool {
        guard case .response(let response) = lastAttempt else { return false }
        if let legacyStatus = response.legacyStatus { return legacyStatus == .invalidToken }
        return response.status == 400 && response.reason == .badDeviceToken
    }
}
