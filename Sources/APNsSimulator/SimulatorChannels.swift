import APNs
import Foundation

/// One broadcast the simulator accepted (`POST /4/broadcasts/apps/{bundle-id}`): what every subscribed device shows.
public struct SimulatedBroadcast: Sendable, Hashable {
    /// The channel (`apns-channel-id`).
    public var channelID: String
    /// The app's bundle id, from the path.
    public var bundleID: String
    /// The `apns-request-id` answered (the request's, or a new UUID).
    public var requestID: String
    /// The priority.
    public var priority: Int
    /// The payload bytes.
    public var payload: [UInt8]
    /// Acceptance order among broadcasts (0-based).
    public var sequence: Int

    /// The JSON line written to the device log (`channel_id` where device lines have `token`).
    public var jsonLine: String {
        var object: [String: Any] = [
            "channel_id": channelID, "bundle_id": bundleID, "apns_request_id": requestID, "push_type": APNsPushType.liveactivity.rawValue,
            "priority": priority, "seq": sequence,
        ]
        if let payloadObject = try? JSONSerialization.jsonObject(with: Data(payload)) { object["payload"] = payloadObject }
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}

/// The answer to a channel management request.
struct SimulatorManagementAnswer: Sendable, Hashable {
    var status: Int
    /// Apple's reason, for an error.
    var reason: String?
    /// `apns-channel-id` of a channel just created.
    var channelID: String?
    /// A JSON body of a success (a channel, a channel list).
    var body: String?

    static func reject(_ reason: APNsReason) -> Self { Self(status: reason.httpStatus, reason: reason.rawValue) }
}

/// The broadcast channels of every app the simulator knows, and Apple's channel management API over them
/// (`/1/apps/{bundle-id}/channels`, `/1/apps/{bundle-id}/all-channels`). A pure value: the simulator keeps it under
/// its lock and authenticates requests before they reach it.
struct SimulatorChannels: Sendable {
    /// Apple's limit per app and environment; creating one more is `CannotCreateChannelConfig`.
    var limit = 10_000
    /// Channel id → storage policy, per bundle id; `order` keeps creation order for listing.
    private var policies: [String: [String: Int]] = [:]
    private var order: [String: [String]] = [:]

    /// Whether `channelID` is a channel of `bundleID`.
    func exists(bundleID: String, channelID: String) -> Bool { policies[bundleID]?[channelID] != nil }

    /// The ids of `bundleID`'s channels, in creation order.
    func channels(of bundleID: String) -> [String] { order[bundleID] ?? [] }

    /// A new channel of `bundleID` with `policy`, under the id `newID`.
    mutating func add(bundleID: String, policy: Int, id newID: String) {
        policies[bundleID, default: [:]][newID] = policy
        order[bundleID, default: []].append(newID)
    }

    /// Serves one management request whose `path` was already matched to `bundleID` and `resource`
    /// (`channels` or `all-channels`). `newID` is the id a created channel gets.
    mutating func handle(method: String, bundleID: String, resource: String, channelHeader: String?, body: [UInt8], newID: () -> String) -> SimulatorManagementAnswer {
        if resource == "all-channels" {
            guard method == "GET" else { return .reject(.methodNotAllowed) }
            let list = channels(of: bundleID).map { "\"\($0)\"" }.joined(separator: ",")
            return SimulatorManagementAnswer(status: 200, body: "{\"channels\":[\(list)]}")
        }
        switch method {
        case "POST":
            return create(bundleID: bundleID, body: body, newID: newID)
        case "GET", "DELETE":
            guard let channelHeader, !channelHeader.isEmpty else { return .reject(.missingChannelId) }
            guard (try? APNsChannelID(channelHeader)) != nil else { return .reject(.badChannelId) }
            guard let policy = policies[bundleID]?[channelHeader] else { return .reject(.channelNotRegistered) }
            if method == "GET" {
                return SimulatorManagementAnswer(
                    status: 200, body: "{\"message-storage-policy\":\(policy),\"push-type\":\"LiveActivity\"}")
            }
            policies[bundleID]?[channelHeader] = nil
            order[bundleID]?.removeAll { $0 == channelHeader }
            return SimulatorManagementAnswer(status: 204)
        default:
            return .reject(.methodNotAllowed)
        }
    }

    private mutating func create(bundleID: String, body: [UInt8], newID: () -> String) -> SimulatorManagementAnswer {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
            return .reject(.payloadEmpty)
        }
        guard let pushType = object["push-type"] else { return .reject(.missingPushType) }
        guard pushType as? String == "LiveActivity" else { return .reject(.invalidPushType) }
        // Apple's table has no reason for a bad policy; this name is the simulator's (see docs/APNS.md).
        guard let number = object["message-storage-policy"] as? NSNumber,
            let policy = APNsMessageStoragePolicy(rawValue: number.intValue), Double(policy.rawValue) == number.doubleValue
        else { return SimulatorManagementAnswer(status: 400, reason: Self.badStoragePolicyReason) }
        guard channels(of: bundleID).count < limit else { return .reject(.cannotCreateChannelConfig) }
        let id = newID()
        add(bundleID: bundleID, policy: policy.rawValue, id: id)
        return SimulatorManagementAnswer(status: 201, channelID: id)
    }

    /// The reason the simulator answers for a `message-storage-policy` other than 0 or 1.
    static let badStoragePolicyReason = "BadMessageStoragePolicy"

    /// A channel id as APNs makes them: 16 random bytes, base64.
    static func newChannelID() -> String {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }).base64EncodedString()
    }

    /// `/1/apps/{bundle-id}/{channels|all-channels}` split into its bundle id and resource, or `nil`.
    static func parseManagementPath(_ path: String) -> (bundleID: String, resource: String)? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 5, parts[0].isEmpty, parts[1] == "1", parts[2] == "apps", !parts[3].isEmpty,
            parts[4] == "channels" || parts[4] == "all-channels"
        else { return nil }
        return (String(parts[3]), String(parts[4]))
    }
}
