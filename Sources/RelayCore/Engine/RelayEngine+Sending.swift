// The engine's sends: APNs' answers and the sender's room (the window itself is SendWindow).

package import APNsCore
import KafkaCore

extension RelayEngine {
    /// APNs answered a dispatched notification; the effects are appended to `effects`.
    package mutating func sent(_ dispatch: DeviceDispatch<PendingNotification>, outcome: APNsOutcome, now: RelayTime,
                               into effects: inout [RelayEffect]) {
        let notification = dispatch.notification.payload
        if outcome.isAbandoned, isRunning, standing(of: notification.record) == .serving {
            // Refused once the lease lapsed (or cancelled for it): still this relay's to send, in
            // its place (the device's slot stays taken), once the lease is confirmed.
            effects += window.handedBack(dispatch, maySend: maySend(now: now)).map(RelayEffect.send)
            return
        }
        // Not owned: the partition moved, or was given up and assigned here again (the answer is the earlier assignment's).
        let owned = modify(notification.record) { $0.notifications = max(0, $0.notifications - 1) } != nil
        // A broadcast's channel is no device token: it is never reported dead. A token registered again since the
        // moment APNs gives is alive: its registration stays and no failed-token record goes out.
        var dead: (since: Int64, verdict: DeadTokenVerdict)?
        if let since = outcome.tokenDeadSince(now: now.epoch), notification.notification.token != nil {
            dead = (since, registry.reportDead(token: notification.token, since: since))
        }
        // An abandoned send has no result: its record stays unfinished, for the partition's next owner.
        if owned && !outcome.isAbandoned {
            let status = outcome.deliveryStatus
            counters.notificationsByStatus[status, default: 0] += 1
            var record = result(for: notification, status: status, outcome: outcome, now: now)
            record.unregisteredSince = dead == nil ? nil : outcome.timestamp
            record.registeredAgain = dead.map { !$0.verdict.isDead } ?? false
            effects.append(publish(record, for: notification.record))
            if outcome.isDeliveredInOtherEnvironment { effects.append(.publishWrongEnvironment(wrongEnvironmentRecord(for: notification, outcome: outcome, now: now), source: notification.record.partition)) }
        }
        if let dead {
            let reason = outcome.resultReason ?? "Unregistered"
            if let record = failedTokenRecord(dead.verdict, token: notification.token, reason: reason, since: dead.since,
                                              eventID: notification.eventID, notification: notification) {
                effects.append(.publishFailedToken(record, source: notification.record.partition))
            } else {
                counters.deadReportsOfTokensRegisteredAgain[.apns, default: 0] += 1
            }
        }
        let maySend = maySend(now: now)
        throughWindow(now: now, into: &effects) { window, step in window.answered(dispatch, maySend: maySend, into: &step) }
        leftWindow(dispatch.notification)
        resumeFanOuts(now: now, into: &effects)
        effects += advanceHandOvers(now: now)
    }

    /// The sender can have `streams` sends on the wire at once now (`nil`: unknown): the send window follows it.
    package mutating func senderStreamsChanged(_ streams: Int?, now: RelayTime) -> [RelayEffect] {
        window.senderStreamsChanged(streams, maySend: maySend(now: now)).map(RelayEffect.send)
    }
}
