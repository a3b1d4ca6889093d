import Foundation

/// One notification the simulator accepted: what the device "shows".
public struct SimulatedDelivery: Sendable, Hashable {
    /// The device token (lower-case hex).
    public var token: String
    /// The `apns-id` answered.
    public var apnsID: String
    /// The `apns-collapse-id`, if any.
    public var collapseID: String?
    /// The topic.
    public var topic: String
    /// The push type.
    public var pushType: String
    /// The priority.
    public var priority: Int
    /// The payload bytes.
    public var payload: [UInt8]
    /// `aps.badge`, if present.
    public var badge: Int?
    /// Global acceptance order (0-based).
    public var sequence: Int
    /// When the simulator accepted it (wall clock, milliseconds since the epoch): the end of a produce → APNs
    /// measurement.
    public var receivedAt: Int64 = 0
    /// The `apns-unique-id` answered (a host playing the sandbox), if any.
    public var uniqueID: String? = nil
    /// What authenticated it: `key:<kid>` for a provider token, `certificate:<topic>` for an app's client
    /// certificate, `certificate:*` for the shared one; `nil` on the binary gateway.
    public var authenticatedAs: String? = nil

    /// The JSON line written to the device log.
    public var jsonLine: String {
        var object: [String: Any] = [
            "token": token, "apns_id": apnsID, "topic": topic, "push_type": pushType, "priority": priority, "seq": sequence,
            "received_at": receivedAt,
        ]
        if let collapseID { object["collapse_id"] = collapseID }
        if let uniqueID { object["unique_id"] = uniqueID }
        if let badge { object["badge"] = badge }
        if let payloadObject = try? JSONSerialization.jsonObject(with: Data(payload)) { object["payload"] = payloadObject }
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}
