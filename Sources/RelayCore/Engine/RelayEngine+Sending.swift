// The engine's sends: the send window's steps, APNs' answers and the sender's room (the window itself is SendWindow).

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

    /// Appends the effects of a send window's step to `effects`: the sends, and a `superseded` result for each
    /// replaced notification.
    mutating func appendEffects(of step: SendWindow<PendingNotification>.Step, now: RelayTime, into effects: inout [RelayEffect]) {
        for dispatch in step.send { effects.append(.send(dispatch)) }
        for notification in step.superseded {
            let pending = notification.payload
            leftWindow(notification)
            counters.notificationsByStatus[.superseded, default: 0] += 1
            modify(pending.record) { $0.notifications -= 1 }
            effects.append(publish(result(for: pending, status: .superseded, outcome: nil, now: now), for: pending.record))
        }
    }

    /// Runs `operation` on the send window with the engine's kept step and appends the step's effects: a notification's
    /// way through the window allocates no step of its own (a step holds three arrays).
    mutating func throughWindow(now: RelayTime, into effects: inout [RelayEffect],
                                _ operation: (inout SendWindow<PendingNotification>, inout SendWindow<PendingNotification>.Step) -> Void) {
        var step = SendWindow<PendingNotification>.Step()
        swap(&step, &windowStep)
        operation(&window, &step)
        appendEffects(of: step, now: now, into: &effects)
        step.removeAll()
        swap(&step, &windowStep)
    }

    /// Hands waiting sends to the driver while the window has room and the lease holds.
    mutating func releaseReadySends(now: RelayTime) -> [RelayEffect] {
        window.release(maySend: maySend(now: now)).map(RelayEffect.send)
    }
}
