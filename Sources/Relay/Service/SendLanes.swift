import APNs
import Kafka
import NIOCore

/// Where the relay's sends run. A send starts from the loop with no task of its own
/// (``NotificationSending/sendWithoutTask(_:)``: written at once or queued
/// for a stream) and its outcome comes back by callback. Retries, and the sends of a sender without
/// that path, run as child tasks in lanes per events partition (a few task groups each: a task group removes a
/// finished child in time linear in its children, quadratic with thousands of sends in flight in one
/// group), so a hand-over can cancel exactly its partitions' sends.
struct SendLanes {
    enum Command: Sendable {
        case send(DeviceDispatch<PendingNotification>)
        /// A send begun without a task that goes on (a retry).
        case resume(DeviceDispatch<PendingNotification>, @Sendable () async -> APNsOutcome)
        case cancel
    }

    static let lanesPerPartition = 16
    private typealias Lanes = (answers: LaneAnswers, next: Int)
    private var lanes: [TopicPartition: Lanes] = [:]
    /// Until when sends may be written (the relay's ownership lease); `nil`: no limit.
    private var writableUntil: NIODeadline?

    /// Sends `dispatch`: at once through `sender` when it can begin now, else on a lane of its
    /// partition. Every dispatch brings exactly one `.sent` to `input`, an abandoned one too.
    /// Returns the lanes' streams when the partition had none yet: the caller runs each with
    /// ``run(_:sender:input:)`` in its task group.
    mutating func send(_ dispatch: DeviceDispatch<PendingNotification>, via sender: any NotificationSending,
                       answering input: RelayInbox) -> [AsyncStream<Command>] {
        send([dispatch], via: sender, answering: input)
    }

    /// Sends each of `dispatches` as ``send(_:via:answering:)`` does, handing the sender the whole batch
    /// at once (``NotificationSending/sendWithoutTask(_:)``).
    mutating func send(_ dispatches: [DeviceDispatch<PendingNotification>], via sender: any NotificationSending,
                       answering input: RelayInbox) -> [AsyncStream<Command>] {
        var started: [AsyncStream<Command>] = []
        var sends: [TasklessSend] = []
        sends.reserveCapacity(dispatches.count)
        // A batch's sends come in runs of one partition (fetches and acknowledgements are per partition): the last
        // partition's lanes are kept at hand rather than hashing its topic for every send.
        var last: (partition: TopicPartition, lane: Lanes)?
        for dispatch in dispatches {
            let partition = dispatch.notification.payload.record.partition
            let lane: Lanes
            if let last, last.partition == partition {
                lane = last.lane
            } else {
                lane = lanes.index(forKey: partition).map { lanes.values[$0] } ?? openLanes(partition, answering: input, streams: &started)
                last = (partition, lane)
            }
            sends.append(TasklessSend(dispatch, answeringTo: lane.answers))
        }
        for index in sender.sendWithoutTask(sends) {
            let dispatch = dispatches[index]
            let partition = dispatch.notification.payload.record.partition
            guard let lane = lanes[partition] else { continue }
            lane.answers.continuations[lane.next].yield(.send(dispatch))
            lanes[partition]!.next = (lane.next + 1) % Self.lanesPerPartition
        }
        return started
    }

    /// Opens `partition`'s lanes, appending their streams to `streams`.
    private mutating func openLanes(_ partition: TopicPartition, answering input: RelayInbox, streams: inout [AsyncStream<Command>]) -> Lanes {
        var continuations: [AsyncStream<Command>.Continuation] = []
        for _ in 0..<Self.lanesPerPartition {
            let (stream, continuation) = AsyncStream<Command>.makeStream()
            streams.append(stream)
            continuations.append(continuation)
        }
        let lane: Lanes = (LaneAnswers(input: input, continuations: continuations, cancellation: APNsSendCancellation(writableUntil: writableUntil)), 0)
        lanes[partition] = lane
        return lane
    }

    /// Stops the partitions' writes: their sends still queued in the sender leave the queue unsent, and no retry
    /// of theirs is written (each comes back abandoned); those on the wire are answered. Their lanes stay, for
    /// the retries' outcomes, until ``close(_:)`` or ``cancel(_:via:)``.
    mutating func stopWrites(_ partitions: [TopicPartition], via sender: any NotificationSending) {
        for partition in partitions {
            guard let answers = lanes[partition]?.answers else { continue }
            answers.cancellation.cancel()
            sender.cancelQueued(answers.cancellation)
        }
    }

    /// Cancels the partitions' sends in flight (those still queued for a stream leave the queue
    /// unsent); their lanes end.
    mutating func cancel(_ partitions: [TopicPartition], via sender: any NotificationSending) {
        stopWrites(partitions, via: sender)
        for partition in partitions {
            guard let removed = lanes.removeValue(forKey: partition)?.answers else { continue }
            for continuation in removed.continuations {
                continuation.yield(.cancel)
                continuation.finish()
            }
        }
    }

    /// Ends the partitions' lanes once their sends in flight finish.
    mutating func close(_ partitions: [TopicPartition]) {
        for partition in partitions {
            for continuation in lanes.removeValue(forKey: partition)?.answers.continuations ?? [] { continuation.finish() }
        }
    }

    mutating func cancelAll(via sender: any NotificationSending) { cancel(Array(lanes.keys), via: sender) }

    /// Sends may be written until `deadline` and not after (checked as each is about to be written).
    mutating func permitWrites(until deadline: NIODeadline) {
        writableUntil = deadline
        for lane in lanes.values { lane.answers.cancellation.permitWrites(until: deadline) }
    }

    /// One lane: a send per command as a child task, all cancelled by `.cancel` (a command that
    /// comes after it starts cancelled: a task added to a cancelled group is).
    static func run(_ stream: AsyncStream<Command>, sender: any NotificationSending, input: RelayInbox) async {
        await withDiscardingTaskGroup { sends in
            for await command in stream {
                switch command {
                case .send(let dispatch):
                    sends.addTask {
                        let outcome = await sender.send(dispatch.notification.payload)
                        input.yield(.sent(dispatch, outcome))
                    }
                case .resume(let dispatch, let rest):
                    sends.addTask {
                        let outcome = await rest()
                        input.yield(.sent(dispatch, outcome))
                    }
                case .cancel:
                    sends.cancelAll()
                }
            }
        }
    }
}

/// Where the sends of one partition answer (``TasklessSend/complete(_:)``): a final outcome to the relay's inbox, the
/// rest of a retried send to one of the partition's lanes. One per partition, shared by its sends.
final class LaneAnswers: Sendable {
    let input: RelayInbox
    let continuations: [AsyncStream<SendLanes.Command>.Continuation]
    /// Cancels the partition's sends (its hand-over), and bounds their writes by the ownership lease.
    let cancellation: APNsSendCancellation

    init(input: RelayInbox, continuations: [AsyncStream<SendLanes.Command>.Continuation], cancellation: APNsSendCancellation) {
        self.input = input
        self.continuations = continuations
        self.cancellation = cancellation
    }

    func answer(_ dispatch: DeviceDispatch<PendingNotification>, _ step: StartedSend) {
        switch step {
        case .finished(let outcome):
            input.yield(.sent(dispatch, outcome))
        case .unfinished(let rest):
            // Lanes end when their partition is handed over; a retry that comes later is abandoned.
            let lane = continuations[Int(dispatch.ticket.serial % UInt64(continuations.count))]
            if case .terminated = lane.yield(.resume(dispatch, rest)) {
                input.yield(.sent(dispatch, .abandoned(apnsID: dispatch.notification.payload.notification.apnsID)))
            }
        }
    }
}
