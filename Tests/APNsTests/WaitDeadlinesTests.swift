import APNs
import NIOCore
import Testing

@Suite("The pool's wait deadlines")
struct WaitDeadlinesTests {
    let t0 = NIODeadline.uptimeNanoseconds(1_000_000_000)

    /// Drains `deadlines` earliest first.
    private func drained(_ deadlines: inout WaitDeadlines<Int>) -> [NIODeadline] {
        var keys: [NIODeadline] = []
        while let first = deadlines.first {
            keys.append(first.key)
            deadlines.removeFirst()
        }
        return keys
    }

    @Test("deadlines in order and out of order come out earliest first, equal ones in the order they came")
    func mixedOrder() {
        var deadlines = WaitDeadlines<Int>()
        for (value, seconds) in [(0, 10), (1, 20), (2, 5), (3, 20), (4, 30), (5, 15), (6, 5)] {
            deadlines.insert(t0 + .seconds(Int64(seconds)), value)
        }
        #expect(deadlines.count == 7)
        var values: [Int] = []
        while let first = deadlines.first {
            values.append(first.value)
            deadlines.removeFirst()
        }
        #expect(values == [2, 6, 0, 5, 1, 3, 4])
        #expect(deadlines.count == 0 && deadlines.first == nil)
    }

    @Test("random inserts and removals agree with a sorted list at every step")
    func agreesWithSortedList() {
        var random = SplitMix64(seed: 41)
        var deadlines = WaitDeadlines<Int>()
        var reference: [NIODeadline] = []
        var newest = t0
        for value in 0..<5_000 {
            if random.next() % 3 == 0, let first = deadlines.first {
                #expect(first.key == reference.min())
                deadlines.removeFirst()
                reference.remove(at: reference.firstIndex(of: first.key)!)
                continue
            }
            // Mostly at or after the newest (a start plus the same wait), sometimes earlier (an expiry).
            let key: NIODeadline
            if random.next() % 10 == 0 {
                key = t0 + .milliseconds(Int64(random.next() % 100_000))
            } else {
                newest = newest + .milliseconds(Int64(random.next() % 3))
                key = newest
            }
            deadlines.insert(key, value)
            reference.append(key)
            #expect(deadlines.count == reference.count)
        }
        #expect(drained(&deadlines) == reference.sorted())
    }

    @Test("built from entries in any order, it yields them earliest first")
    func builtFromEntries() {
        var deadlines = WaitDeadlines<Int>([(t0 + .seconds(3), 0), (t0 + .seconds(1), 1), (t0 + .seconds(2), 2)])
        deadlines.insert(t0 + .seconds(1), 3)
        #expect(drained(&deadlines) == [t0 + .seconds(1), t0 + .seconds(1), t0 + .seconds(2), t0 + .seconds(3)])
    }
}
