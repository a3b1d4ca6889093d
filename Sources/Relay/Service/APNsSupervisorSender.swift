public import APNs
import Foundation

/// Sends through the APNs connection supervisor (which retries up to `relay.max_attempts`)
/// and maps its final outcome onto the contract's result statuses.
public struct APNsSupervisorSender: NotificationSending {
    public let supervisor: APNsSupervisor
    /// Epoch milliseconds, for token-dead answers without APNs' own timestamp.
    private let now: @Sendable () -> Int64

    public init(supervisor: APNsSupervisor) {
        self.init(supervisor: supervisor, now: { Date.nowMilliseconds })
    }

    public init(supervisor: APNsSupervisor, now: @escaping @Sendable () -> Int64) {
        self.supervisor = supervisor
        self.now = now
    }

    public func send(_ pending: PendingNotification) async -> SendOutcome {
        let rendered = pending.rendered
        guard let topic = rendered.topic else {
            return SendOutcome(status: .invalid, httpStatus: nil, reason: "no apns-topic: set apns.topic in the event, the device registration or the configuration", attempts: 0)
        }
        let notification: APNsNotification
        do {
            notification = try APNsNotification(
                tokenHex: rendered.token, topic: topic, pushType: rendered.pushType.rawValue, priority: rendered.priority,
                expiration: rendered.expiration, collapseID: rendered.collapseID, apnsID: rendered.apnsID, payload: rendered.payload)
        } catch {
            return SendOutcome(status: .invalid, httpStatus: nil, reason: error.description, attempts: 0)
        }
        return Self.outcome(of: await supervisor.send(notification), now: now())
    }

    /// Contract statuses: `unregistered` for 410, `rejected` for every other permanent answer
    /// (token-dead ones also report the token dead), `failed` when retries ran out.
    static func outcome(of outcome: APNsOutcome, now: Int64) -> SendOutcome {
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
