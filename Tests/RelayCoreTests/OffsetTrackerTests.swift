import Testing
@testable import RelayCore

@Suite struct OffsetTrackerTests {
    @Test func committableIsFirstNotDone() {
        var tracker = OffsetTracker()
        #expect(tracker.committable == nil)
        for offset in Int64(10)...14 { tracker.track(offset) }
        #expect(tracker.committable == 10)
        tracker.markDone(12)
        tracker.markDone(11)
        #expect(tracker.committable == 10)
        tracker.markDone(10)
        #expect(tracker.committable == 13)
        tracker.markDone(14)
        tracker.markDone(13)
        #expect(tracker.committable == 15)
        #expect(tracker.trackedCount == 0)
    }

    @Test func recordIsDoneWhenAllResultsArePublished() {
        var tracker = OffsetTracker(committed: 5)
        #expect(tracker.committable == 5)
        tracker.track(5, expectedResults: 2)
        tracker.track(7, expectedResults: 0)  // gap in offsets; nothing to publish
        tracker.resultPublished(5)
        #expect(tracker.committable == 5)
        tracker.expectMore(5, results: 1)
        tracker.resultPublished(5)
        #expect(tracker.isPending(5))
        tracker.resultPublished(5)
        #expect(tracker.committable == 8)
        do { let result = tracker.resultPublished(5); #expect(!result) }
    }

    @Test func repeatedOrLowerOffsetsAreRefused() {
        var tracker = OffsetTracker(committed: 3)
        do { let result = tracker.track(2); #expect(!result) }
        do { let result = tracker.track(3); #expect(result) }
        do { let result = tracker.track(3); #expect(!result) }
        tracker.markDone(3)
        do { let result = tracker.track(3); #expect(!result) }
        do { let result = tracker.track(4); #expect(result) }
    }

    @Test func memoryIsCompactedAsTheLowEndCompletes() {
        var tracker = OffsetTracker()
        for offset in Int64(0)..<100_000 {
            tracker.track(offset)
            if offset >= 10 { tracker.markDone(offset - 10) }
            #expect(tracker.trackedCount <= 11)
        }
    }

    /// Random completion orders: the committed offset never passes an unfinished record.
    @Test func randomCompletionOrdersNeverCommitPastUnfinished() {
        for seed in 0..<1_000 {
            var random = SeededGenerator(seed: UInt64(seed) &+ 0xC0FFEE)
            var tracker = OffsetTracker()
            var offset: Int64 = Int64.random(in: 0..<1_000, using: &random)
            var pending: [Int64: Int] = [:]
            var lastCommitted: Int64 = -1
            var lastTracked: Int64?
            for _ in 0..<Int.random(in: 1..<200, using: &random) {
                if pending.isEmpty || Int.random(in: 0..<3, using: &random) == 0 {
                    let results = Int.random(in: 0...3, using: &random)
                    tracker.track(offset, expectedResults: results)
                    if results > 0 { pending[offset] = results }
                    lastTracked = offset
                    offset += Int64.random(in: 1...3, using: &random)
                } else if let target = pending.keys.randomElement(using: &random) {
                    tracker.resultPublished(target)
                    pending[target]! -= 1
                    if pending[target] == 0 { pending[target] = nil }
                }
                if let committable = tracker.committable {
                    #expect(pending.keys.allSatisfy { $0 >= committable }, "seed \(seed)")
                    #expect(committable >= lastCommitted, "seed \(seed)")
                    if let lowest = pending.keys.min() { #expect(committable == lowest, "seed \(seed)") }
                    lastCommitted = committable
                }
            }
            for target in pending.keys.sorted(by: >) { tracker.markDone(target) }
            #expect(tracker.committable == lastTracked.map { $0 + 1 }, "seed \(seed)")
            #expect(tracker.trackedCount == 0, "seed \(seed)")
        }
    }
}
