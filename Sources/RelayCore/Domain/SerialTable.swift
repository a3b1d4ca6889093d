import DequeModule

/// Values keyed by serial numbers that are handed out in increasing order and retired mostly in that order
/// (the engine's changelog appends, which the changelog acknowledges partition by partition).
///
/// Why not a Dictionary: a value's slot is its serial minus the oldest one held, so nothing is hashed, and
/// the values sit in issue order rather than scattered over a table (an event waits here once per record).
/// A serial retired out of order leaves a hole until the ones before it are retired too. So that one value
/// held long (an append retried through a partition's outage while the others flow) cannot keep a hole for
/// every serial since, the oldest values move to a dictionary once holes outnumber the values in the slots.
package struct SerialTable<Value>: Sendable where Value: Sendable {
    /// The serial of `slots.first`.
    private var firstSerial: UInt64 = 0
    /// One slot per serial from `firstSerial` on; `nil` once retired (never `nil` at either end).
    private var slots: Deque<Value?> = []
    /// Values below `firstSerial`, moved out of the slots while later serials were retired around them.
    private var stragglers: [UInt64: Value] = [:]
    /// How many values the table holds.
    package private(set) var count = 0
    /// Holes are tolerated up to this many slots, however few the values.
    private static var slotsAlwaysAllowed: Int { 1_024 }

    /// How many slots the table keeps, holes included (for tests of its memory).
    package var slotCount: Int { slots.count }

    package init() {}

    package var isEmpty: Bool { count == 0 }

    /// The value of `serial`. Setting one adds it (a serial not below any held, or the table empty) or
    /// replaces it; setting `nil` retires it.
    package subscript(serial: UInt64) -> Value? {
        get {
            guard serial >= firstSerial else { return stragglers[serial] }
            guard serial - firstSerial < UInt64(slots.count) else { return nil }
            return slots[Int(serial - firstSerial)]
        }
        set {
            guard let newValue else {
                removeValue(forKey: serial)
                return
            }
            if serial < firstSerial, stragglers[serial] != nil {
                stragglers[serial] = newValue
                return
            }
            if slots.isEmpty {
                precondition(stragglers.keys.allSatisfy { $0 < serial }, "serial \(serial) is not above the ones held: serials are handed out in increasing order")
                firstSerial = serial
                slots.append(newValue)
                count += 1
                return
            }
            precondition(serial >= firstSerial, "serial \(serial) is below the oldest held (\(firstSerial)): serials are handed out in increasing order")
            let index = Int(serial - firstSerial)
            if index >= slots.count {
                slots.append(contentsOf: repeatElement(nil, count: index - slots.count))
                slots.append(newValue)
                count += 1
                return
            }
            if slots[index] == nil { count += 1 }
            slots[index] = newValue
        }
    }

    /// Retires `serial`, returning its value (moved out, not copied).
    @discardableResult
    package mutating func removeValue(forKey serial: UInt64) -> Value? {
        guard serial >= firstSerial else {
            let removed = stragglers.removeValue(forKey: serial)
            if removed != nil { count -= 1 }
            return removed
        }
        guard serial - firstSerial < UInt64(slots.count) else { return nil }
        guard let removed = slots[Int(serial - firstSerial)].take() else { return nil }
        count -= 1
        trimRetiredEnds()
        return removed
    }

    /// Drops retired slots at either end, so the ends always hold values; moves the oldest values to the
    /// stragglers while holes outnumber the values in the slots.
    private mutating func trimRetiredEnds() {
        // Compared in place through the subscript (`first` and `last` would copy the value out).
        while !slots.isEmpty, slots[slots.count - 1] == nil { slots.removeLast() }
        while true {
            while !slots.isEmpty, slots[0] == nil {
                slots.removeFirst()
                firstSerial += 1
            }
            let inSlots = count - stragglers.count
            guard slots.count > Self.slotsAlwaysAllowed, slots.count - inSlots > inSlots else { return }
            stragglers[firstSerial] = slots.removeFirst()
            firstSerial += 1
        }
    }

    /// The serials whose values satisfy `predicate`, ascending.
    package func serials(where predicate: (Value) -> Bool) -> [UInt64] {
        stragglers.filter { predicate($0.value) }.keys.sorted()
            + slots.indices.compactMap { index in slots[index].flatMap { predicate($0) ? firstSerial + UInt64(index) : nil } }
    }
}
