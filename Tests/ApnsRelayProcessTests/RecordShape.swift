import Foundation

/// The shapes of the contract's records as its first consumers read them: the keys in order. A record may
/// grow (optional keys after these), never lose, rename or reorder one of them.
enum RecordShape {
    /// `push.results` as the contract's first version writes it.
    static let resultKeys = ["event_id", "user", "token", "seq", "badge", "status", "apns_id", "http_status", "reason", "attempts", "latency_ms", "at"]
    /// The keys a result may carry after ``resultKeys``.
    static let optionalResultKeys: Set<String> = ["late", "environment", "apns_unique_id", "unregistered_since", "registered_again"]
    /// `push.failed-tokens`, unchanged since the contract's first version.
    static let failedTokenKeys = ["token", "user", "topic", "environment", "reason", "since", "event_id"]

    /// The top-level keys of a JSON object, in the order they are written.
    static func keys(of json: String) -> [String] {
        var keys: [String] = []
        var depth = 0
        var index = json.startIndex
        var expectingKey = false
        while index < json.endIndex {
            let character = json[index]
            switch character {
            case "{", "[":
                depth += 1
                expectingKey = depth == 1 && character == "{"
            case "}", "]":
                depth -= 1
            case ",":
                expectingKey = depth == 1
            case "\"":
                // A string: read to its closing quote, skipping escapes.
                var end = json.index(after: index)
                var text = ""
                while end < json.endIndex && json[end] != "\"" {
                    if json[end] == "\\" { end = json.index(after: end) }
                    if end < json.endIndex { text.append(json[end]) }
                    end = json.index(after: end)
                }
                if expectingKey {
                    keys.append(text)
                    expectingKey = false
                }
                index = end
            default:
                break
            }
            if index < json.endIndex { index = json.index(after: index) }
        }
        return keys
    }

    /// Whether `json` is a result an old consumer reads as before: the contract's keys first, in order, then only
    /// keys from ``optionalResultKeys``.
    static func isCompatibleResult(_ json: String) -> Bool {
        let keys = keys(of: json)
        return Array(keys.prefix(resultKeys.count)) == resultKeys && keys.dropFirst(resultKeys.count).allSatisfy(optionalResultKeys.contains)
    }

    /// The JSON object `json` as a dictionary (`[:]` when it is none).
    static func object(_ json: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]) ?? [:]
    }
}
