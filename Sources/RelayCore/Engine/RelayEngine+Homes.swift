// The engine's users' homes: events read away from their user's home partition are forwarded there; a partition is
// served only under the layout its badge state was placed for (PartitionLayout).

import APNsCore
package import KafkaCore

extension RelayEngine {
    /// Where a restored partition stands with the layout before its events may run.
    enum LayoutWait: Sendable, Equatable {
        /// Partition 0's changelog is being read: its layout record decides for an empty partition.
        case readingPartitionZero
        /// The layout record is being written: the partition's first record, before any user's.
        case recording
    }

    /// The event read at `reference` belongs to `user`, whose home is partition `home`: it is forwarded there, and the
    /// record is finished once Kafka has it (its results come from the home partition's owner).
    mutating func forward(_ message: KafkaMessage, user: String, home: Int32, _ reference: RecordReference) -> RelayEffect {
        counters.eventsForwarded[reference.partition.partition, default: 0] += 1
        modify(reference) { $0.publishing += 1 }
        return .forwardEvent(message, user: user, home: home, for: reference)
    }

    /// Forwarding `message` failed. One too large to forward (the forward adds a header to a record at Kafka's size
    /// limit) is bad input: a dead letter where it was read. Any other failure ends the relay: the forwards from one
    /// partition must reach the home partition in offset order (how the home tells a repeat), so a failed one is
    /// never produced again behind later ones; the partition's next owner forwards it again, in order.
    mutating func forwardFailed(_ message: KafkaMessage, _ reference: RecordReference, failure: PublishFailure, now: RelayTime) -> [RelayEffect] {
        guard stillPublishing(reference) else { return [] }
        guard failure == .tooLarge else {
            return fail("forwarding an event from \(reference.partition) offset \(reference.offset) to its user's home partition failed: \(failure)")
        }
        modify(reference) { $0.publishing = max(0, $0.publishing - 1) }
        return deadLetter(message, reference, reason: "event: too large to forward to its user's home partition (\(message.value?.count ?? 0) bytes)", now: now)
    }

    /// Whether `message`, read away from its user's home, is a forward made under the previous layout whose source
    /// record that partition's owner reads again and forwards itself (``ReadAgain``): this copy is then dropped.
    mutating func isCopyForwardedAgain(_ message: KafkaMessage, _ partition: TopicPartition) -> Bool {
        guard let source = Self.forwardSource(of: message) else { return false }
        return read(partition, { $0.readAgain[source.partition]?.includes(source.offset) }) == true
    }

    /// The forward source of an event read at its user's home, if it was forwarded here.
    static func forwardSource(of message: KafkaMessage) -> ForwardSource? {
        guard !message.headers.isEmpty, let value = message.header(ForwardSource.header)?.value else { return nil }
        return ForwardSource(headerValue: value)
    }

    /// The restored changelog of `partition` is applied; the layout decides whether its events may run now, after the
    /// layout is recorded, after partition 0 is read, or never (the relay stops: moving the state is an operator's).
    mutating func checkLayout(of partition: TopicPartition, changelog: RestoredChangelog, now: RelayTime) -> [RelayEffect] {
        guard let layout = configuration.layout else { return finishRestore(of: partition, now: now) }
        if !changelog.readAgain.isEmpty { modify(partition) { $0.readAgain = changelog.readAgain } }
        return follow(LayoutVerdict.of(changelog, partition: partition.partition, layout: layout), for: partition, layout: layout, now: now)
    }

    /// Partition 0 of the changelog, read for the empty partition `partition`.
    package mutating func layoutProbed(_ partition: TopicPartition, generation: UInt64, partitionZero: RestoredChangelog, now: RelayTime) -> [RelayEffect] {
        guard let layout = configuration.layout,
              read(partition, { $0.generation == generation && $0.layoutWait == .readingPartitionZero }) == true else { return [] }
        retries.succeeded(.restore(partition))
        return follow(LayoutVerdict.fromPartitionZero(partitionZero, layout: layout), for: partition, layout: layout, now: now)
    }

    /// The layout record of `partition` was stored: its events may run.
    package mutating func layoutStored(_ partition: TopicPartition, generation: UInt64, now: RelayTime) -> [RelayEffect] {
        retries.succeeded(.publishing(.changelog))
        guard read(partition, { $0.generation == generation && $0.layoutWait == .recording }) == true else { return [] }
        return finishRestore(of: partition, now: now)
    }

    private mutating func follow(_ verdict: LayoutVerdict, for partition: TopicPartition, layout: PartitionLayout, now: RelayTime) -> [RelayEffect] {
        guard let generation = read(partition, { $0.generation }) else { return [] }
        switch verdict {
        case .serve:
            return finishRestore(of: partition, now: now)
        case .record:
            modify(partition) { $0.layoutWait = .recording }
            return [.writeLayout(layout, partition: partition, generation: generation)]
        case .askPartitionZero:
            modify(partition) { $0.layoutWait = .readingPartitionZero }
            return [.readLayoutOfPartitionZero(for: partition, generation: generation)]
        case .refuse(let problem):
            counters.layoutRefusals += 1
            return fail(LayoutVerdict.refusal(problem, badgeStatePartition: TopicPartition(configuration.badgeStateTopic, partition.partition)),
                        code: 2)
        }
    }

    /// The partition's badge state is restored and its layout holds: the records that waited run.
    private mutating func finishRestore(of partition: TopicPartition, now: RelayTime) -> [RelayEffect] {
        modify(partition) { state in
            state.layoutWait = nil
            state.badges.finishRestore()
        }
        return runWaiting(in: [partition], now: now)
    }
}
