import APNs
import Kafka
import NIOCore
import RelayCore

/// The relay's sends by events partition: each partition's ``PartitionSendGate`` (what stops its writes at a
/// hand-over, and bounds them by the ownership lease), and the hand-over of a batch of sends to the sender.
///
/// Sends have no task of their own: the sender writes or queues them, retries them on its own timers, and completes
/// each once, into the relay's inbox.
struct PartitionSends {
    private var gates: [TopicPartition: PartitionSendGate] = [:]
    /// Until when sends may be written (the relay's ownership lease); `nil`: no limit.
    private var writableUntil: NIODeadline?

    /// Hands `dispatches` to `sender` in one call (``NotificationSending/submit(_:)``). Every dispatch brings exactly
    /// one `.sent` to `input`, an abandoned one too.
    mutating func send(_ dispatches: [DeviceDispatch<PendingNotification>], via sender: any NotificationSending, answering input: RelayInbox) {
        var sends: [RelaySend] = []
        sends.reserveCapacity(dispatches.count)
        // A batch's sends come in runs of one partition (fetches and acknowledgements are per partition): the last
        // partition's gate is kept at hand rather than hashing its topic for every send.
        var last: (partition: TopicPartition, gate: PartitionSendGate)?
        for dispatch in dispatches {
            let partition = dispatch.notification.payload.record.partition
            let gate: PartitionSendGate
            if let last, last.partition == partition {
                gate = last.gate
            } else {
                gate = gates[partition] ?? open(partition, answering: input)
                last = (partition, gate)
            }
            sends.append(RelaySend(dispatch, gate: gate))
        }
        sender.submit(sends)
    }

    private mutating func open(_ partition: TopicPartition, answering input: RelayInbox) -> PartitionSendGate {
        let gate = PartitionSendGate(input: input, cancellation: APNsSendCancellation(writableUntil: writableUntil))
        gates[partition] = gate
        return gate
    }

    /// Stops the partitions' writes: their sends still waiting in the sender (for a stream or a retry) end unsent, and
    /// nothing more of theirs is written (each comes back abandoned); those on the wire are answered. Their next
    /// sends, if the partitions stay, start behind a new gate (``close(_:)``).
    mutating func stopWrites(_ partitions: [TopicPartition], via sender: any NotificationSending) {
        for partition in partitions {
            guard let gate = gates[partition] else { continue }
            gate.cancellation.cancel()
            sender.cancelQueued(gate.cancellation)
        }
    }

    /// Abandons the partitions' sends: nothing more of theirs is written, those waiting end at once, and answers still
    /// to come are the engine's to ignore.
    mutating func cancel(_ partitions: [TopicPartition], via sender: any NotificationSending) {
        stopWrites(partitions, via: sender)
        close(partitions)
    }

    /// Forgets the partitions' gates (their hand-over is done); sends in flight still answer.
    mutating func close(_ partitions: [TopicPartition]) {
        for partition in partitions { gates[partition] = nil }
    }

    mutating func cancelAll(via sender: any NotificationSending) { cancel(Array(gates.keys), via: sender) }

    /// Sends may be written until `deadline` and not after (checked as each is about to be written).
    mutating func permitWrites(until deadline: NIODeadline) {
        writableUntil = deadline
        for gate in gates.values { gate.cancellation.permitWrites(until: deadline) }
    }
}

/// One partition's sends' way home and their brake: shared by them all, so a send allocates nothing for either.
final class PartitionSendGate: Sendable {
    /// Where the answers go.
    let input: RelayInbox
    /// Cancels the partition's sends (its hand-over), and bounds their writes by the ownership lease.
    let cancellation: APNsSendCancellation

    init(input: RelayInbox, cancellation: APNsSendCancellation) {
        self.input = input
        self.cancellation = cancellation
    }
}
