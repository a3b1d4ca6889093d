import Testing

@testable import Kafka

/// The consumer's offset check as a pure state machine: what it keeps of a batch (repeats dropped, gaps accepted).
@Suite struct OffsetGuardTests {
    let partitionA = TopicPartition("events", 0)
    let partitionB = TopicPartition("events", 1)

    func message(_ partition: TopicPartition, _ offset: Int64) -> KafkaMessage {
        KafkaMessage(topic: partition.topic, partition: partition.partition, offset: offset, key: nil, value: nil, headers: [], timestamp: nil)
    }

    func batch(_ partition: TopicPartition, _ offsets: [Int64]) -> [KafkaMessage] {
        offsets.map { message(partition, $0) }
    }

    func offsets(_ batch: [KafkaMessage]) -> [String] {
        batch.map { "\($0.partition):\($0.offset)" }
    }

    @Test func aFirstReadIsAcceptedFromAnyOffsetAndInOrderReadsPass() {
        var offsetGuard = KafkaOffsetGuard()
        var read = batch(partitionA, [40, 41, 42])
        offsetGuard.filter(&read)
        #expect(offsets(read) == ["0:40", "0:41", "0:42"])
        var next = batch(partitionA, [43, 44])
        offsetGuard.filter(&next)
        #expect(offsets(next) == ["0:43", "0:44"])
        #expect(offsetGuard.nextOffset(of: partitionA) == 45)
    }

    /// The poll thread still holds the batch while the machine filters it, so a write would copy all of it (each
    /// message's retains): a batch with nothing to drop, the common one, must come back in the same storage.
    @Test func aBatchWithNothingToDropIsNotCopied() {
        var offsetGuard = KafkaOffsetGuard()
        var read = batch(partitionA, [0, 1, 2]) + batch(partitionB, [7, 8])
        let heldByTheCaller = read
        offsetGuard.filter(&read)
        #expect(offsets(read) == ["0:0", "0:1", "0:2", "1:7", "1:8"])
        #expect(read.withUnsafeBufferPointer { $0.baseAddress } == heldByTheCaller.withUnsafeBufferPointer { $0.baseAddress })
    }

    @Test func repeatsAreDropped() {
        var offsetGuard = KafkaOffsetGuard()
        var read = batch(partitionA, [0, 1, 2])
        offsetGuard.filter(&read)
        var again = batch(partitionA, [1, 2, 3, 3, 4])
        offsetGuard.filter(&again)
        #expect(offsets(again) == ["0:3", "0:4"])
        #expect(offsetGuard.nextOffset(of: partitionA) == 5)
    }

    @Test func aGapIsAcceptedAsItIs() {
        var offsetGuard = KafkaOffsetGuard()
        var read = batch(partitionA, [0, 1, 2]) + batch(partitionB, [10])
        offsetGuard.filter(&read)
        // Offset 3 is a transaction's marker, 12 was compacted away: nothing is read again.
        var next = [message(partitionA, 4), message(partitionB, 13), message(partitionA, 5)]
        offsetGuard.filter(&next)
        #expect(offsets(next) == ["0:4", "1:13", "0:5"])
        #expect(offsetGuard.nextOffset(of: partitionA) == 6 && offsetGuard.nextOffset(of: partitionB) == 14)
    }

    @Test func interleavedPartitionsKeepTheirOwnExpectedOffsets() {
        var offsetGuard = KafkaOffsetGuard()
        var read = [message(partitionA, 0), message(partitionB, 0), message(partitionA, 1), message(partitionB, 1), message(partitionA, 1)]
        offsetGuard.filter(&read)
        #expect(offsets(read) == ["0:0", "1:0", "0:1", "1:1"])
    }

    @Test func forgettingAPartitionAcceptsItsNextMessageAtAnyOffset() {
        var offsetGuard = KafkaOffsetGuard()
        var read = batch(partitionA, [0, 1, 2, 3])
        offsetGuard.filter(&read)
        // A seek back to 1 (or a revoke and a new assignment): the old offsets come again and are delivered.
        offsetGuard.forget([partitionA])
        #expect(offsetGuard.nextOffset(of: partitionA) == nil)
        var sought = batch(partitionA, [1, 2])
        offsetGuard.filter(&sought)
        #expect(offsets(sought) == ["0:1", "0:2"])
    }
}
