/// Delivers one notification to APNs (or a stand-in) and reports the final outcome, after the
/// sender's own retries. The relay's per-device ordering relies on one call per token at a time.
public protocol NotificationSending: Sendable {
    func send(_ notification: PendingNotification) async -> SendOutcome
}
