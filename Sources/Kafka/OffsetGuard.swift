/// The consumer's check of the offsets it reads: per partition, the offset after the last message delivered (the
/// next one expected). Pure state; the poll thread owns one.
///
/// librdkafka can deliver an offset twice when a fetch response arrives during an offset validation or a reset (a
/// known issue of its consume API), and a seek can bring back what was already delivered: a message below the
/// expected offset is a repeat and is dropped. A message above it is accepted: offsets are missing for transaction
/// markers, aborted transactions, compaction and retention (librdkafka's batch read no longer skips offsets when a
/// partition is paused during it, fixed in 2.1.0).
struct KafkaOffsetGuard {
    private var nextOffsets: [TopicPartition: Int64] = [:]

    /// The offset expected next on `partition`, if a message of it was delivered since it was assigned or sought.
    func nextOffset(of partition: TopicPartition) -> Int64? { nextOffsets[partition] }

    /// Removes repeats from `batch`, keeping the order of the rest.
    mutating func filter(_ batch: inout [KafkaMessage]) {
        var kept = 0
        var current: TopicPartition?
        var expected: Int64?
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
            }
            if let next = expected, offset < next { continue }  // delivered already
            expected = offset + 1
            if kept != index { batch.swapAt(kept, index) }
            kept += 1
        }
        if let current, let expected { nextOffsets[current] = expected }
        if kept < batch.count { batch.removeSubrange(kept...) }
    }

    /// A partition assigned, revoked or sought starts afresh: its next message is accepted whatever its offset.
    mutating func forget(_ partitions: some Sequence<TopicPartition>) {
        for partition in partitions { nextOffsets[partition] = nil }
    }
}
