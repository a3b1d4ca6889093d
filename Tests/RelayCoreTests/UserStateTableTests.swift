import Testing
@testable import RelayCore

/// The ledger's hash table against Dictionary as the model: random inserts, updates and deletes.
@Suite struct UserStateTableTests {
    @Test func behavesLikeADictionary() {
        for seed in 0..<200 {
            var random = SeededGenerator(seed: UInt64(seed) &+ 4_242)
            var table = UserStateTable()
            var model: [String: UserBadgeState] = [:]
            let keySpace = Int.random(in: 1...300, using: &random)
            for step in 0..<2_000 {
                let key = "u-\(Int.random(in: 0..<keySpace, using: &random))"
                if Int.random(in: 0..<3, using: &random) == 0 {
                    table[key] = nil
                    model[key] = nil
                } else {
                    let state = UserBadgeState(badge: Int64(step), lastSeq: Int64(seed))
                    table[key] = state
                    model[key] = state
                }
                #expect(table.count == model.count, "seed \(seed)")
            }
            for index in 0..<keySpace {
                #expect(table["u-\(index)"] == model["u-\(index)"], "seed \(seed)")
            }
            var seen = 0
            table.forEach { key, state in
                seen += 1
                #expect(model[key] == state, "seed \(seed)")
            }
            #expect(seen == model.count)
            #expect(Double(table.count) <= Double(table.capacity) * 0.8 + 1)
        }
    }

    @Test func ledgerEqualityIgnoresInsertionOrder() {
        var first = BadgeLedger()
        var second = BadgeLedger()
        for index in 0..<100 { first["u\(index)"] = UserBadgeState(badge: Int64(index), lastSeq: 1) }
        for index in (0..<100).reversed() { second["u\(index)"] = UserBadgeState(badge: Int64(index), lastSeq: 1) }
        #expect(first == second)
        second["u5"] = nil
        #expect(first != second)
        #expect(first.allStates.count == 100)
    }

    /// The per-user state stays three words (count, last seq, newest applied offset); the
    /// benchmark's bytes-per-user figure depends on it.
    @Test func userStateIsTwentyFourBytes() {
        #expect(MemoryLayout<UserBadgeState>.size == 24)
    }
}
