// Which offset of a partition may be committed.

import DequeModule

/// Tracks the records of one partition between consume and "all results published".
///
/// Offsets are tracked in increasing order (gaps allowed: compaction, transactions). A record
/// is done when ``markDone(_:)`` is called or its expected results are all published. The
/// committable offset is the first tracked record not done (Kafka's "next offset to read"),
/// or one past the last tracked record when all are done. Completion may arrive in any order.
/// Memory: one 16-byte entry per record not yet passed by the commit point, in a ring (`Deque`)
/// whose low end is dropped as it completes; the service bounds it with `relay.max_in_flight`.
package struct OffsetTracker: Sendable, Equatable {
    private struct Entry: Sendable, Equatable {
        var offset: Int64
        var pendingResults: Int64  // 0 = done
    }

    private var entries: Deque<Entry> = []
    private var committedThrough: Int64?

    /// A tracker starting at `committed`, the partition's committed offset (next offset to read).
    package init(committed: Int64? = nil) {
        committedThrough = committed
    }

    /// Records tracked and not yet below the commit point.
    package var trackedCount: Int { entries.count }

    /// Where the first entry lives while the entries are contiguous: unchanged across an update that neither
    /// appends nor passes the commit point means the update was made in place. Tests check it, because a copy of
    /// the whole window on every record (a second reference to the storage) changes no result, only the cost.
    package var entriesAddress: UnsafeRawPointer? {
        entries.withContiguousStorageIfAvailable { UnsafeRawPointer($0.baseAddress) } ?? nil
    }

    /// The offset to commit: the first record not done, or one past the last when all are done;
    /// `nil` before anything was tracked (and no initial commit was given).
    package var committable: Int64? {
        entries.first?.offset ?? committedThrough
    }

    /// Starts tracking `offset`, done after `expectedResults` results are published (1 by default;
    /// 0 means it is done already, e.g. a record filtered out). Offsets must increase; a repeated
    /// or lower offset is ignored and returns false.
    @discardableResult
    package mutating func track(_ offset: Int64, expectedResults: Int = 1) -> Bool {
        if let last = entries.last, offset <= last.offset { return false }
        if let committedThrough, offset < committedThrough { return false }
        entries.append(Entry(offset: offset, pendingResults: Int64(max(0, expectedResults))))
        compact()
        return true
    }

    /// Adds results to a tracked record that is not done (fan-out learned later).
    @discardableResult
    package mutating func expectMore(_ offset: Int64, results: Int) -> Bool {
        guard let index = position(of: offset), entries[index].pendingResults > 0 else { return false }
        entries[index].pendingResults += Int64(max(0, results))
        return true
    }

    /// One result of `offset` was published. Returns false for an unknown or finished offset.
    @discardableResult
    package mutating func resultPublished(_ offset: Int64) -> Bool {
        guard let index = position(of: offset), entries[index].pendingResults > 0 else { return false }
        entries[index].pendingResults -= 1
        compact()
        return true
    }

    /// `offset` is done whatever results it still expected (e.g. sent to the dead-letter topic).
    @discardableResult
    package mutating func markDone(_ offset: Int64) -> Bool {
        guard let index = position(of: offset), entries[index].pendingResults > 0 else { return false }
        entries[index].pendingResults = 0
        compact()
        return true
    }

    /// True when `offset` is tracked and not done.
    package func isPending(_ offset: Int64) -> Bool {
        guard let index = position(of: offset) else { return false }
        return entries[index].pendingResults > 0
    }

    /// Offsets tracked and not done, ascending, as runs of consecutive offsets.
    package func pendingRuns() -> [ClosedRange<Int64>] {
        var runs: [ClosedRange<Int64>] = []
        for entry in entries where entry.pendingResults > 0 {
            if let last = runs.last, last.upperBound &+ 1 == entry.offset {
                runs[runs.count - 1] = last.lowerBound...entry.offset
            } else {
                runs.append(entry.offset...entry.offset)
            }
        }
        return runs
    }

    private func position(of offset: Int64) -> Int? {
        var low = 0
        var high = entries.count - 1
        while low <= high {
            let middle = (low + high) / 2
            if entries[middle].offset == offset { return middle }
            if entries[middle].offset < offset { low = middle + 1 } else { high = middle - 1 }
        }
        return nil
    }

    /// Advances past the done prefix.
    private mutating func compact() {
        while let first = entries.first, first.pendingResults == 0 {
            committedThrough = first.offset + 1
            entries.removeFirst()
        }
    }
}
