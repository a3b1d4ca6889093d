import DequeModule
package import NIOCore

/// The pool's wait deadlines, earliest first: a queue for those that come in order and a heap for the rest.
///
/// A request's wait deadline is its start plus the same retry duration (or its `apns-expiration`), so nearly
/// every deadline comes at or after the newest one: those are appended to a queue and taken from its front, O(1),
/// where a heap of the ~16,000 requests a busy pool holds cost two sifts of 14 levels per request. A deadline
/// earlier than the queue's newest (an earlier expiry) goes to the heap; the earliest entry is the earlier of the
/// two fronts. Like the heap it replaces, it keeps the entries of requests that stopped waiting until they reach
/// the front.
package struct WaitDeadlines<Value: Sendable>: Sendable {
    package typealias Entry = (key: NIODeadline, value: Value)

    private var inOrder = Deque<Entry>()
    private var outOfOrder = MinHeap<NIODeadline, Value>()
    /// The heap's count, kept here: the heap is generic code of another module, not specialized here, so the
    /// common case (an empty heap) does not call into it.
    private var outOfOrderCount = 0

    /// None.
    package init() {}

    /// Of `entries`, in any order.
    package init(_ entries: [Entry]) {
        inOrder = Deque(entries.sorted { $0.key < $1.key })
    }

    package var count: Int { inOrder.count + outOfOrderCount }

    /// The entry with the earliest deadline (of two equal ones, the one that came in order).
    package var first: Entry? {
        guard outOfOrderCount > 0, let heapFirst = outOfOrder.first else { return inOrder.first }
        guard let queueFirst = inOrder.first, queueFirst.key <= heapFirst.key else { return heapFirst }
        return queueFirst
    }

    package mutating func insert(_ key: NIODeadline, _ value: Value) {
        if let newest = inOrder.last, key < newest.key {
            outOfOrder.insert(key, value)
            outOfOrderCount += 1
        } else {
            inOrder.append((key, value))
        }
    }

    /// Removes ``first``, if any.
    package mutating func removeFirst() {
        guard outOfOrderCount > 0, let heapFirst = outOfOrder.first else {
            _ = inOrder.popFirst()
            return
        }
        if let queueFirst = inOrder.first, queueFirst.key <= heapFirst.key {
            inOrder.removeFirst()
        } else {
            outOfOrder.removeFirst()
            outOfOrderCount -= 1
        }
    }
}
