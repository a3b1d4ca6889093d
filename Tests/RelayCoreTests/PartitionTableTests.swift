import KafkaCore
import Testing

@testable import RelayCore

@Suite("The partition table")
struct PartitionTableTests {
    static func events(_ partition: Int32) -> TopicPartition { TopicPartition("push.events", partition) }

    @Test("holds what is set, by partition, and forgets what is removed; keys come out ascending whatever the insert order")
    func setGetRemove() {
        var table = PartitionTable<String>()
        #expect(table.isEmpty && table.keys.isEmpty && table[Self.events(0)] == nil)
        for partition: Int32 in [7, 2, 31, 0] { table[Self.events(partition)] = "p\(partition)" }
        #expect(table.count == 4)
        #expect(table.keys == [0, 2, 7, 31].map(Self.events))
        #expect(table.values == ["p0", "p2", "p7", "p31"])
        #expect(table[Self.events(7)] == "p7" && table[Self.events(3)] == nil && table[Self.events(32)] == nil)
        #expect(table.contains(Self.events(2)) && !table.contains(Self.events(1)) && !table.contains(Self.events(99)))

        table[Self.events(7)] = "again"
        #expect(table.count == 4 && table[Self.events(7)] == "again")
        #expect(table.removeValue(forKey: Self.events(2)) == "p2")
        #expect(table.removeValue(forKey: Self.events(2)) == nil)
        table[Self.events(40)] = nil
        #expect(table.count == 3 && table.keys == [0, 7, 31].map(Self.events))
    }

    @Test("another topic's partitions are kept apart from the first topic's, and keys stay in order across both")
    func otherTopic() {
        var table = PartitionTable<Int>()
        table[Self.events(1)] = 1
        table[TopicPartition("another", 1)] = 100
        table[TopicPartition("a-first", 0)] = 50
        #expect(table.count == 3)
        #expect(table[Self.events(1)] == 1 && table[TopicPartition("another", 1)] == 100)
        #expect(table.keys == [TopicPartition("a-first", 0), TopicPartition("another", 1), Self.events(1)])
        #expect(table.values == [50, 100, 1])
        #expect(table.modify(TopicPartition("another", 1)) { $0 += 1; return $0 } == 101)
        #expect(table.removeValue(forKey: TopicPartition("another", 1)) == 101)
        #expect(!table.contains(TopicPartition("another", 1)) && table.count == 2)
    }

    @Test("allSatisfy asks about every value of both topics' partitions, and is true for an empty table")
    func allSatisfy() {
        var table = PartitionTable<Int>()
        #expect(table.allSatisfy { _ in false })
        table[Self.events(4)] = 2
        table[Self.events(9)] = 4
        #expect(table.allSatisfy { $0.isMultiple(of: 2) })
        #expect(!table.allSatisfy { $0 < 4 })
        table[TopicPartition("another", 0)] = 5
        #expect(!table.allSatisfy { $0.isMultiple(of: 2) }, "a partition of another topic counts too")
        table[TopicPartition("another", 0)] = 6
        table[Self.events(4)] = nil
        #expect(table.allSatisfy { $0.isMultiple(of: 2) } && !table.allSatisfy { $0 == 4 })
    }

    @Test("modify changes the value in place (no copy of its storage) and is nil for a partition not in the table")
    func modifyInPlace() {
        var table = PartitionTable<[Int]>()
        var values: [Int] = []
        values.reserveCapacity(64)
        values.append(1)
        table[Self.events(3)] = values
        values = []
        let before = table.modify(Self.events(3)) { $0.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) } }
        let after = table.modify(Self.events(3)) { stored -> UInt in
            stored.append(2)
            return stored.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) }
        }
        #expect(before != nil && before == after)
        #expect(table[Self.events(3)] == [1, 2])
        #expect(table.modify(Self.events(4)) { $0.append(9) } == nil && table[Self.events(4)] == nil)
    }
}
