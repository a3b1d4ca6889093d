public import APNs
import Foundation

/// Sends through the APNs connection supervisors (which retry up to `relay.max_attempts`), one per
/// APNs environment, and maps the final outcome onto the contract's result statuses.
///
/// Each notification goes to the supervisor of its ``PendingNotification/environment``: a sandbox
/// token sent to the production host is answered 400 BadDeviceToken, and would be reported dead.
public struct APNsSupervisorSender: NotificationSending {
    /// Carries notifications for Apple's production environment.
    public let production: APNsSupervisor
    /// Carries notifications for Apple's sandbox (development) environment.
    public let sandbox: APNsSupervisor
    /// Epoch milliseconds, for token-dead answers without APNs' own timestamp.
    private let now: @Sendable () -> Int64

    /// Sends every notification, whatever its environment, through `supervisor` (one endpoint for both).
    public init(supervisor: APNsSupervisor) {
        self.init(production: supervisor, sandbox: supervisor)
    }

    /// Sends every notification through `supervisor`, with `now` as the clock for token-dead answers.
    public init(supervisor: APNsSupervisor, now: @escaping @Sendable () -> Int64) {
        self.init(production: supervisor, sandbox: supervisor, now: now)
    }

    /// Sends each notification through the supervisor of its environment.
    public init(production: APNsSupervisor, sandbox: APNsSupervisor) {
        self.init(production: production, sandbox: sandbox, now: { Date.nowMilliseconds })
    }

    /// Sends each notification through the supervisor of its environment, with `now` as the clock for token-dead answers.
    public init(production: APNsSupervisor, sandbox: APNsSupervisor, now: @escaping @Sendable () -> Int64) {
        self.production = production
        self.sandbox = sandbox
        self.now = now
    }

    /// The supervisor that carries notifications for `environment`.
    public func supervisor(for environment: APNsEnvironment) -> APNsSupervisor {
        switch environment {
        case .production: production
        case .sandbox: sandbox
        }
    }

    public func send(_ pending: PendingNotification) async -> SendOutcome {
        Self.outcome(of: await supervisor(for: pending.environment).send(pending.notification), now: now())
    }

    /// Contract statuses: `unregistered` for 410, `rejected` for every other permanent answer
    /// (token-dead ones also report the token dead), `expired` when its `apns-expiration` passed before it could
    /// be sent, `failed` when retries ran out or no connection could be had within `relay.max_retry_s`, and `failed`
    /// with reason `cancelled` when the send's task was cancelled.
    static func outcome(of outcome: APNsOutcome, now: Int64) -> SendOutcome {
        switch outcome.lastAttempt {
        case .failure(.expired):
            return SendOutcome(status: .expired, httpStatus: nil, reason: "apns-expiration passed before it could be sent", attempts: outcome.attempts)
        case .failure(.cancelled):
            // Abandoned by the caller, not failed by APNs: the relay discards results of cancelled sends.
            return SendOutcome(status: .failed, httpStatus: nil, reason: "cancelled", attempts: outcome.attempts)
        default:
            break
        }
        let reason = outcome.reason?.rawValue ?? transportReason(outcome.lastAttempt)
        switch outcome.classification {
        case .delivered:
            return SendOutcome(status: .delivered, httpStatus: outcome.httpStatus, reason: nil, attempts: outcome.attempts)
        case .tokenDead:
            let status: DeliveryStatus = outcome.httpStatus == 410 ? .unregistered : .rejected
            return SendOutcome(status: status, httpStatus: outcome.httpStatus, reason: reason, attempts: outcome.attempts,
                               tokenDeadSince: outcome.timestamp ?? now)
        case .permanent:
            return SendOutcome(status: .rejected, httpStatus: outcome.httpStatus, reason: reason, attempts: outcome.attempts)
        case .retryable:
            return SendOutcome(status: .failed, httpStatus: outcome.httpStatus, reason: reason, attempts: outcome.attempts)
        }
    }

    private static func transportReason(_ attempt: APNsAttemptResult) -> String? {
        if case .failure(let failure) = attempt { return "\(failure)" }
        return nil
    }
}
