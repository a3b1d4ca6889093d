import DequeModule

/// What the simulator accepted, kept for inspection: every item, or only the newest `limit` (the oldest go
/// first). `accepted` and `acceptedByKey` count every item, kept or not.
///
/// A simulator under load for hours accepts millions of notifications; one that kept them all grew without
/// bound (~730 MiB after a million) and spent its time in page faults.
struct SimulatorHistory<Item: Sendable>: Sendable {
    /// Most items kept; `nil` keeps all.
    let limit: Int?
    /// The items kept, oldest first, with their keys.
    private var kept: Deque<(key: String, item: Item)> = []
    private(set) var byKey: [String: [Item]] = [:]
    private(set) var accepted = 0
    private(set) var acceptedByKey: [String: Int] = [:]

    init(limit: Int?) {
        self.limit = limit.map { max(0, $0) }
    }

    /// The items kept, oldest first.
    var items: [Item] { kept.map(\.item) }

    /// Counts `item` under `key` and keeps it while within the limit (`accepted` before the call is its
    /// sequence number).
    mutating func append(_ item: Item, key: String) {
        accepted += 1
        acceptedByKey[key, default: 0] += 1
        guard limit != 0 else { return }
        kept.append((key, item))
        byKey[key, default: []].append(item)
        if let limit, kept.count > limit, let oldest = kept.popFirst() {
            // The oldest item overall is also the oldest of its key.
            byKey[oldest.key]?.removeFirst()
            if byKey[oldest.key]?.isEmpty == true { byKey[oldest.key] = nil }
        }
    }
}
