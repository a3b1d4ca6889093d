// How each APNs answer or failure is treated: final, or retried and how.

/// Why a notification is sent again: the `cause` of `apns_retries_total`.
public enum APNsRetryCause: String, Sendable, Hashable, CaseIterable {
    /// Its stream was above a GOAWAY's last-stream-id, or opened after one: never processed.
    case goAway = "goaway"
    /// Its stream was refused (RST_STREAM REFUSED_STREAM), could not be opened, or its connection closed before it
    /// was written: never processed.
    case refused
    /// 500 InternalServerError, 503 ServiceUnavailable or Shutdown, any other 5xx.
    case serverError = "5xx"
    /// 429 TooManyRequests (the token is sent to too often) or TooManyProviderTokenUpdates.
    case tooManyRequests = "429"
    /// The connection was lost with the request on it, no answer came within the request timeout, or 400
    /// IdleTimeout.
    case connection
    /// 403 ExpiredProviderToken.
    case expiredProviderToken = "expired_provider_token"
    /// The request's own failure: its stream reset with an error, an answer without a status. The only cause that
    /// counts against ``APNsRetryPolicy/maxAttempts``.
    case stream
}

/// What the policy does with one kind of answer: the columns of the table in docs/APNS.md.
public enum APNsRetryRule: String, Sendable, Hashable, CaseIterable {
    /// The outcome is final.
    case final
    /// Sent again at once, and not an attempt: APNs never processed it.
    case retryNow = "retry now"
    /// Sent again after the backoff (never before a `Retry-After`).
    case retryAfterBackoff = "retry after backoff"
    /// The connection is taken out of rotation and the notification sent again at once on another.
    case retryOnAnotherConnection = "retry on another connection"
    /// The team's provider token is renewed, then the notification is sent again.
    case renewCredential = "renew credential, then retry"
}

/// How the policy treats one answer or failure, whatever the notification's history.
public struct APNsRetryTreatment: Sendable, Hashable {
    /// What is done.
    public var rule: APNsRetryRule
    /// The retry's cause (`nil` when final).
    public var cause: APNsRetryCause?
    /// Whether APNs may have processed the request (it counts in ``APNsOutcome/attempts``).
    public var processed: Bool
    /// Whether the send counts against ``APNsRetryPolicy/maxAttempts``.
    public var countsAgainstMaxAttempts: Bool

    /// Creates a treatment.
    public init(_ rule: APNsRetryRule, cause: APNsRetryCause? = nil, processed: Bool = true, countsAgainstMaxAttempts: Bool = false) {
        self.rule = rule
        self.cause = cause
        self.processed = processed
        self.countsAgainstMaxAttempts = countsAgainstMaxAttempts
    }

    package static let final = APNsRetryTreatment(.final)
    package static let notSent = APNsRetryTreatment(.final, processed: false)
}

/// The retry table of docs/APNS.md ("Retries"): how each answer or failure is treated, whatever the
/// notification's history. ``APNsRetryStateMachine`` (in APNs) applies it with a clock.
public enum APNsRetryTable {
    /// The table: how an attempt's result is treated.
    public static func treatment(of result: APNsAttemptResult) -> APNsRetryTreatment {
        switch result {
        case .response(let response):
            return treatment(of: response)
        case .failure(let failure):
            switch failure {
            case .refused: return APNsRetryTreatment(.retryNow, cause: .refused, processed: false)
            case .goingAway: return APNsRetryTreatment(.retryOnAnotherConnection, cause: .goAway, processed: false)
            case .connectionLost, .deadlineExceeded: return APNsRetryTreatment(.retryAfterBackoff, cause: .connection)
            case .streamError: return APNsRetryTreatment(.retryAfterBackoff, cause: .stream, countsAgainstMaxAttempts: true)
            case .noConnection, .expired, .cancelled, .overloaded, .shuttingDown, .noCredential: return .notSent
            }
        }
    }

    /// The table: how an answer is treated (by its reason first, then its status).
    public static func treatment(of response: APNsResponse) -> APNsRetryTreatment {
        if let legacyStatus = response.legacyStatus {
            // The binary interface answers only final statuses; what it dropped comes back as `refused`.
            return legacyStatus.classification == .retryable
                ? APNsRetryTreatment(.retryAfterBackoff, cause: .stream, countsAgainstMaxAttempts: true) : .final
        }
        switch response.reason {
        case .expiredProviderToken?: return APNsRetryTreatment(.renewCredential, cause: .expiredProviderToken)
        case .idleTimeout?: return APNsRetryTreatment(.retryOnAnotherConnection, cause: .connection)
        // The server answering is shutting down: another connection reaches another one.
        case .shutdown?: return APNsRetryTreatment(.retryOnAnotherConnection, cause: .serverError)
        default: break
        }
        switch response.status {
        case 429: return APNsRetryTreatment(.retryAfterBackoff, cause: .tooManyRequests)
        case 500...599: return APNsRetryTreatment(.retryAfterBackoff, cause: .serverError)
        default: return .final
        }
    }
}
