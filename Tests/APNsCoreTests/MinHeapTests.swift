@testable import APNsCore
import Testing

@Suite("MinHeap: the smallest key first")
struct MinHeapTests {
    /// Drains `heap` smallest first.
    private func drained<Value: Sendable>(_ heap: inout MinHeap<Int, Value>) -> [(key: Int, value: Value)] {
        var entries: [(key: Int, value: Value)] = []
        while let first = heap.first {
            entries.append(first)
            heap.removeFirst()
        }
        return entries
    }

    @Test("an empty heap has no first entry, and removing from it is a no-op after which inserts work as usual")
    func empty() {
        var heap = MinHeap<Int, String>()
        #expect(heap.count == 0 && heap.first == nil)
        heap.removeFirst()
        heap.removeFirst()
        #expect(heap.count == 0 && heap.first == nil)
        heap.insert(3, "three")
        heap.insert(1, "one")
        #expect(heap.count == 2 && heap.first?.key == 1 && heap.first?.value == "one")
        heap.removeFirst()
        heap.removeFirst()
        heap.removeFirst()
        #expect(heap.count == 0 && heap.first == nil)
    }

    @Test("random inserts and removals agree with a sorted array at every step, and each value leaves with its own key")
    func agreesWithSortedArray() {
        var random = SplitMix64(seed: 7_311)
        var heap = MinHeap<Int, Int>()
        // The model: the keys held, ascending; and each value's key.
        var sortedKeys: [Int] = []
        var keyOfValue: [Int: Int] = [:]
        for value in 0..<20_000 {
            // Removals a little rarer than inserts, so the heap grows and shrinks through many sizes.
            if random.next() % 5 < 2 {
                if let first = heap.first {
                    #expect(first.key == sortedKeys.first)
                    #expect(keyOfValue.removeValue(forKey: first.value) == first.key, "value \(first.value) left with another key")
                    sortedKeys.removeFirst()
                } else {
                    #expect(sortedKeys.isEmpty)
                }
                heap.removeFirst()
            } else {
                // A small key space: many equal keys.
                let key = Int(random.next() % 500) - 250
                heap.insert(key, value)
                sortedKeys.insert(key, at: sortedKeys.firstIndex { $0 > key } ?? sortedKeys.count)
                keyOfValue[value] = key
            }
            #expect(heap.count == sortedKeys.count)
            #expect(heap.first?.key == sortedKeys.first)
        }
        let rest = drained(&heap)
        #expect(rest.map { $0.key } == sortedKeys)
        #expect(rest.allSatisfy { keyOfValue[$0.value] == $0.key } && rest.count == keyOfValue.count)
    }

    @Test("built from entries in any order, of any size (0, 1, 2, odd, even), it yields their keys ascending with every value once")
    func builtFromEntries() {
        var random = SplitMix64(seed: 99)
        for size in 0...64 {
            let entries = (0..<size).map { index in (key: Int(random.next() % 20), value: index) }
            var heap = MinHeap<Int, Int>(entries.shuffled(using: &random))
            #expect(heap.count == size)
            let out = drained(&heap)
            #expect(out.map { $0.key } == entries.map { $0.key }.sorted(), "size \(size)")
            #expect(out.map { $0.value }.sorted() == Array(0..<size), "size \(size)")
            #expect(out.allSatisfy { $0.key == entries[$0.value].key }, "size \(size)")
        }
    }

    @Test("a heap built in one go and one filled by inserts yield the same keys in the same order")
    func buildAgreesWithInserts() {
        var random = SplitMix64(seed: 5)
        let entries = (0..<1_000).map { index in (key: Int(random.next() % 10_000), value: index) }
        var built = MinHeap<Int, Int>(entries)
        var inserted = MinHeap<Int, Int>()
        for entry in entries { inserted.insert(entry.key, entry.value) }
        #expect(drained(&built).map { $0.key } == drained(&inserted).map { $0.key })
    }

    @Test("entries with one key all come out, each value exactly once")
    func equalKeys() {
        var heap = MinHeap<Int, Int>()
        for value in 0..<100 { heap.insert(42, value) }
        heap.insert(41, -1)
        let out = drained(&heap)
        #expect(out.first?.value == -1)
        #expect(out.dropFirst().allSatisfy { $0.key == 42 })
        #expect(Set(out.dropFirst().map { $0.value }) == Set(0..<100) && out.count == 101)
    }

    @Test("a heap is a value: draining a copy leaves the original as it was")
    func valueSemantics() {
        var original = MinHeap<Int, String>()
        for (key, value) in [(5, "e"), (1, "a"), (3, "c")] { original.insert(key, value) }
        var copy = original
        #expect(drained(&copy).map { $0.value } == ["a", "c", "e"])
        #expect(original.count == 3 && original.first?.value == "a")
        original.insert(0, "z")
        #expect(copy.count == 0 && original.first?.value == "z")
    }

    @Test("keys of any Comparable type: strings in lexicographic order, extremes of Int at either end")
    func otherKeys() {
        var words = MinHeap<String, Int>()
        for (index, word) in ["pear", "apple", "fig", "Zebra", "apple pie", ""].enumerated() { words.insert(word, index) }
        var order: [String] = []
        while let first = words.first {
            order.append(first.key)
            words.removeFirst()
        }
        #expect(order == ["", "Zebra", "apple", "apple pie", "fig", "pear"])
        var extremes = MinHeap<Int, Int>([(.max, 0), (0, 1), (.min, 2), (-1, 3)])
        #expect(drained(&extremes).map { $0.key } == [.min, -1, 0, .max])
    }
}
