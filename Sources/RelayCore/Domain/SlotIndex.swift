// A hash index into an array that holds the keys itself: 8 bytes a bucket.
//
// Why not Dictionary: the registry's entries already hold each token and user, so a second copy
// of the key in the index (up to 33 bytes for a token, 16 for a user) would be waste, and a
// Dictionary falls to 37.5% full when it doubles. A bucket here is the slot plus 32 bits of the
// key's hash, which skip nearly every mismatch without reading the entry. Linear probing, filled
// to 80% and grown by half (like `UserStateTable`), backward-shift deletion (no tombstones). The
// home bucket comes from the stored hash bits, so growing and deleting never read a key again.
// Swift's hashing is seeded per process, so crafted keys cannot be made to pile up in one run.

struct SlotIndex: Sendable {
    /// 0 for an empty bucket, else the hash bits << 32 | (slot + 1).
    private var buckets: [UInt64] = []
    private(set) var count = 0

    private static let maximumLoad = 0.8

    /// The 32 bits of `key`'s hash that the index stores and probes with.
    static func hashBits(of key: some Hashable) -> UInt32 {
        UInt32(truncatingIfNeeded: UInt64(bitPattern: Int64(key.hashValue)) >> 32)
    }

    var capacity: Int { buckets.count }

    private static func bucket(hash: UInt32, slot: Int32) -> UInt64 {
        precondition(slot >= 0 && slot < Int32.max, "slot \(slot) out of range")
        return UInt64(hash) << 32 | UInt64(slot + 1)
    }

    private static func slot(in bucket: UInt64) -> Int32 { Int32(truncatingIfNeeded: bucket & 0xFFFF_FFFF) - 1 }

    private static func hash(in bucket: UInt64) -> UInt32 { UInt32(truncatingIfNeeded: bucket >> 32) }

    private static func home(of hash: UInt32, capacity: Int) -> Int {
        // Multiply-shift maps the 32 bits onto [0, capacity) without a power-of-two capacity.
        Int(truncatingIfNeeded: (UInt64(hash) * UInt64(capacity)) >> 32)
    }

    /// The first slot with hash bits `hash` for which `matches` holds (it compares the slot's key).
    func first(hash: UInt32, where matches: (Int32) -> Bool) -> Int32? {
        guard count > 0 else { return nil }
        var index = Self.home(of: hash, capacity: capacity)
        while true {
            let bucket = buckets[index]
            if bucket == 0 { return nil }
            if Self.hash(in: bucket) == hash, matches(Self.slot(in: bucket)) { return Self.slot(in: bucket) }
            index += 1
            if index == capacity { index = 0 }
        }
    }

    /// True when `body` holds for every slot in the index.
    func allSlots(_ body: (Int32) -> Bool) -> Bool {
        buckets.allSatisfy { $0 == 0 || body(Self.slot(in: $0)) }
    }

    /// Adds `slot` under `hash`; its key must not be in the index yet.
    mutating func insert(hash: UInt32, slot: Int32) {
        if Double(count + 1) > Double(capacity) * Self.maximumLoad {
            resize(to: max(16, capacity + capacity / 2))
        }
        Self.place(Self.bucket(hash: hash, slot: slot), in: &buckets)
        count += 1
    }

    /// Points the entry of `slot` (under `hash`) at `newSlot`, which holds the same key.
    mutating func replace(hash: UInt32, slot: Int32, with newSlot: Int32) {
        buckets[position(hash: hash, slot: slot)] = Self.bucket(hash: hash, slot: newSlot)
    }

    /// Removes the entry of `slot` (under `hash`).
    mutating func remove(hash: UInt32, slot: Int32) {
        var hole = position(hash: hash, slot: slot)
        buckets[hole] = 0
        count -= 1
        // Backward shift: pull later entries of the run into the hole when that keeps them
        // reachable from their home bucket, so no lookup ever stops early at the hole.
        var index = hole
        while true {
            index += 1
            if index == capacity { index = 0 }
            let candidate = buckets[index]
            if candidate == 0 { return }
            let home = Self.home(of: Self.hash(in: candidate), capacity: capacity)
            if (hole - home + capacity) % capacity < (index - home + capacity) % capacity {
                buckets[hole] = candidate
                buckets[index] = 0
                hole = index
            }
        }
    }

    /// Where the entry of `slot` under `hash` is; it must be in the index.
    private func position(hash: UInt32, slot: Int32) -> Int {
        let wanted = Self.bucket(hash: hash, slot: slot)
        var index = Self.home(of: hash, capacity: capacity)
        while buckets[index] != wanted {
            precondition(buckets[index] != 0, "slot \(slot) is not in the index")
            index += 1
            if index == capacity { index = 0 }
        }
        return index
    }

    /// Puts `bucket` in the first empty bucket from its home on.
    private static func place(_ bucket: UInt64, in buckets: inout [UInt64]) {
        var index = home(of: hash(in: bucket), capacity: buckets.count)
        while buckets[index] != 0 {
            index += 1
            if index == buckets.count { index = 0 }
        }
        buckets[index] = bucket
    }

    private mutating func resize(to newCapacity: Int) {
        var resized = [UInt64](repeating: 0, count: newCapacity)
        for bucket in buckets where bucket != 0 { Self.place(bucket, in: &resized) }
        buckets = resized
    }
}
