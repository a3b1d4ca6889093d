import Kafka

/// Sends run in lanes per events partition (a few task groups each: a task group removes a
/// finished child in time linear in its children, which with thousands of sends in flight in
/// one group dominated the profile), so a hand-over can cancel exactly its partitions' sends.
struct SendLanes {
    enum Command: Sendable {
        case send(DeviceDispatch<PendingNotification>)
        case cancel
    }

    static let lanesPerPartition = 16
    private var lanes: [TopicPartition: (continuations: [AsyncStream<Command>.Continuation], next: Int)] = [:]

    /// Queues `dispatch` on a lane of its partition. Returns the lanes' streams when the partition
    /// had none yet: the caller runs each with ``run(_:sender:input:)`` in its task group.
    mutating func send(_ dispatch: DeviceDispatch<PendingNotification>) -> [AsyncStream<Command>] {
        let partition = dispatch.notification.payload.record.partition
        var started: [AsyncStream<Command>] = []
        if lanes[partition] == nil {
            var continuations: [AsyncStream<Command>.Continuation] = []
            for _ in 0..<Self.lanesPerPartition {
                let (stream, continuation) = AsyncStream<Command>.makeStream()
                started.append(stream)
                continuations.append(continuation)
            }
            lanes[partition] = (continuations, 0)
        }
        let index = lanes[partition]!.next
        lanes[partition]!.continuations[index].yield(.send(dispatch))
        lanes[partition]!.next = (index + 1) % Self.lanesPerPartition
        return started
    }

    /// Cancels the partitions' sends in flight; their lanes end.
    mutating func cancel(_ partitions: [TopicPartition]) {
        for partition in partitions {
            for continuation in lanes.removeValue(forKey: partition)?.continuations ?? [] {
                continuation.yield(.cancel)
                continuation.finish()
            }
        }
    }

    /// Ends the partitions' lanes once their sends in flight finish.
    mutating func close(_ partitions: [TopicPartition]) {
        for partition in partitions {
            for continuation in lanes.removeValue(forKey: partition)?.continuations ?? [] { continuation.finish() }
        }
    }

    mutating func cancelAll() { cancel(Array(lanes.keys)) }

    /// One lane: a send per command as a child task, all cancelled by `.cancel`.
    static func run(_ stream: AsyncStream<Command>, sender: any NotificationSending, input: RelayInbox) async {
        await withDiscardingTaskGroup { sends in
            for await command in stream {
                switch command {
                case .send(let dispatch):
                    sends.addTask {
                        let outcome = await sender.send(dispatch.notification.payload)
                        input.yield(.sent(dispatch, outcome))
                    }
                case .cancel:
                    sends.cancelAll()
                }
            }
        }
    }
}
