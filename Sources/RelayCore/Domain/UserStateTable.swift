// The ledger's table: user → state, open addressing with linear probing.
//
// Why not Dictionary: its load factor stays between 3/8 and 3/4 (it doubles), so right after a
// doubling a user costs ~86 bytes; the target is 64 beyond the key. This table fills to 80% and
// grows by half, so it stays between 53% and 80% full: 40-60 bytes per user including the
// 16-byte key. Deletion shifts entries back (no tombstones), so lookups stay short. Swift's
// hashing is seeded per process, so crafted user ids cannot be made to pile up in one run.
// Keys compare and hash as UTF-8 bytes (``UserKey``), never by canonical equivalence.

struct UserStateTable: Sendable {
    private var keys: [String?] = []
    private var values: [UserBadgeState] = []
    private(set) var count = 0

    private static let maximumLoad = 0.8

    var capacity: Int { keys.count }

    private func home(of key: String, capacity: Int) -> Int {
        // Multiply-shift maps the full hash onto [0, capacity) without a power-of-two capacity.
        let hash = UInt64(bitPattern: Int64(UserKey(key).hashValue))
        return Int(hash.multipliedFullWidth(by: UInt64(capacity)).high)
    }

    private func slot(of key: String) -> Int? {
        guard count > 0 else { return nil }
        var index = home(of: key, capacity: capacity)
        while let stored = keys[index] {
            if UserKey.sameBytes(stored, key) { return index }
            index += 1
            if index == capacity { index = 0 }
        }
        return nil
    }

    subscript(key: String) -> UserBadgeState? {
        get { slot(of: key).map { values[$0] } }
        set {
            if let newValue { insert(key, newValue) } else { remove(key) }
        }
    }

    mutating func reserveCapacity(_ minimumCount: Int) {
        let needed = Int((Double(minimumCount) / Self.maximumLoad).rounded(.up)) + 1
        if needed > capacity { resize(to: needed) }
    }

    func forEach(_ body: (String, UserBadgeState) -> Void) {
        for index in 0..<capacity {
            if let key = keys[index] { body(key, values[index]) }
        }
    }

    private mutating func insert(_ key: String, _ value: UserBadgeState) {
        if let index = slot(of: key) {
            values[index] = value
            return
        }
        if Double(count + 1) > Double(capacity) * Self.maximumLoad {
            resize(to: max(16, capacity + capacity / 2))
        }
        var index = home(of: key, capacity: capacity)
        while keys[index] != nil {
            index += 1
            if index == capacity { index = 0 }
        }
        keys[index] = key
        values[index] = value
        count += 1
    }

    private mutating func remove(_ key: String) {
        guard var hole = slot(of: key) else { return }
        keys[hole] = nil
        count -= 1
        // Backward shift: pull later entries of the run into the hole when that keeps them
        // reachable from their home slot, so no lookup ever stops early at the hole.
        var index = hole
        while true {
            index += 1
            if index == capacity { index = 0 }
            guard let candidate = keys[index] else { return }
            let candidateHome = home(of: candidate, capacity: capacity)
            let distanceToHole = (hole - candidateHome + capacity) % capacity
            let distanceToIndex = (index - candidateHome + capacity) % capacity
            if distanceToHole < distanceToIndex {
                keys[hole] = candidate
                values[hole] = values[index]
                keys[index] = nil
                hole = index
            }
        }
    }

    private mutating func resize(to newCapacity: Int) {
        let oldKeys = keys
        let oldValues = values
        keys = [String?](repeating: nil, count: newCapacity)
        values = [UserBadgeState](repeating: UserBadgeState(badge: 0, lastSeq: 0), count: newCapacity)
        count = 0
        for index in oldKeys.indices {
            guard let key = oldKeys[index] else { continue }
            var slot = home(of: key, capacity: newCapacity)
            while keys[slot] != nil {
                slot += 1
                if slot == newCapacity { slot = 0 }
            }
            keys[slot] = key
            values[slot] = oldValues[index]
            count += 1
        }
    }
}
