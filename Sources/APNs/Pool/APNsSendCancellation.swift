public import NIOCore
import Synchronization

/// Where a send stands between attempts: its retries, its deadline, the backoff it owes.
struct APNsSendProgress: Sendable {
    /// The retries so far, and the deadline (``APNsRetryPolicy/maxRetryDuration`` after the send began, or the
    /// notification's `apns-expiration` when sooner).
    var retry: APNsRetryStateMachine
    /// The notification's `apns-expiration` as a monotonic time, if it has one.
    let expiry: NIODeadline?
    /// The pause owed before the next attempt.
    var backoff: TimeAmount?
    /// What stops the send's writes (``APNsSupervisor/Submission/cancellation``): checked before every attempt, a
    /// retry's too.
    let cancellation: APNsSendCancellation?

    /// When the send began (its deadline and duration count from here).
    var started: NIODeadline { retry.started }

    /// Whether the send may write no more attempts: its cancellation was cancelled, or its write permit ran out.
    var isStopped: Bool { cancellation?.isCancelled == true }

    init(policy: APNsRetryPolicy, started: NIODeadline, expiry: NIODeadline?, cancellation: APNsSendCancellation? = nil) {
        self.retry = APNsRetryStateMachine(policy: policy, started: started, expiry: expiry)
        self.expiry = expiry
        self.cancellation = cancellation
    }
}

/// Cancels sends made with ``APNsSupervisor/submit(_:)``: once cancelled, a send it was given to is not written (see
/// ``APNsSupervisor/cancelQueued(_:)`` to end such sends still waiting at once). It can also let writes happen only
/// until a deadline (``permitWrites(until:)``): past it a send is not written, checked at the moment it would be, so a
/// process thawed after a freeze writes nothing that waited meanwhile. One made from a `parent` is cancelled with it
/// too (one send of many that share the parent's).
public final class APNsSendCancellation: Sendable {
    private let cancelled = Atomic(false)
    /// `NIODeadline.uptimeNanoseconds` past which nothing is written; `UInt64.max`: no limit.
    private let writableUntil = Atomic<UInt64>(.max)
    private let parent: APNsSendCancellation?

    /// Creates one, not cancelled, writes permitted until `writableUntil` (no limit when `nil`), and cancelled whenever
    /// `parent` is.
    public init(writableUntil: NIODeadline? = nil, parent: APNsSendCancellation? = nil) {
        self.parent = parent
        if let writableUntil { self.writableUntil.store(writableUntil.uptimeNanoseconds, ordering: .relaxed) }
    }

    /// Whether ``cancel()`` was called (here or on the parent), or a write permit ran out.
    public var isCancelled: Bool {
        cancelled.load(ordering: .sequentiallyConsistent)
            || NIODeadline.now().uptimeNanoseconds >= writableUntil.load(ordering: .sequentiallyConsistent)
            || parent?.isCancelled == true
    }

    /// Whether ``cancel()`` was called (here or on the parent): a permit that ran out may be renewed, a cancel is for good.
    var isCancelledOutright: Bool {
        cancelled.load(ordering: .sequentiallyConsistent) || parent?.isCancelledOutright == true
    }

    /// Whether this is `other` or was made from it.
    func stems(from other: APNsSendCancellation) -> Bool {
        self === other || parent?.stems(from: other) == true
    }

    /// Cancels: the sends given this are written no more.
    public func cancel() { cancelled.store(true, ordering: .sequentiallyConsistent) }

    /// Sends given this may be written until `deadline` (moved either way by the next call).
    public func permitWrites(until deadline: NIODeadline) {
        writableUntil.store(deadline.uptimeNanoseconds, ordering: .sequentiallyConsistent)
    }
}
