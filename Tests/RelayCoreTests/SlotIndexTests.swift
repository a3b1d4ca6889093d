import Testing

@testable import RelayCore

@Suite("Slot index: a hash index into an array that holds the keys")
struct SlotIndexTests {
    /// An array of keys by slot and the index over it, as the registry and the dispatcher keep them; `hash` picks
    /// each key's 32 hash bits, so a test can make keys collide or sit at the end of the buckets.
    struct Table {
        var index = SlotIndex()
        var keys: [Int?] = []
        let hash: (Int) -> UInt32

        func slot(of key: Int) -> Int32? {
            index.first(hash: hash(key)) { keys[Int($0)] == key }
        }

        mutating func insert(_ key: Int) {
            let slot = keys.firstIndex(of: nil) ?? keys.count
            if slot == keys.count { keys.append(key) } else { keys[slot] = key }
            index.insert(hash: hash(key), slot: Int32(slot))
        }

        mutating func remove(_ key: Int) {
            let slot = Int(slot(of: key)!)
            index.remove(hash: hash(key), slot: Int32(slot))
            keys[slot] = nil
        }

        /// Moves `key` to a free slot (or a new one), as a compaction does.
        mutating func move(_ key: Int) {
            let old = Int(slot(of: key)!)
            let new = keys.firstIndex(of: nil) ?? keys.count
            if new == keys.count { keys.append(key) } else { keys[new] = key }
            index.replace(hash: hash(key), slot: Int32(old), with: Int32(new))
            keys[old] = nil
        }

        /// The slots the index holds, ascending.
        var indexedSlots: [Int32] {
            var slots: [Int32] = []
            _ = index.allSlots { slots.append($0); return true }
            return slots.sorted()
        }

        var liveSlots: [Int32] { keys.indices.filter { keys[$0] != nil }.map { Int32($0) } }
    }

    @Test("an empty index finds nothing without comparing a key, and holds no slot")
    func empty() {
        let index = SlotIndex()
        var compared = 0
        #expect(index.first(hash: 0) { _ in compared += 1; return true } == nil)
        #expect(index.first(hash: .max) { _ in compared += 1; return true } == nil)
        #expect(compared == 0 && index.count == 0 && index.capacity == 0)
        #expect(index.allSlots { _ in false })
    }

    @Test("it grows by half from 16 buckets and stays at most 80% full")
    func growth() {
        var table = Table(hash: { SlotIndex.hashBits(of: $0) })
        var capacities: [Int] = []
        for key in 0..<1_000 {
            table.insert(key)
            if capacities.last != table.index.capacity { capacities.append(table.index.capacity) }
            #expect(Double(table.index.count) <= Double(table.index.capacity) * 0.8)
        }
        #expect(Array(capacities.prefix(5)) == [16, 24, 36, 54, 81])
        #expect(table.index.count == 1_000)
        // Removals never shrink it.
        for key in 0..<1_000 { table.remove(key) }
        #expect(table.index.count == 0 && table.index.capacity == capacities.last && table.indexedSlots.isEmpty)
    }

    @Test("a lookup compares only slots stored under the same hash bits, and returns the first whose key matches")
    func comparesOnlyMatchingHashes() {
        var table = Table(hash: { UInt32($0 % 3) })
        for key in 0..<12 { table.insert(key) }
        var asked: [Int32] = []
        let found = table.index.first(hash: 1) { slot in
            asked.append(slot)
            return table.keys[Int(slot)] == 7
        }
        #expect(found == 7)
        #expect(!asked.isEmpty && asked.allSatisfy { table.keys[Int($0)]! % 3 == 1 })
        // A hash no key has: nothing compared, nothing found.
        var comparedForAbsent = 0
        #expect(table.index.first(hash: 99) { _ in comparedForAbsent += 1; return true } == nil && comparedForAbsent == 0)
        // Hash bits alone never match: the key decides.
        #expect(table.index.first(hash: 2) { _ in false } == nil)
    }

    @Test("random inserts, removals and moves agree with the slot array, with real hashes, with everything in a few hash values, and with hashes that wrap around the end",
          arguments: ["real", "few", "high"])
    func agreesWithTheSlotArray(hashes: String) {
        let hash: (Int) -> UInt32
        switch hashes {
        case "real": hash = { SlotIndex.hashBits(of: $0) }
        // Three hash values: long runs of one hash, lookups that step over other keys of the same bits.
        case "few": hash = { UInt32($0 % 3) &* 0x5555_5555 }
        // Home buckets at the very end: probe runs wrap to bucket 0, backward shifts across the end.
        default: hash = { UInt32.max - UInt32($0 % 64) }
        }
        var random = SeededGenerator(seed: 8_080)
        var table = Table(hash: hash)
        var live: Set<Int> = []
        for step in 0..<6_000 {
            let roll = Int.random(in: 0..<10, using: &random)
            if roll < 5 || live.isEmpty {
                let key = Int.random(in: 0..<600, using: &random)
                if !live.contains(key) {
                    table.insert(key)
                    live.insert(key)
                }
            } else if roll < 8 {
                let key = live.randomElement(using: &random)!
                table.remove(key)
                live.remove(key)
            } else {
                table.move(live.randomElement(using: &random)!)
            }
            #expect(table.index.count == live.count, "step \(step)")
            if step % 97 == 0 || step == 5_999 {
                for key in live { #expect(table.slot(of: key).map { table.keys[Int($0)] } == key, "step \(step) key \(key)") }
                for key in 600..<620 { #expect(table.slot(of: key) == nil, "step \(step)") }
                #expect(table.indexedSlots == table.liveSlots, "step \(step)")
            }
        }
        // Emptied one by one in random order, every remaining key stays reachable until its own removal.
        for key in live.shuffled(using: &random) {
            #expect(table.slot(of: key) != nil)
            table.remove(key)
        }
        #expect(table.index.count == 0 && table.indexedSlots.isEmpty)
    }

    @Test("removing from the middle of a run that wraps past the last bucket keeps every later key of the run reachable")
    func backwardShiftAcrossTheEnd() {
        // Every key's home is the last bucket: the run fills it, then buckets 0, 1, 2, ...
        var table = Table(hash: { _ in .max })
        for key in 0..<10 { table.insert(key) }
        #expect(table.index.capacity == 16)
        for removed in [0, 5, 1, 9] {
            table.remove(removed)
            for key in 0..<10 where table.keys.contains(key) {
                #expect(table.slot(of: key).map { table.keys[Int($0)] } == key, "after removing \(removed)")
            }
        }
        #expect(table.index.count == 6 && table.indexedSlots == table.liveSlots)
    }

    @Test("replacing points the key's entry at its new slot and leaves the others and the count as they were")
    func replace() {
        var table = Table(hash: { UInt32($0) << 28 })
        for key in 0..<8 { table.insert(key) }
        table.move(3)
        #expect(table.slot(of: 3) == 8 && table.keys[3] == nil && table.index.count == 8)
        #expect((0..<8).allSatisfy { table.slot(of: $0).map { table.keys[Int($0)] } == $0 })
        table.insert(100)
        #expect(table.slot(of: 100) == 3)
    }

    @Test("hash bits are the high 32 bits of the key's hash: equal keys get equal bits, and keys equal as strings but not as bytes are told apart by the key compare")
    func hashBits() {
        #expect(SlotIndex.hashBits(of: UserKey("u-1")) == SlotIndex.hashBits(of: UserKey(String("u-" + "1"))))
        let key = "some user"
        #expect(SlotIndex.hashBits(of: key) == UInt32(truncatingIfNeeded: UInt64(bitPattern: Int64(key.hashValue)) >> 32))
        // Two users whose ids Swift calls equal, indexed under their own bits, stay two entries.
        let composed = "caf\u{E9}", decomposed = "cafe\u{301}"
        var index = SlotIndex()
        let users = [UserKey(composed), UserKey(decomposed)]
        for (slot, user) in users.enumerated() { index.insert(hash: SlotIndex.hashBits(of: user), slot: Int32(slot)) }
        for (slot, user) in users.enumerated() {
            #expect(index.first(hash: SlotIndex.hashBits(of: user)) { users[Int($0)] == user } == Int32(slot))
        }
    }
}
