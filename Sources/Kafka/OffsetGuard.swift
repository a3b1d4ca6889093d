/// The consumer's check of the offsets it reads: per partition, the offset after the last message delivered (the
/// next one expected). Pure state; the poll thread owns one and makes the seeks it asks for.
///
/// librdkafka 2.0.2's batch read can skip offsets when a pause lands during the read (it pauses partitions itself
/// during a cooperative rebalance), and a seek or a fetch retry can deliver an offset twice. So, in each batch:
/// - a message below the expected offset is a repeat and is dropped;
/// - a message above it is a gap: the rest of that partition's batch is dropped and the partition is read again
///   from the expected offset, once (`Gap`, then `rereadStarted`);
/// - if the re-read starts above the expected offset again, the gap is real (transaction markers, compaction,
///   retention) and is accepted.
struct KafkaOffsetGuard {
    /// Offsets missing from a read: `partition` should be read again from `expected`.
    struct Gap: Equatable {
        var partition: TopicPartition
        var expected: Int64
        var found: Int64
    }

    private var nextOffsets: [TopicPartition: Int64] = [:]
    private var rereading: Set<TopicPartition> = []

    /// The offset expected next on `partition`, if a message of it was delivered since it was assigned or sought.
    func nextOffset(of partition: TopicPartition) -> Int64? { nextOffsets[partition] }

    /// Removes repeats and everything from a gap on from `batch` (keeping the order of the rest) and returns the gaps
    /// found, at most one per partition.
    mutating func filter(_ batch: inout [KafkaMessage]) -> [Gap] {
        var gaps: [Gap] = []
        var kept = 0
        var current: TopicPartition?
        var expected: Int64?
        var skippingRest = false
        // The messages are read in place (a copy of one costs its references), and moved only once something before
        // them was dropped, which is rare.
        for index in batch.indices {
            let offset = batch[index].offset
            let samePartition = current.map { $0.partition == batch[index].partition && $0.topic == batch[index].topic } ?? false
            if !samePartition {
                if let current, let expected { nextOffsets[current] = expected }
                let partition = batch[index].topicPartition
                current = partition
                expected = nextOffsets[partition]
                skippingRest = gaps.contains { $0.partition == partition }
            }
            if skippingRest { continue }
            if let next = expected {
                if offset < next { continue }  // delivered already
                if offset > next, let partition = current, !rereading.contains(partition) {
                    gaps.append(Gap(partition: partition, expected: next, found: offset))
                    skippingRest = true
                    continue
                }
            }
            if !rereading.isEmpty, let partition = current { rereading.remove(partition) }
            expected = offset + 1
            if kept != index { batch.swapAt(kept, index) }
            kept += 1
        }
        if let current, let expected { nextOffsets[current] = expected }
        if kept < batch.count { batch.removeSubrange(kept...) }
        return gaps
    }

    /// The seek back to a gap's expected offset was made: the next message of `partition` is accepted even if it
    /// is past that offset (the gap is then real).
    mutating func rereadStarted(_ partition: TopicPartition) {
        rereading.insert(partition)
    }

    /// A partition assigned, revoked or sought starts afresh: its next message is accepted whatever its offset.
    mutating func forget(_ partitions: some Sequence<TopicPartition>) {
        for partition in partitions {
            nextOffsets[partition] = nil
            rereading.remove(partition)
        }
    }
}
