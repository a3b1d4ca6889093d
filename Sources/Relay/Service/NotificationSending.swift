public import APNs
import RelayCore

/// Delivers notifications to APNs (or a stand-in) and reports each one's final outcome, after the sender's own
/// retries. The relay's per-device ordering relies on one send per token at a time.
public protocol NotificationSending: Sendable {
    /// Starts each of `sends`, in order, with no task of its own (written at once, or queued for a stream). Each is
    /// completed (``RelaySend/complete(_:)``) exactly once, from any thread (it must be quick), with its final
    /// outcome. Once its ``RelaySend/cancellation`` is cancelled (or its write permit ran out) nothing more of it is
    /// written, its retries included. One call per batch lets a sender take its locks once for all of them.
    func submit(_ sends: [RelaySend])

    /// Ends the sends started with `cancellation` that still wait (for a stream, or for a retry's backoff): each
    /// completes abandoned, unsent. The default has none.
    func cancelQueued(_ cancellation: APNsSendCancellation)

    /// How many sends it can have on the wire at once now, when it knows (`nil`: it does not, or nothing is usable
    /// yet). The relay's send window follows it, so sends beyond it wait in the relay, per device and in order,
    /// rather than in the sender's queue. The default: `nil`.
    var streamCapacity: Int? { get }
}

extension NotificationSending {
    public var streamCapacity: Int? { nil }

    public func cancelQueued(_ cancellation: APNsSendCancellation) {}
}

/// One send of one device's notification, handed to a ``NotificationSending``.
///
/// It carries its dispatch and its partition's ``PartitionSendGate``, shared by the partition's sends: the answer
/// goes from ``complete(_:)`` straight to the relay's inbox.
public struct RelaySend: Sendable {
    /// Which send of which notification this is.
    package let dispatch: DeviceDispatch<PendingNotification>
    /// Where the answer goes, and what stops the partition's writes.
    let gate: PartitionSendGate

    /// Creates the send.
    init(_ dispatch: DeviceDispatch<PendingNotification>, gate: PartitionSendGate) {
        self.dispatch = dispatch
        self.gate = gate
    }

    /// The notification to send.
    public var notification: PendingNotification { dispatch.notification.payload }

    /// Once cancelled (its partition handed over, or the ownership lease ran out), the send is written no more.
    public var cancellation: APNsSendCancellation { gate.cancellation }

    /// Reports the final outcome: call it exactly once, from any thread (it must be quick).
    public func complete(_ outcome: APNsOutcome) {
        gate.input.yield(.sent(dispatch, outcome))
    }
}
