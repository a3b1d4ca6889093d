package import KafkaCore

/// The relay's per-partition values, found by partition number.
///
/// Why not a Dictionary: the engine looks a partition's state up several times per record, and a
/// Dictionary hashes the key each time. The relay consumes one events topic, so the first topic
/// seen owns an array indexed by partition number; any other topic's partitions (possible, never
/// used by the service) fall back to a Dictionary. Keys come out in ascending order.
package struct PartitionTable<Value>: Sendable where Value: Sendable {
    /// The topic whose partitions live in ``slots``, set by the first insert.
    private var topic: String?
    /// Indexed by partition number; `nil` for a partition that is not in the table.
    private var slots: [Value?] = []
    /// Partitions of any topic other than ``topic``.
    private var others: [TopicPartition: Value] = [:]
    /// How many partitions the table holds.
    package private(set) var count = 0

    package init() {}

    package var isEmpty: Bool { count == 0 }

    /// The slot of `partition` when it belongs to the slots' topic.
    private func slotIndex(of partition: TopicPartition) -> Int? {
        guard partition.partition >= 0, partition.topic == topic else { return nil }
        return Int(partition.partition)
    }

    /// The value of `partition`; setting `nil` removes it.
    package subscript(partition: TopicPartition) -> Value? {
        get {
            if let index = slotIndex(of: partition) { return index < slots.count ? slots[index] : nil }
            return others[partition]
        }
        set {
            if topic == nil, newValue != nil, partition.partition >= 0 { topic = partition.topic }
            if let index = slotIndex(of: partition) {
                if index >= slots.count {
                    guard newValue != nil else { return }
                    slots.append(contentsOf: repeatElement(nil, count: index + 1 - slots.count))
                }
                count += (newValue != nil ? 1 : 0) - (slots[index] != nil ? 1 : 0)
                slots[index] = newValue
            } else {
                count += (newValue != nil ? 1 : 0) - (others[partition] != nil ? 1 : 0)
                others[partition] = newValue
            }
        }
    }

    /// Whether `partition` is in the table (without copying its value).
    package func contains(_ partition: TopicPartition) -> Bool {
        if let index = slotIndex(of: partition) { return index < slots.count && slots[index] != nil }
        return others.index(forKey: partition) != nil
    }

    /// Runs `body` on `partition`'s value in place (no copy of it); `nil` when it is not in the table.
    package mutating func modify<Result>(_ partition: TopicPartition, _ body: (inout Value) -> Result) -> Result? {
        if let index = slotIndex(of: partition) {
            guard index < slots.count, slots[index] != nil else { return nil }
            return body(&slots[index]!)
        }
        guard let index = others.index(forKey: partition) else { return nil }
        return body(&others.values[index])
    }

    /// Removes `partition`, returning its value (moved out, not copied).
    @discardableResult
    package mutating func removeValue(forKey partition: TopicPartition) -> Value? {
        guard let index = slotIndex(of: partition) else {
            let removed = others.removeValue(forKey: partition)
            if removed != nil { count -= 1 }
            return removed
        }
        guard index < slots.count, let removed = slots[index].take() else { return nil }
        count -= 1
        return removed
    }

    /// The partitions in the table, ascending.
    package var keys: [TopicPartition] {
        var keys: [TopicPartition] = []
        keys.reserveCapacity(count)
        if let topic {
            // By index: iterating the slots themselves would copy each partition's state (a retain of each of its tables).
            for index in slots.indices where slots[index] != nil { keys.append(TopicPartition(topic, Int32(index))) }
        }
        keys += others.keys
        return others.isEmpty ? keys : keys.sorted()
    }

    /// Whether every value in the table satisfies `predicate`, each read in place (``values`` copies every one).
    package func allSatisfy(_ predicate: (Value) -> Bool) -> Bool {
        for index in slots.indices where slots[index] != nil {
            if !predicate(slots[index]!) { return false }
        }
        return others.values.allSatisfy(predicate)
    }

    /// The values in the table, in the order of ``keys``.
    package var values: [Value] {
        if others.isEmpty { return slots.compactMap { $0 } }
        return keys.map { self[$0]! }
    }
}
