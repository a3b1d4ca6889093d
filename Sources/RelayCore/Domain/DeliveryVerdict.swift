// What a result record says of APNs' final outcome: the one place where an `APNsOutcome` becomes the
// contract's status, reason and dead-token report.

public import APNsCore

extension APNsOutcome {
    /// The result's `reason` when no credential signs for the notification's topic.
    public static let noCredentialReason = "NoCredentialForTopic"

    /// The contract's status: `delivered`; `unregistered` for 410 and `rejected` for every other final
    /// refusal (token-dead ones also report the token dead); `expired` when its `apns-expiration` passed
    /// before it could be sent; `failed` when APNs stayed unusable (or no connection could be had) for
    /// `relay.max_retry_s`, or the request failed by itself `relay.max_attempts` times. An abandoned send
    /// (``isAbandoned``) has no result.
    public var deliveryStatus: DeliveryStatus {
        if case .failure(.expired) = lastAttempt { return .expired }
        switch classification {
        case .delivered: return .delivered
        case .tokenDead: return httpStatus == 410 ? .unregistered : .rejected
        case .permanent: return .rejected
        case .retryable: return .failed
        }
    }

    /// The result's `reason`: APNs' own, else the transport failure that ended the retries; none when delivered.
    public var resultReason: String? {
        switch lastAttempt {
        case .failure(.expired): return "apns-expiration passed before it could be sent"
        case .failure(.noCredential): return Self.noCredentialReason
        case .failure(let failure): return "\(failure)"
        case .response: return classification == .delivered ? nil : reason?.rawValue
        }
    }

    /// When the device token stopped being valid (epoch ms): APNs' timestamp, else `now`, for an outcome
    /// that says the token is dead; `nil` otherwise.
    public func tokenDeadSince(now: Int64) -> Int64? {
        classification == .tokenDead ? (timestamp ?? now) : nil
    }

    /// Delivered in the other environment than the one the notification was sent to: its token was
    /// registered (or given) in the wrong one.
    public var isDeliveredInOtherEnvironment: Bool { classification == .delivered && environment != nil }
}
