import DequeModule

/// What the simulator accepted, kept for inspection: every item, or only the newest `limit` (the oldest go
/// first). `accepted` and `acceptedByKey` count every item, kept or not.
///
/// A simulator under load for hours accepts millions of notifications; one that kept them all grew without
/// bound (~750 MB after a million) and spent its time in page faults.
struct SimulatorHistory<Item: Sendable>: Sendable {
    /// Most items kept; `nil` keeps all.
    let limit: Int?
    private(set) var items: Deque<Item> = []
    private(set) var byKey: [String: [Item]] = [:]
    private(set) var accepted = 0
    private(set) var acceptedByKey: [String: Int] = [:]
    private var keys: Deque<String> = []

    init(limit: Int?) {
        self.limit = limit.map { max(0, $0) }
    }

    /// Counts `item` under `key` and keeps it while within the limit (`accepted` before the call is its
    /// sequence number).
    mutating func append(_ item: Item, key: String) {
        accepted += 1
        acceptedByKey[key, default: 0] += 1
        guard limit != 0 else { return }
        items.append(item)
        keys.append(key)
        byKey[key, default: []].append(item)
        if let limit, items.count > limit, let oldestKey = keys.popFirst() {
            items.removeFirst()
            // The oldest item overall is also the oldest of its key.
            byKey[oldestKey]?.removeFirst()
            if byKey[oldestKey]?.isEmpty == true { byKey[oldestKey] = nil }
        }
    }
}
