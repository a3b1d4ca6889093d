import Testing

@testable import Kafka

/// The consumer's offset check as a pure state machine: what it keeps of a batch, the gaps it asks the poll
/// thread to read again, and when it accepts a gap as real.
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
        #expect(offsetGuard.filter(&read).isEmpty)
        #expect(offsets(read) == ["0:40", "0:41", "0:42"])
        var next = batch(partitionA, [43, 44])
        #expect(offsetGuard.filter(&next).isEmpty)
        #expect(offsets(next) == ["0:43", "0:44"])
        #expect(offsetGuard.nextOffset(of: partitionA) == 45)
    }

    /// The poll thread still holds the batch while the machine filters it, so a write would copy all of it (each
    /// message's retains): a batch with nothing to drop, the common one, must come back in the same storage.
    @Test func aBatchWithNothingToDropIsNotCopied() {
        var offsetGuard = KafkaOffsetGuard()
        var read = batch(partitionA, [0, 1, 2]) + batch(partitionB, [7, 8])
        let heldByTheCaller = read
        #expect(offsetGuard.filter(&read).isEmpty)
        #expect(offsets(read) == ["0:0", "0:1", "0:2", "1:7", "1:8"])
        #expect(read.withUnsafeBufferPointer { $0.baseAddress } == heldByTheCaller.withUnsafeBufferPointer { $0.baseAddress })
    }

    @Test func repeatsAreDropped() {
        var offsetGuard = KafkaOffsetGuard()
        var read = batch(partitionA, [0, 1, 2])
        _ = offsetGuard.filter(&read)
        var again = batch(partitionA, [1, 2, 3, 3, 4])
        #expect(offsetGuard.filter(&again).isEmpty)
        #expect(offsets(again) == ["0:3", "0:4"])
        #expect(offsetGuard.nextOffset(of: partitionA) == 5)
    }

    @Test func aGapDropsThePartitionsRestAndAsksForARereadFromTheExpectedOffset() {
        var offsetGuard = KafkaOffsetGuard()
        var read = batch(partitionA, [0, 1, 2])
        _ = offsetGuard.filter(&read)
        var skipped = batch(partitionA, [5, 6, 7])
        #expect(offsetGuard.filter(&skipped) == [.init(partition: partitionA, expected: 3, found: 5)])
        #expect(skipped.isEmpty)
        #expect(offsetGuard.nextOffset(of: partitionA) == 3)

        // The re-read brings the missing offsets: everything is delivered once, in order.
        offsetGuard.rereadStarted(partitionA)
        var reread = batch(partitionA, [3, 4, 5, 6, 7])
        #expect(offsetGuard.filter(&reread).isEmpty)
        #expect(offsets(reread) == ["0:3", "0:4", "0:5", "0:6", "0:7"])
    }

    @Test func aGapStillThereOnTheRereadIsRealAndAccepted() {
        var offsetGuard = KafkaOffsetGuard()
        var read = batch(partitionA, [0, 1, 2])
        _ = offsetGuard.filter(&read)
        var skipped = batch(partitionA, [4, 5])  // offset 3 is a transaction marker
        #expect(offsetGuard.filter(&skipped).count == 1)
        offsetGuard.rereadStarted(partitionA)
        var reread = batch(partitionA, [4, 5])
        #expect(offsetGuard.filter(&reread).isEmpty)
        #expect(offsets(reread) == ["0:4", "0:5"])

        // Accepting it ends the re-read: a later gap is reported again.
        var later = batch(partitionA, [9])
        #expect(offsetGuard.filter(&later) == [.init(partition: partitionA, expected: 6, found: 9)])
        #expect(later.isEmpty)
    }

    @Test func withoutTheSeekTheGapIsReportedAgain() {
        var offsetGuard = KafkaOffsetGuard()
        var read = batch(partitionA, [0])
        _ = offsetGuard.filter(&read)
        var skipped = batch(partitionA, [2])
        #expect(offsetGuard.filter(&skipped).count == 1)
        // The seek failed, so rereadStarted was not called.
        var again = batch(partitionA, [2, 3])
        #expect(offsetGuard.filter(&again) == [.init(partition: partitionA, expected: 1, found: 2)])
        #expect(again.isEmpty)
    }

    @Test func aGapOnOnePartitionLeavesTheOthersAlone() {
        var offsetGuard = KafkaOffsetGuard()
        var read = batch(partitionA, [0, 1]) + batch(partitionB, [10, 11])
        _ = offsetGuard.filter(&read)
        // A skips 2; its later messages in the same batch are dropped even after B's, and B goes on.
        var mixed = [message(partitionA, 3), message(partitionB, 12), message(partitionA, 4), message(partitionB, 13)]
        #expect(offsetGuard.filter(&mixed) == [.init(partition: partitionA, expected: 2, found: 3)])
        #expect(offsets(mixed) == ["1:12", "1:13"])
        #expect(offsetGuard.nextOffset(of: partitionA) == 2)
        #expect(offsetGuard.nextOffset(of: partitionB) == 14)
    }

    @Test func interleavedPartitionsKeepTheirOwnExpectedOffsets() {
        var offsetGuard = KafkaOffsetGuard()
        var read = [message(partitionA, 0), message(partitionB, 0), message(partitionA, 1), message(partitionB, 1), message(partitionA, 1)]
        #expect(offsetGuard.filter(&read).isEmpty)
        #expect(offsets(read) == ["0:0", "1:0", "0:1", "1:1"])
    }

    @Test func forgettingAPartitionAcceptsItsNextMessageAtAnyOffset() {
        var offsetGuard = KafkaOffsetGuard()
        var read = batch(partitionA, [0, 1, 2, 3])
        _ = offsetGuard.filter(&read)
        // A seek back to 1 (or a revoke and a new assignment): the old offsets come again and are delivered.
        offsetGuard.forget([partitionA])
        #expect(offsetGuard.nextOffset(of: partitionA) == nil)
        var sought = batch(partitionA, [1, 2])
        #expect(offsetGuard.filter(&sought).isEmpty)
        #expect(offsets(sought) == ["0:1", "0:2"])

        // Forgetting also ends a re-read in progress.
        var skipped = batch(partitionA, [5])
        #expect(offsetGuard.filter(&skipped).count == 1)
        offsetGuard.rereadStarted(partitionA)
        offsetGuard.forget([partitionA])
        var fresh = batch(partitionA, [7])
        #expect(offsetGuard.filter(&fresh).isEmpty)
        var gapAfter = batch(partitionA, [9])
        #expect(offsetGuard.filter(&gapAfter).count == 1)
    }
}
