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
        JSONLine.appendString(apnsID, to: &line)
        if let badge { line += ",\"badge\":\(badge)" }
        if let collapseID {
            line += ",\"collapse_id\":"
            JSONLine.appendString(collapseID, to: &line)
        }
        if APNsPayloadScanner.scan(payload) != .notJSONObject {
            line += ",\"payload\":"
            // A payload's line breaks can only be whitespace between its tokens (JSON strings hold none raw): a
            // space keeps it the same JSON on one line.
            line += String(decoding: payload.map { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") ? UInt8(ascii: " ") : $0 }, as: UTF8.self)
        }
        line += ",\"priority\":\(priority),\"push_type\":"
        JSONLine.appendString(pushType, to: &line)
        line += ",\"received_at\":\(receivedAt),\"seq\":\(sequence),\"token\":"
        JSONLine.appendString(token, to: &line)
        line += ",\"topic\":"
        JSONLine.appendString(topic, to: &line)
        if let uniqueID {
            line += ",\"unique_id\":"
            JSONLine.appendString(uniqueID, to: &line)
        }
        line += "}"
        return line
    }
}

/// Writing JSON by hand for the device log.
enum JSONLine {
    /// Appends `value` as a JSON string (RFC 8259 escapes).
    static func appendString(_ value: String, to line: inout String) {
        line += "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": line += "\\\""
            case "\\": line += "\\\\"
            case "\n": line += "\\n"
            case "\r": line += "\\r"
            case "\t": line += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                line += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: line.unicodeScalars.append(scalar)
            }
        }
        line += "\""
    }
}
