public import NIOCore

extension APNsSupervisor {
    /// Submits `notification` (``submit(_:)``) and waits for its final outcome. Never throws.
    ///
    /// Cancelling the calling task ends the send promptly with `.failure(.cancelled)` (classified `.retryable`): one
    /// still waiting, for a stream or its backoff, ends unsent; one on the wire is waited for (at most
    /// `requestTimeout`; the connection cannot take it back), a final answer (delivered, rejected, token dead) kept as
    /// it is, a retryable one ending cancelled. Nothing is written after the task's cancellation, or `cancellation`'s.
    public func send(_ notification: APNsNotification, cancellation: APNsSendCancellation? = nil,
                     handedOver: NIODeadline? = nil) async -> APNsOutcome {
        // This send's own, so that the task's cancellation ends it alone, not every send sharing `cancellation`.
        let own = APNsSendCancellation(parent: cancellation)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<APNsOutcome, Never>) in
                submit([Submission(notification, cancellation: own, handedOver: handedOver) { continuation.resume(returning: $0) }])
            }
        } onCancel: {
            own.cancel()
            cancelQueued(own)
        }
    }
}
