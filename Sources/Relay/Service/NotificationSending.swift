public import APNs

/// Delivers one notification to APNs (or a stand-in) and reports the final outcome, after the
/// sender's own retries. The relay's per-device ordering relies on one call per token at a time.
public protocol NotificationSending: Sendable {
    /// Sends `notification` and returns its final outcome. Cancelling the task abandons the send
    /// (its outcome is then ``APNsOutcome/isAbandoned``).
    func send(_ notification: PendingNotification) async -> APNsOutcome

    /// Starts `notification`'s send with no task of its own (written at once, or queued for a
    /// stream), and returns `true`; returns `false`, having done nothing, when it cannot (then the
    /// relay calls ``send(_:)`` in a task). Once started, `completion` is called exactly once, from
    /// any thread (it must be quick), with the final outcome or with the rest of the send to run in
    /// a task. Once `cancellation` is cancelled the send is written no more.
    ///
    /// Most notifications thus cross no task, continuation or stream of their own on the way to
    /// APNs and back. The default starts nothing.
    func sendWithoutTask(_ notification: PendingNotification, cancellation: APNsSendCancellation,
                         completion: @escaping @Sendable (StartedSend) -> Void) -> Bool

    /// Ends the sends started with `cancellation` that still wait for a stream: each completes
    /// as abandoned, unsent. The default has none.
    func cancelQueued(_ cancellation: APNsSendCancellation)
}

extension NotificationSending {
    public func sendWithoutTask(_ notification: PendingNotification, cancellation: APNsSendCancellation,
                                completion: @escaping @Sendable (StartedSend) -> Void) -> Bool { false }

    public func cancelQueued(_ cancellation: APNsSendCancellation) {}
}

/// How a send begun by ``NotificationSending/sendWithoutTask(_:cancellation:completion:)`` goes on.
public enum StartedSend: Sendable {
    /// It is over.
    case finished(APNsOutcome)
    /// It goes on (a retry, after its backoff): run this in a task; cancelling the task abandons the send.
    case unfinished(@Sendable () async -> APNsOutcome)
}
