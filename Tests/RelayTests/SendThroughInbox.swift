import APNs
import Kafka

@testable import Relay

/// Sends `pending` as the relay does (``PartitionSends``: a batch of one, submitted to `sender`, answered into an
/// inbox) and waits for its outcome.
func sendThroughInbox(_ sender: any NotificationSending, _ pending: PendingNotification) async -> APNsOutcome {
    let inbox = RelayInbox()
    var sends = PartitionSends()
    let dispatch = DeviceDispatch(ticket: DispatchTicket(slot: 0, serial: 1),
                                  notification: DeviceNotification(token: pending.token, eventID: pending.eventID, badge: pending.badge,
                                                                   isBadgeOnly: false, payload: pending), attempt: 1)
    sends.send([dispatch], via: sender, answering: inbox)
    var batch = RelayInbox.Batch()
    while await inbox.take(into: &batch) {
        for input in batch { if case .sent(_, let outcome) = input { return outcome } }
    }
    return .abandoned(apnsID: pending.notification.apnsID)
}
