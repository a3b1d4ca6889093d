/// A binary min-heap of values by key.
///
/// Package-wide rather than public: the pool's wait deadlines and the relay's seq-gap deadlines both use it, and
/// this is the lowest module they share. Both users leave entries that went stale in place and skip them when
/// they reach the top (removing from the middle of a heap costs more than skipping).
package struct MinHeap<Key: Comparable & Sendable, Value: Sendable>: Sendable {
    package typealias Entry = (key: Key, value: Value)

    private var entries: [Entry] = []

    /// An empty heap.
    package init() {}

    /// A heap of `entries`, built in linear time.
    package init(_ entries: [Entry]) {
        self.entries = entries
        for index in stride(from: entries.count / 2 - 1, through: 0, by: -1) { siftDown(from: index) }
    }

    package var count: Int { entries.count }

    /// The entry with the smallest key.
    package var first: Entry? { entries.first }

    package mutating func insert(_ key: Key, _ value: Value) {
        entries.append((key, value))
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].key < entries[parent].key else { break }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes the entry with the smallest key, if any.
    package mutating func removeFirst() {
        guard !entries.isEmpty else { return }
        entries.swapAt(0, entries.count - 1)
        entries.removeLast()
        siftDown(from: 0)
    }

    private mutating func siftDown(from start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            var smallest = parent
            if left < entries.count, entries[left].key < entries[smallest].key { smallest = left }
            if left + 1 < entries.count, entries[left + 1].key < entries[smallest].key { smallest = left + 1 }
            if smallest == parent { return }
            entries.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
