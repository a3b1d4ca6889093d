/// Values by connection id, for the few connections of one pool (`apns.connections`, plus those closing).
///
/// A dictionary hashes its key with a seeded SipHash on every lookup, several times per notification; a
/// linear scan of a handful of entries costs a fraction of one hash.
package struct ConnectionTable<Value> {
    private var entries: [(id: APNsConnectionID, value: Value)] = []

    /// An empty table.
    package init() {}

    /// The ids, in the order they were added.
    package var ids: [APNsConnectionID] { entries.map(\.id) }
    /// The values, in the order they were added.
    package var values: [Value] { entries.map(\.value) }

    /// The position of `id`'s entry, if it has one.
    package func index(of id: APNsConnectionID) -> Int? {
        entries.firstIndex { $0.id == id }
    }

    /// `id`'s value; setting `nil` removes the entry.
    package subscript(id: APNsConnectionID) -> Value? {
        get { index(of: id).map { entries[$0].value } }
        set {
            switch (index(of: id), newValue) {
            case (let index?, let value?): entries[index].value = value
            case (let index?, nil): entries.remove(at: index)
            case (nil, let value?): entries.append((id, value))
            case (nil, nil): break
            }
        }
    }

    /// The value at `index` (from ``index(of:)``), changed in place.
    package subscript(at index: Int) -> Value {
        get { entries[index].value }
        _modify { yield &entries[index].value }
    }

    /// Removes `id`'s entry and returns its value.
    @discardableResult
    package mutating func removeValue(for id: APNsConnectionID) -> Value? {
        guard let index = index(of: id) else { return nil }
        return entries.remove(at: index).value
    }

    package mutating func removeAll() { entries.removeAll() }
}

extension ConnectionTable: Sendable where Value: Sendable {}
