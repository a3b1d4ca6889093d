import APNs
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

    /// The JSON line written to the device log, keys in sorted order; `payload` only when it is a JSON object.
    /// Written by hand rather than by `JSONSerialization`, which costs more than answering the request: the soak
    /// runs the simulator with a device log at thousands of requests per second beside the relay it measures.
    public var jsonLine: String {
        var line = "{\"apns_id\":"
        line.reserveCapacity(256 + payload.count)
        line += JSONString.quoted(apnsID)
        if let badge { line += ",\"badge\":\(badge)" }
        if let collapseID {
            line += ",\"collapse_id\":"
            line += JSONString.quoted(collapseID)
        }
        if APNsPayloadScanner.scan(payload) != .notJSONObject {
            line += ",\"payload\":"
            // A payload's line breaks can only be whitespace between its tokens (JSON strings hold none raw): a
            // space keeps it the same JSON on one line.
            line += String(decoding: payload.map { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") ? UInt8(ascii: " ") : $0 }, as: UTF8.self)
        }
        line += ",\"priority\":\(priority),\"push_type\":"
        line += JSONString.quoted(pushType)
        line += ",\"received_at\":\(receivedAt),\"seq\":\(sequence),\"token\":"
        line += JSONString.quoted(token)
        line += ",\"topic\":"
        line += JSONString.quoted(topic)
        if let uniqueID {
            line += ",\"unique_id\":"
            line += JSONString.quoted(uniqueID)
        }
        line += "}"
        return line
    }
}
