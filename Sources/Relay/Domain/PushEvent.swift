// The `push.events` record: its model, decoding with every contract rule, and rendering
// into an `APNsNotification` once the user's badge is known.

public import APNsCore

/// Why an event (or another input record) was refused: a sentence for a person that names
/// the field, e.g. `badge.increment must be an integer >= 0`.
public struct EventRejection: Error, Sendable, Equatable, CustomStringConvertible {
    /// The dotted path of the offending field (`apns.payload`, `tokens[2]`), or `event`.
    public let field: String
    /// The full sentence, starting with the field's name.
    public let reason: String

    /// Creates a rejection for `field` with the full `reason` sentence.
    public init(field: String, reason: String) {
        self.field = field
        self.reason = reason
    }

    /// The reason sentence.
    public var description: String { reason }
}

/// How an event changes its user's badge count. The count never goes below 0.
public enum BadgeOperation: Sendable, Equatable, Hashable {
    /// `{"set": N}`: the count becomes N.
    case set(Int64)
    /// `{"increment": N}`: the count grows by N.
    case increment(Int64)
    /// `{"decrement": N}`: the count shrinks by N, not below 0.
    case decrement(Int64)

    /// The count after applying the operation to `count`; saturates at 0 and `Int64.max`.
    public func applied(to count: Int64) -> Int64 {
        switch self {
        case .set(let value):
            return max(0, value)
        case .increment(let amount):
            let (sum, overflow) = count.addingReportingOverflow(amount)
            return overflow ? Int64.max : max(0, sum)
        case .decrement(let amount):
            let (difference, overflow) = count.subtractingReportingOverflow(amount)
            return overflow ? 0 : max(0, difference)
        }
    }
}

extension APNsTransport {
    /// The words used in a size error: "push_type alert" or "the binary transport (format 0)".
    func limitSubject(for pushType: APNsPushType) -> String {
        switch self {
        case .http2: "push_type \(pushType.rawValue)"
        case .binary(let format): "the binary transport (format \(format.rawValue))"
        }
    }
}

/// The `apns` part of an event: how APNs should deliver it. Values are already validated.
public struct APNsRequest: Sendable, Equatable {
    /// `apns-topic` (bundle id); `nil` means the relay's configured default topic.
    public var topic: String?
    /// `apns-push-type`; `alert` when the event did not say.
    public var pushType: APNsPushType
    /// `apns-priority` (10, 5 or 1). When the event did not say: 10, or 5 for `background`
    /// (Apple refuses 10 for background pushes).
    public var priority: APNsPriority
    /// `apns-expiration` in epoch seconds, if the event set one.
    public var expiration: Int64?
    /// The event's own `apns-collapse-id`, if it set one (at most 64 bytes).
    public var collapseID: String?
    /// The payload object (it has an `aps` object); the badge is injected when rendered.
    public var payload: JSONValue
    /// `apns.environment`: where the event's explicit `tokens` live; `nil` means the configured default. A
    /// registered device always goes to its registration's environment (the device knows best).
    public var environment: APNsEnvironment? = nil
    /// `apns.channel_id`: the event is a broadcast to this channel's subscribers (iOS 18 Live Activities).
    public var channelID: APNsChannelID? = nil
}

/// Who an event goes to.
public enum PushTargets: Sendable, Equatable {
    /// Exactly these device tokens (lower-case hex).
    case tokens([String])
    /// Every device registered for the user.
    case registeredDevices(user: String)
    /// Every device subscribed to a broadcast channel: one request, one result.
    case channel(APNsChannelID)
}

/// A valid `push.events` record.
public struct PushEvent: Sendable, Equatable {
    /// The idempotency key, 1...128 characters.
    public var id: String
    /// The user, required when a badge is present or tokens are absent.
    public var user: String?
    /// The user's sequence number (>= 1), if the producer numbered the event.
    public var seq: Int64?
    /// Explicit device tokens, lower-cased; `nil` means the user's registered devices.
    public var tokens: [String]?
    /// The badge change, if any.
    public var badge: BadgeOperation?
    /// Delivery details; `nil` for a badge-only event.
    public var apns: APNsRequest?

    /// Where the event is delivered.
    public var targets: PushTargets {
        if let channelID = apns?.channelID { return .channel(channelID) }
        if let tokens { return .tokens(tokens) }
        return .registeredDevices(user: user ?? "")
    }

    /// True when the event only updates the badge (no `apns` part): such notifications may
    /// be superseded by a newer badge for the same device.
    public var isBadgeOnly: Bool { apns == nil }

    /// The push type sent: the event's, or `alert` for a badge-only event.
    public var pushType: APNsPushType { apns?.pushType ?? .alert }

    /// The priority sent: the event's, or 5 for a badge-only event.
    public var priority: APNsPriority { apns?.priority ?? .conservePower }
}

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
        _ = try event.renderPayload(badge: provisionalBadge, transport: transport)
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

extension PushEvent {
    /// The payload bytes to send with `badge` (the user's count after this event) written into
    /// `aps.badge`; `nil` leaves the payload's own `aps.badge` alone. A badge-only event sends
    /// `{"aps":{"badge":N}}`. Throws when the result exceeds the transport's limit.
    public func renderPayload(badge: Int64?, transport: APNsTransport = .http2) throws(EventRejection) -> [UInt8] {
        let payload = apns?.payload ?? .object([JSONMember("aps", .object([]))])
        let bytes = badge.map { BadgeInjection.inject(badge: $0, into: payload) } ?? JSON.serialize(payload)
        try BadgeInjection.checkSize(bytes.count, pushType: pushType, transport: transport)
        return bytes
    }
}

/// Writes a badge count into `aps.badge` of a payload, keeping every other key.
public enum BadgeInjection {
    /// Sets `aps.badge` of the payload object to `badge` (replacing a badge already there, in
    /// place, or appending it to `aps`) and returns the compact JSON.
    public static func inject(badge: Int64, into payload: JSONValue) -> [UInt8] {
        guard case .object(let members) = payload else { return JSON.serialize(payload) }
        // Written straight from the event's members: rebuilding the object first copied its member arrays (and
        // `aps`'s) once per notification.
        var writer = JSONObjectWriter(capacity: 256)
        let apsIndex = members.lastIndex(where: { $0.key == "aps" })
        var injected = false
        for (position, member) in members.enumerated() {
            if position == apsIndex, case .object(let aps) = member.value {
                writer.object(member.key) { writeAPS(aps, badge: badge, into: &$0) }
                injected = true
            } else {
                writer.value(member.key, member.value)
            }
        }
        // No `aps` object (or the last `aps` is not one): a new one, last, so a last-wins reader sees it.
        if !injected { writer.object("aps") { $0.integer("badge", badge) } }
        return writer.finish()
    }

    /// `aps`'s members with `badge` in place of its first `badge` (later duplicates dropped: a last-wins reader must
    /// not see a stale count), or appended when it has none.
    private static func writeAPS(_ aps: [JSONMember], badge: Int64, into writer: inout JSONObjectWriter) {
        var written = false
        for member in aps {
            guard member.key == "badge" else {
                writer.value(member.key, member.value)
                continue
            }
            if !written { writer.integer("badge", badge) }
            written = true
        }
        if !written { writer.integer("badge", badge) }
    }

    /// Parses payload bytes (a JSON object with an `aps` object), injects `badge` and checks
    /// the size limit of `pushType` on `transport`.
    public static func inject(
        badge: Int64, intoPayloadBytes bytes: some Collection<UInt8>,
        pushType: APNsPushType = .alert, transport: APNsTransport = .http2
    ) throws(EventRejection) -> [UInt8] {
        let payload: JSONValue
        do {
            payload = try JSON.parse(bytes)
        } catch {
            throw EventRejection(field: "apns.payload", reason: "apns.payload is not valid JSON: \(error)")
        }
        guard case .object = payload else {
            throw EventRejection(field: "apns.payload", reason: "apns.payload must be an object, got \(payload.typeName)")
        }
        if let aps = payload["aps"], aps.objectMembers == nil {
            throw EventRejection(field: "apns.payload.aps", reason: "apns.payload.aps must be an object, got \(aps.typeName)")
        }
        let result = inject(badge: badge, into: payload)
        try checkSize(result.count, pushType: pushType, transport: transport)
        return result
    }

    /// Throws `apns.payload is 5,210 bytes, the limit for push_type alert is 4,096` when over.
    public static func checkSize(_ size: Int, pushType: APNsPushType, transport: APNsTransport) throws(EventRejection) {
        let limit = transport.maximumPayloadSize(for: pushType)
        guard size <= limit else {
            throw EventRejection(
                field: "apns.payload",
                reason: "apns.payload is \(groupedThousands(size)) bytes, the limit for \(transport.limitSubject(for: pushType)) is \(groupedThousands(limit))")
        }
    }

    /// 5210 → "5,210" (locale-free, so messages are the same everywhere).
    static func groupedThousands(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var grouped = ""
        for (position, digit) in digits.enumerated() {
            if position > 0 && (digits.count - position) % 3 == 0 { grouped.append(",") }
            grouped.append(digit)
        }
        return value < 0 ? "-" + grouped : grouped
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

extension PushEvent {
    /// The update to offer to the user's ``BadgeSequencer``, or `nil` for an event without a user
    /// (explicit tokens only: nothing to order or count). Every event of a user goes through the
    /// sequencer, with or without a badge, so all of them are ordered and deduplicated by seq.
    /// `position` is the record's offset: it tells a redelivery from a new record.
    package func ledgerUpdate<Tag: Sendable>(tag: Tag, position: Int64? = nil) -> BadgeUpdate<Tag>? {
        guard let user else { return nil }
        return BadgeUpdate(user: user, seq: seq, operation: badge, position: position, tag: tag)
    }

    /// The notification for `token` with the user's count `badge` (from the ledger; `nil` when the
    /// event has no badge), checked against every rule of Apple's: what is sent is exactly this value.
    /// The topic is the event's `apns.topic`, else `defaultTopic` (the device registration's, else the
    /// configuration's). Throws, naming the event field, when it breaks a rule (a payload that no longer
    /// fits after the badge went in, no topic at all, a topic without its push type's suffix).
    public func render(for token: String, badge: Int64?, defaultTopic: String?, transport: APNsTransport = .http2) throws(EventRejection) -> APNsNotification {
        try render(for: token, payload: Result { () throws(EventRejection) in try renderPayload(badge: badge, transport: transport) },
                   defaultTopic: defaultTopic)
    }

    /// The notification to `token` with a payload already rendered by ``renderPayload(badge:transport:)`` (or the
    /// rejection it threw): a fan-out renders it once for all of the event's devices, which share its bytes. The
    /// checks and their order are those of ``render(for:badge:defaultTopic:transport:)``.
    public func render(for token: String, payload: Result<[UInt8], EventRejection>, defaultTopic: String?) throws(EventRejection) -> APNsNotification {
        guard let topic = apns?.topic ?? defaultTopic else {
            throw EventRejection(field: "apns.topic", reason: "no apns-topic: set apns.topic in the event, the device registration or the configuration")
        }
        let payload = try payload.get()
        do {
            return try APNsNotification(
                token: APNsDeviceToken(hex: token), topic: topic, pushType: pushType, priority: priority, expiration: apns?.expiration,
                collapseID: DeliveryIdentity.collapseID(eventID: id, eventCollapseID: apns?.collapseID),
                apnsID: DeliveryIdentity.apnsID(eventID: id, token: token), payload: payload)
        } catch {
            throw EventRejection(error)
        }
    }
}

extension PushEvent {
    /// The broadcast of this event to `channel`, checked against Apple's rules. The bundle id is the event's
    /// `apns.topic`, else `defaultTopic` (the configuration's); a Live Activity topic
    /// (`<bundle id>.push-type.liveactivity`) is accepted too and sent as its bundle id. The payload goes as it is
    /// (a broadcast has no badge). Throws, naming the event field, when it breaks a rule.
    public func renderBroadcast(to channel: APNsChannelID, defaultTopic: String?) throws(EventRejection) -> APNsNotification {
        guard let topic = apns?.topic ?? defaultTopic else {
            throw EventRejection(field: "apns.topic", reason: "apns.topic is required for a broadcast (its bundle id): set it in the event or in the configuration")
        }
        let suffix = APNsPushType.liveactivity.requiredTopicSuffixes[0]
        let bundleID = topic.hasSuffix(suffix) && topic.count > suffix.count ? String(topic.dropLast(suffix.count)) : topic
        let payload = try renderPayload(badge: nil)
        do {
            return try APNsNotification(
                channel: channel, bundleID: bundleID, priority: priority, expiration: apns?.expiration,
                apnsID: DeliveryIdentity.apnsID(eventID: id, channelID: channel.value), payload: payload)
        } catch {
            throw EventRejection(error)
        }
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
