public import APNs

/// Delivers one notification to APNs (or a stand-in) and reports the final outcome, after the
/// sender's own retries. The relay's per-device ordering relies on one call per token at a time.
public protocol NotificationSending: Sendable {
    /// Sends `notification` and returns its final outcome. Cancelling the task abandons the send
    /// (its outcome is then ``APNsOutcome/isAbandoned``).
    func send(_ notification: PendingNotification) async -> APNsOutcome

    /// Starts each of `sends`, in order, with no task of its own (written at once, or queued for a
    /// stream), and returns the indexes of those it could not start, having done nothing for them
    /// (the relay then calls ``send(_:)`` for each in a task). Once started, a send is completed
    /// (``TasklessSend/complete(_:)``) exactly once, from any thread (it must be quick), with the final
    /// outcome or with the rest of the send to run in a task. Once its `cancellation` is cancelled (or
    /// its write permit ran out) nothing more of it is written, that rest included. One call per batch
    /// lets a sender take its locks once for all of them.
    ///
    /// Most notifications thus cross no task, continuation or stream of their own on the way to
    /// APNs and back. The default starts none.
    func sendWithoutTask(_ sends: [TasklessSend]) -> [Int]

    /// Ends the sends started with `cancellation` that still wait for a stream: each completes
    /// as abandoned, unsent. The default has none.
    func cancelQueued(_ cancellation: APNsSendCancellation)

    /// How many sends it can have on the wire at once now, when it knows (`nil`: it does not, or nothing is usable
    /// yet). The relay's send window follows it, so sends beyond it wait in the relay, per device and in order,
    /// rather than in the sender's queue. The default: `nil`.
    var streamCapacity: Int? { get }
}

extension NotificationSending {
    public var streamCapacity: Int? { nil }

    public func sendWithoutTask(_ sends: [TasklessSend]) -> [Int] { Array(sends.indices) }

    public func cancelQueued(_ cancellation: APNsSendCancellation) {}
}

/// A send to start with no task of its own (``NotificationSending/sendWithoutTask(_:)``).
///
/// It carries its dispatch and a reference to where its partition's sends answer, shared by them all: a send
/// allocates no completion closure of its own.
public struct TasklessSend: Sendable {
    /// Which send of which notification this is.
    package let dispatch: DeviceDispatch<PendingNotification>
    /// Where the answer goes (the relay's inbox, or a lane for the rest of a retried send).
    let answers: LaneAnswers

    /// Creates the send.
    init(_ dispatch: DeviceDispatch<PendingNotification>, answeringTo answers: LaneAnswers) {
        self.dispatch = dispatch
        self.answers = answers
    }

    /// The notification to send.
    public var notification: PendingNotification { dispatch.notification.payload }

    /// Once cancelled, the send is written no more.
    public var cancellation: APNsSendCancellation { answers.cancellation }

    /// Reports how the send goes on: call it exactly once, from any thread (it must be quick), with the final
    /// outcome or with the rest of the send to run in a task.
    public func complete(_ step: StartedSend) {
        answers.answer(dispatch, step)
    }
}

/// How a send begun by ``NotificationSending/sendWithoutTask(_:)`` goes on.
public enum StartedSend: Sendable {
    /// It is over.
    case finished(APNsOutcome)
    /// It goes on (a retry, after its backoff): run this in a task; cancelling the task abandons the send.
    case unfinished(@Sendable () async -> APNsOutcome)
}
