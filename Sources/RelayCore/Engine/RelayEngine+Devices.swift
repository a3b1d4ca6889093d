// The engine's device registrations: `push.devices` records and tokens reported dead.

import APNsCore
import KafkaCore

extension RelayEngine {
    /// A `push.devices` record.
    package mutating func deviceRecord(key: ArraySlice<UInt8>?, value: ArraySlice<UInt8>?) -> EventRejection? {
        guard let key else { return EventRejection(field: "key", reason: "key is missing (the device token)") }
        return registry.apply(key: String(decoding: key, as: UTF8.self), value: value)
    }

    /// The legacy feedback service reported tokens dead: each registration made before its `since` is removed
    /// (later events no longer target it) and a failed-token record with `reason` is published. A token registered
    /// again at or after its `since` is alive: it keeps its registration and gets no record.
    package mutating func tokensReportedDead(_ reports: [DeadTokenReport], reason: String) -> [RelayEffect] {
        reports.compactMap { report in
            let token = report.token.lowercased()
            let verdict = registry.reportDead(token: token, since: report.since)
            guard let record = failedTokenRecord(verdict, token: token, reason: reason, since: report.since, eventID: nil, notification: nil) else {
                counters.deadReportsOfTokensRegisteredAgain[.feedback, default: 0] += 1
                return nil
            }
            return .publishFailedToken(record, source: nil)
        }
    }

    /// The failed-token record a dead-token report publishes: the removed registration's, or (for a token no
    /// registration names) the notification's facts; `nil` when the token was registered again since (alive).
    func failedTokenRecord(_ verdict: DeadTokenVerdict, token: String, reason: String, since: Int64, eventID: String?,
                           notification: PendingNotification?) -> FailedTokenRecord? {
        switch verdict {
        case .registeredAgain:
            return nil
        case .removed(let registration):
            return FailedTokenRecord(registration: registration, reason: reason, since: since, eventID: eventID, trace: notification?.trace ?? .none)
        case .unregistered:
            return FailedTokenRecord(token: token, user: notification?.user, topic: notification?.notification.topic,
                                     environment: notification?.environment, reason: reason, since: since, eventID: eventID,
                                     trace: notification?.trace ?? .none)
        }
    }
}
