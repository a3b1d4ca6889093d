// Decoding `push.events` values with every contract rule.

public import APNsCore

/// Decodes and validates `push.events` values.
public struct PushEventDecoder: Sendable {
    /// The transport whose payload size limits apply.
    public var transport: APNsTransport

    /// A decoder that checks payload sizes for `transport` (HTTP/2 unless told otherwise).
    public init(transport: APNsTransport = .http2) {
        self.transport = transport
    }

    /// Decodes one record value. Unknown fields are ignored; a `null` optional field counts as
    /// absent; a field of the wrong type is an error. The payload size is checked with the
    /// badge already injected: the exact value for `set`, a provisional 0 for `increment` and
    /// `decrement` (the final count is re-checked by ``PushEvent/renderPayload(badge:transport:)``).
    public func decode(_ bytes: some Collection<UInt8>) throws(EventRejection) -> PushEvent {
        let root: JSONValue
        do {
            root = try JSON.parse(bytes)
        } catch {
            throw EventRejection(field: "event", reason: "event is not valid JSON: \(error)")
        }
        guard case .object = root else {
            throw EventRejection(field: "event", reason: "event must be a JSON object, got \(root.typeName)")
        }

        let id = try decodeID(root["id"])
        let user = try decodeUser(root["user"])
        let seq = try decodeSeq(root["seq"])
        let tokens = try decodeTokens(root["tokens"])
        let badge = try decodeBadge(root["badge"])
        let apns = try decodeAPNs(present(root["apns"]))

        if badge == nil && apns == nil {
            throw EventRejection(field: "event", reason: "event must have badge, apns or both")
        }
        if let apns, apns.channelID != nil {
            try checkBroadcast(apns, user: user, tokens: tokens, badge: badge)
        } else if user == nil {
            if badge != nil { throw EventRejection(field: "user", reason: "user is required when badge is present") }
            if tokens == nil { throw EventRejection(field: "user", reason: "user is required when tokens is absent") }
        }

        let event = PushEvent(id: id, user: user, seq: seq, tokens: tokens, badge: badge, apns: apns)
        let provisionalBadge: Int64? = badge.map { operation in
            if case .set(let value) = operation { return value }
            return 0
        }
        try BadgeInjection.checkSize(event.payloadTemplate.count(badge: provisionalBadge), pushType: event.pushType, transport: transport)
        return event
    }

    /// A broadcast (`apns.channel_id`) reaches whoever subscribed to the channel: it names no devices, no user,
    /// no badge; Apple takes `liveactivity` only, and has no collapse id for broadcasts. The legacy binary
    /// interface cannot send one.
    private func checkBroadcast(_ apns: APNsRequest, user: String?, tokens: [String]?, badge: BadgeOperation?) throws(EventRejection) {
        let rule = "an event with apns.channel_id is a broadcast to the channel's subscribers"
        if tokens != nil { throw EventRejection(field: "tokens", reason: "tokens is not allowed with apns.channel_id (\(rule))") }
        if user != nil { throw EventRejection(field: "user", reason: "user is not allowed with apns.channel_id (\(rule))") }
        if badge != nil { throw EventRejection(field: "badge", reason: "badge is not allowed with apns.channel_id (\(rule))") }
        if apns.pushType != .liveactivity {
            throw EventRejection(field: "apns.push_type", reason: "apns.push_type must be liveactivity with apns.channel_id, got \"\(apns.pushType.rawValue)\"")
        }
        if apns.collapseID != nil {
            throw EventRejection(field: "apns.collapse_id", reason: "apns.collapse_id is not allowed with apns.channel_id (broadcasts have no collapse id)")
        }
        if case .binary = transport {
            throw EventRejection(field: "apns.channel_id", reason: "apns.channel_id needs apns.transport http2 (the binary interface has no broadcasts)")
        }
    }

    private func present(_ value: JSONValue?) -> JSONValue? {
        if case .null? = value { return nil }
        return value
    }

    private func decodeID(_ value: JSONValue?) throws(EventRejection) -> String {
        guard let value = present(value) else { throw EventRejection(field: "id", reason: "id is required") }
        guard case .string(let id) = value else {
            throw EventRejection(field: "id", reason: "id must be a string, got \(value.typeName)")
        }
        guard (1...128).contains(id.count) else {
            throw EventRejection(field: "id", reason: "id must be 1 to 128 characters, got \(id.count)")
        }
        return id
    }

    private func decodeUser(_ value: JSONValue?) throws(EventRejection) -> String? {
        guard let value = present(value) else { return nil }
        guard case .string(let user) = value else {
            throw EventRejection(field: "user", reason: "user must be a string, got \(value.typeName)")
        }
        guard !user.isEmpty else { throw EventRejection(field: "user", reason: "user must not be empty") }
        return user
    }

    private func decodeSeq(_ value: JSONValue?) throws(EventRejection) -> Int64? {
        guard let value = present(value) else { return nil }
        guard let seq = value.integerValue, seq >= 1 else {
            throw EventRejection(field: "seq", reason: "seq must be an integer >= 1")
        }
        return seq
    }

    private func decodeTokens(_ value: JSONValue?) throws(EventRejection) -> [String]? {
        guard let value = present(value) else { return nil }
        guard case .array(let elements) = value else {
            throw EventRejection(field: "tokens", reason: "tokens must be an array of strings, got \(value.typeName)")
        }
        guard !elements.isEmpty else {
            throw EventRejection(field: "tokens", reason: "tokens must not be empty (omit it to use the user's devices)")
        }
        var tokens: [String] = []
        tokens.reserveCapacity(elements.count)
        for (position, element) in elements.enumerated() {
            let field = "tokens[\(position)]"
            guard case .string(let token) = element else {
                throw EventRejection(field: field, reason: "\(field) must be a string, got \(element.typeName)")
            }
            tokens.append(try DeviceToken.normalize(token, field: field))
        }
        return tokens
    }

    private func decodeBadge(_ value: JSONValue?) throws(EventRejection) -> BadgeOperation? {
        guard let value = present(value) else { return nil }
        guard case .object = value else {
            throw EventRejection(field: "badge", reason: "badge must be an object, got \(value.typeName)")
        }
        let kinds = ["set", "increment", "decrement"].filter { value[$0] != nil }
        guard kinds.count == 1, let kind = kinds.first, let operand = value[kind] else {
            throw EventRejection(field: "badge", reason: "badge must have exactly one of set, increment, decrement")
        }
        guard let amount = operand.integerValue, amount >= 0 else {
            throw EventRejection(field: "badge.\(kind)", reason: "badge.\(kind) must be an integer >= 0")
        }
        switch kind {
        case "set": return .set(amount)
        case "increment": return .increment(amount)
        default: return .decrement(amount)
        }
    }

    private func decodeAPNs(_ value: JSONValue?) throws(EventRejection) -> APNsRequest? {
        guard let value else { return nil }
        guard case .object = value else {
            throw EventRejection(field: "apns", reason: "apns must be an object, got \(value.typeName)")
        }

        var topic: String?
        if let raw = present(value["topic"]) {
            guard case .string(let text) = raw else {
                throw EventRejection(field: "apns.topic", reason: "apns.topic must be a string, got \(raw.typeName)")
            }
            guard !text.isEmpty else { throw EventRejection(field: "apns.topic", reason: "apns.topic must not be empty") }
            topic = text
        }

        var pushType = APNsPushType.alert
        if let raw = present(value["push_type"]) {
            let allowed = APNsPushType.allCases.map(\.rawValue).joined(separator: ", ")
            guard case .string(let text) = raw else {
                throw EventRejection(field: "apns.push_type", reason: "apns.push_type must be a string, got \(raw.typeName)")
            }
            guard let parsed = APNsPushType(rawValue: text) else {
                throw EventRejection(field: "apns.push_type", reason: "apns.push_type must be one of \(allowed), got \"\(text)\"")
            }
            pushType = parsed
        }

        var priority: APNsPriority = pushType == .background ? .conservePower : .immediate
        if let raw = present(value["priority"]) {
            guard let parsed = raw.integerValue.flatMap({ APNsPriority(rawValue: Int($0)) }) else {
                throw EventRejection(field: "apns.priority", reason: "apns.priority must be 10, 5 or 1")
            }
            if parsed == .immediate && pushType == .background {
                throw EventRejection(field: "apns.priority", reason: "apns.priority 10 is not allowed for push_type background (use 5 or 1)")
            }
            priority = parsed
        }

        var expiration: Int64?
        if let raw = present(value["expiration"]) {
            guard let parsed = raw.integerValue, parsed >= 0 else {
                throw EventRejection(field: "apns.expiration", reason: "apns.expiration must be an integer >= 0 (epoch seconds)")
            }
            expiration = parsed
        }

        var collapseID: String?
        if let raw = present(value["collapse_id"]) {
            guard case .string(let text) = raw else {
                throw EventRejection(field: "apns.collapse_id", reason: "apns.collapse_id must be a string, got \(raw.typeName)")
            }
            guard !text.isEmpty else {
                throw EventRejection(field: "apns.collapse_id", reason: "apns.collapse_id must not be empty")
            }
            guard text.utf8.count <= 64 else {
                throw EventRejection(field: "apns.collapse_id", reason: "apns.collapse_id is \(text.utf8.count) bytes, the limit is 64")
            }
            guard APNsNotification.isValidHeaderValue(text) else {
                throw EventRejection(
                    field: "apns.collapse_id", reason: "apns.collapse_id must not contain control characters or start or end with a space or tab")
            }
            collapseID = text
        }

        var channelID: APNsChannelID?
        if let raw = present(value["channel_id"]) {
            guard case .string(let text) = raw else {
                throw EventRejection(field: "apns.channel_id", reason: "apns.channel_id must be a string, got \(raw.typeName)")
            }
            do {
                channelID = try APNsChannelID(text)
            } catch {
                throw EventRejection(field: "apns.channel_id", reason: "apns.channel_id must be a channel id as APNs issues it (base64): \(error.description)")
            }
        }

        var environment: APNsEnvironment?
        if let raw = present(value["environment"]) {
            guard case .string(let text) = raw, let parsed = APNsEnvironment(rawValue: text) else {
                throw EventRejection(field: "apns.environment", reason: "apns.environment must be \"production\" or \"sandbox\"")
            }
            environment = parsed
        }

        guard let payload = present(value["payload"]) else {
            throw EventRejection(field: "apns.payload", reason: "apns.payload is required when apns is present")
        }
        guard case .object = payload else {
            throw EventRejection(field: "apns.payload", reason: "apns.payload must be an object, got \(payload.typeName)")
        }
        guard let aps = payload["aps"] else {
            throw EventRejection(field: "apns.payload.aps", reason: "apns.payload.aps is required")
        }
        guard case .object = aps else {
            throw EventRejection(field: "apns.payload.aps", reason: "apns.payload.aps must be an object, got \(aps.typeName)")
        }
        if pushType == .liveactivity { try LiveActivityStart.check(aps, broadcast: channelID != nil) }

        return APNsRequest(topic: topic, pushType: pushType, priority: priority, expiration: expiration,
                           collapseID: collapseID, payload: payload, environment: environment, channelID: channelID)
    }
}


/// Device tokens as the contract writes them: APNs' rules (``APNsDeviceToken``), stored lower-case.
public enum DeviceToken {
    /// Returns the token lower-cased, or throws naming `field` when it breaks a rule.
    public static func normalize(_ token: String, field: String = "token") throws(EventRejection) -> String {
        do {
            return try APNsDeviceToken(hex: token).hex
        } catch {
            let count = token.utf8.count
            switch error.problem {
            case .notHex:
                throw EventRejection(field: field, reason: "\(field) must contain only hex characters (0-9, a-f)")
            case .oddLength:
                throw EventRejection(field: field, reason: "\(field) must have an even number of hex characters, got \(count)")
            default:
                throw EventRejection(field: field, reason: "\(field) must be 64 to 200 hex characters, got \(count)")
            }
        }
    }
}

extension EventRejection {
    /// A rule of Apple's broken by a rendered notification, named by the event field it comes from.
    init(_ error: APNsValidationError) {
        let field = switch error.field {
        case .deviceToken: "token"
        case .channelID: "apns.channel_id"
        case .topic: "apns.topic"
        case .pushType: "apns.push_type"
        case .priority: "apns.priority"
        case .expiration: "apns.expiration"
        case .collapseID: "apns.collapse_id"
        case .apnsID: "apns-id"
        case .payload: "apns.payload"
        }
        self.init(field: field, reason: error.description)
    }
}

/// A remote start of a Live Activity (`push_type` `liveactivity` with `aps.event` `start`, iOS 17.2+), checked for
/// what the device needs to show it: a start it cannot show is dropped on the device without a word to anyone, so
/// the relay makes it a dead letter naming the key instead. Updates and ends are not checked.
enum LiveActivityStart {
    /// Throws naming the first missing or malformed key of a start in `aps`; anything but a start passes.
    static func check(_ aps: JSONValue, broadcast: Bool) throws(EventRejection) {
        guard case .string("start") = aps["event"] else { return }
        func reject(_ key: String, _ rule: String) -> EventRejection {
            EventRejection(field: "apns.payload.aps.\(key)", reason: "apns.payload.aps.\(key) \(rule)")
        }
        if broadcast {
            throw reject("event", "start needs a push-to-start token in tokens: a broadcast updates or ends the Live Activities on its channel")
        }
        guard case .string(let type)? = aps["attributes-type"], !type.isEmpty else {
            throw reject("attributes-type", "is required to start a Live Activity (the name of its ActivityAttributes type)")
        }
        guard case .object? = aps["attributes"] else {
            throw reject("attributes", "is required to start a Live Activity (an object: its ActivityAttributes)")
        }
        guard case .object? = aps["content-state"] else {
            throw reject("content-state", "is required to start a Live Activity (an object: its initial ContentState)")
        }
        // iOS 18: the started activity's own push token is sent to the app (`input-push-token: 1`), or the activity
        // subscribes to a broadcast channel (`input-push-channel`: a channel id as APNs issues it).
        if let value = aps["input-push-token"], value.integerValue != 1 {
            throw reject("input-push-token", "must be 1 (asks for the started activity's push token)")
        }
        if let value = aps["input-push-channel"] {
            guard case .string(let channel) = value, (try? APNsChannelID(channel)) != nil else {
                throw reject("input-push-channel", "must be a channel id as APNs issues it (base64)")
            }
        }
    }
}
