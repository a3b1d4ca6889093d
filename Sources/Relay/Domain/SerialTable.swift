import DequeModule

/// Values keyed by serial numbers that are handed out in increasing order and retired mostly in that order
/// (the engine's changelog appends, which the changelog acknowledges partition by partition).
///
/// Why not a Dictionary: a value's slot is its serial minus the oldest one held, so nothing is hashed, and
/// the values sit in issue order rather than scattered over a table (an event waits here once per record).
/// A serial retired out of order leaves a hole until the ones before it are retired too.
package struct SerialTable<Value>: Sendable where Value: Sendable {
    /// The serial of `slots.first`.
    private var firstSerial: UInt64 = 0
    /// One slot per serial from `firstSerial` on; `nil` once retired (never `nil` at either end).
    private var slots: Deque<Value?> = []
    /// How many values the table holds.
    package private(set) var count = 0

    package init() {}

    package var isEmpty: Bool { count == 0 }

    /// The value of `serial`. Setting one adds it (a serial not below any held, or the table empty) or
    /// replaces it; setting `nil` retires it.
    package subscript(serial: UInt64) -> Value? {
        get {
            guard serial >= firstSerial, serial - firstSerial < UInt64(slots.count) else { return nil }
            return slots[Int(serial - firstSerial)]
        }
        set {
            if slots.isEmpty {
                guard let newValue else { return }
                firstSerial = serial
                slots.append(newValue)
                count = 1
                return
            }
            guard serial >= firstSerial else {
                precondition(newValue == nil, "serial \(serial) is below the oldest held (\(firstSerial)): serials are handed out in increasing order")
                return
            }
            let index = Int(serial - firstSerial)
            if index >= slots.count {
                guard let newValue else { return }
                slots.append(contentsOf: repeatElement(nil, count: index - slots.count))
                slots.append(newValue)
                count += 1
                return
            }
            count += (newValue != nil ? 1 : 0) - (slots[index] != nil ? 1 : 0)
            slots[index] = newValue
            trimRetiredEnds()
        }
    }

    /// Retires `serial`, returning its value (moved out, not copied).
    @discardableResult
    package mutating func removeValue(forKey serial: UInt64) -> Value? {
        guard serial >= firstSerial, serial - firstSerial < UInt64(slots.count) else { return nil }
        guard let removed = slots[Int(serial - firstSerial)].take() else { return nil }
        count -= 1
        trimRetiredEnds()
        return removed
    }

    /// Drops retired slots at either end, so the ends always hold values.
    private mutating func trimRetiredEnds() {
        // Compared in place through the subscript (`first` and `last` would copy the value out).
        while !slots.isEmpty, slots[0] == nil {
            slots.removeFirst()
            firstSerial += 1
        }
        while !slots.isEmpty, slots[slots.count - 1] == nil { slots.removeLast() }
    }

    /// The serials whose values satisfy `predicate`, ascending.
    package func serials(where predicate: (Value) -> Bool) -> [UInt64] {
        slots.indices.compactMap { index in slots[index].flatMap { predicate($0) ? firstSerial + UInt64(index) : nil } }
    }
}
