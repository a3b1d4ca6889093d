// Bulk records read ahead and set aside before the sequencer, so urgent ones behind them start at once.

import DequeModule

/// Records read from the events partitions and set aside, decoded, before anything else is done with them: bulk
/// records read while the relay already has as many records in process as it may (so an urgent record read behind
/// thousands of them starts at once instead of after them). Taken back in the order they came (``takeNext()``), or
/// a user's all at once, in their order, when an urgent record of that user must start
/// (``takeAll(of:)``: a user's records always start in the order they were read). Pure.
package struct ParkedRecords<Entry: Sendable>: Sendable {
    private struct Parked: Sendable {
        var entry: Entry
        var user: String?
        var bytes: Int
    }

    /// Every parked record by its number; numbers increase in the order records were parked.
    private var byNumber: [UInt64: Parked] = [:]
    /// The numbers in parking order; numbers already taken (by a user's urgent record) are skipped.
    private var order: Deque<UInt64> = []
    /// Per user, the numbers of its parked records in order.
    private var byUser: [String: Deque<UInt64>] = [:]
    private var nextNumber: UInt64 = 0

    /// The bytes the parked records hold, as given to ``park(_:user:bytes:)``.
    package private(set) var bytes = 0

    /// An empty set.
    package init() {}

    /// Records parked.
    package var count: Int { byNumber.count }

    /// Whether none is parked.
    package var isEmpty: Bool { byNumber.isEmpty }

    /// The parked records, in no particular order (for what they hold, not to take them).
    package var entries: some Sequence<Entry> { byNumber.values.lazy.map(\.entry) }

    /// Whether `user` has records parked (a record of the user read now must wait behind them, or take them along).
    package func hasRecords(of user: String) -> Bool { byUser[user] != nil }

    /// Sets `entry` aside, behind every record parked before it; `bytes` is what it holds.
    package mutating func park(_ entry: Entry, user: String?, bytes: Int) {
        let number = nextNumber
        nextNumber += 1
        byNumber[number] = Parked(entry: entry, user: user, bytes: bytes)
        order.append(number)
        if let user { byUser[user, default: []].append(number) }
        self.bytes += bytes
    }

    /// Takes the record parked first.
    package mutating func takeNext() -> Entry? {
        while let number = order.popFirst() {
            guard let parked = byNumber.removeValue(forKey: number) else { continue }
            if let user = parked.user {
                byUser[user]?.removeFirst()
                if byUser[user]?.isEmpty == true { byUser[user] = nil }
            }
            bytes -= parked.bytes
            return parked.entry
        }
        return nil
    }

    /// Takes every record of `user`, in the order parked.
    package mutating func takeAll(of user: String) -> [Entry] {
        guard let numbers = byUser.removeValue(forKey: user) else { return [] }
        return numbers.compactMap { number in
            guard let parked = byNumber.removeValue(forKey: number) else { return nil }
            bytes -= parked.bytes
            return parked.entry
        }
    }

    /// Removes the records `leaving` selects (their partition is handed over: they stay open for the next owner).
    @discardableResult
    package mutating func removeAll(where leaving: (Entry) -> Bool) -> Int {
        let gone = byNumber.filter { leaving($0.value.entry) }
        for (number, parked) in gone {
            byNumber[number] = nil
            bytes -= parked.bytes
            if let user = parked.user {
                byUser[user]?.removeAll { $0 == number }
                if byUser[user]?.isEmpty == true { byUser[user] = nil }
            }
        }
        if byNumber.isEmpty { order.removeAll() }
        return gone.count
    }
}
