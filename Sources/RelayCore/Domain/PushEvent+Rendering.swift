// Rendering an event into the notifications it sends, once the user's badge is known.

public import APNsCore

extension PushEvent {
    /// The payload bytes to send with `badge` (the user's count after this event) written into
    /// `aps.badge`; `nil` leaves the payload's own `aps.badge` alone. A badge-only event sends
    /// `{"aps":{"badge":N}}`. Throws when the result exceeds the transport's limit.
    ///
    /// The bytes come from ``payloadTemplate``, serialized when the event was decoded: for each
    /// count, only its digits are written between the template's two halves.
    public func renderPayload(badge: Int64?, transport: APNsTransport = .http2) throws(EventRejection) -> [UInt8] {
        let bytes = payloadTemplate.bytes(badge: badge)
        try BadgeInjection.checkSize(bytes.count, pushType: pushType, transport: transport)
        return bytes
    }
}

/// An event's payload serialized once: with a slot where `aps.badge`'s value goes for an event
/// that changes the badge (every notification of it carries the user's count), or as it is for
/// one that does not. Rendering a count writes its digits between the two halves; nothing is
/// parsed or serialized again per notification.
public struct PayloadTemplate: Sendable, Equatable {
    /// One buffer: the bytes before the badge's value (`..<slot`), the bytes after it (`slot..<tailEnd`), then
    /// the payload as it is (`tailEnd...`), for the rare render the template was not made for. Without a slot,
    /// only the payload as it is.
    private let storage: [UInt8]
    /// Where the badge's value goes; `nil`: no slot.
    private let slot: Int?
    /// The end of the bytes after the slot, where the payload as it is starts (0 without a slot).
    private let tailEnd: Int

    /// The bytes the template holds.
    package var byteCount: Int { storage.count }

    /// The template of `payload` (a JSON object; anything else is kept as it is), with a slot
    /// for the badge when `badgeSlot`.
    public init(_ payload: JSONValue, badgeSlot: Bool) {
        self = Self.made(fromCompact: JSON.serialize(payload), badgeSlot: badgeSlot)
    }

    /// The template of the payload at `span` of a checked text (the event's own bytes), written compactly.
    init(_ text: JSONText, payload span: Range<Int>, badgeSlot: Bool) {
        var storage: [UInt8] = []
        storage.reserveCapacity(2 * span.count + 32)
        var slot: Int?
        if badgeSlot, text.kind(span) == .object {
            slot = BadgeInjection.writeWithBadgeSlot(text, payload: span, into: &storage)
        }
        tailEnd = storage.count
        text.writeCompact(span, into: &storage)
        self.storage = storage
        self.slot = slot
    }

    /// The template of a payload this module serialized (compact, valid JSON).
    private static func made(fromCompact payload: [UInt8], badgeSlot: Bool) -> PayloadTemplate {
        JSON.read(payload) { checked in
            guard case .success(let text) = checked else { preconditionFailure("the JSON writer wrote what its reader refuses") }
            return PayloadTemplate(text, payload: text.root, badgeSlot: badgeSlot)
        }
    }

    /// The payload as it is, compact.
    private var payload: ArraySlice<UInt8> { storage[tailEnd...] }

    /// The payload with `badge` in `aps.badge` (``BadgeInjection/inject(badge:into:)``'s bytes), or
    /// as it is for `nil`.
    public func bytes(badge: Int64?) -> [UInt8] {
        switch (badge, slot) {
        case (let badge?, let slot?):
            var bytes: [UInt8] = []
            bytes.reserveCapacity(tailEnd + 20)
            bytes.append(contentsOf: storage[..<slot])
            JSON.writeInteger(badge, into: &bytes)
            bytes.append(contentsOf: storage[slot..<tailEnd])
            return bytes
        case (nil, nil):
            return storage
        case (let badge?, nil):
            // Made without a slot: one with a slot, unless the payload cannot have one (not an object).
            let slotted = Self.made(fromCompact: storage, badgeSlot: true)
            return slotted.slot == nil ? storage : slotted.bytes(badge: badge)
        case (nil, _?):
            return Array(payload)
        }
    }

    /// The size of ``bytes(badge:)``, without writing them when the template was made for it.
    public func count(badge: Int64?) -> Int {
        switch (badge, slot) {
        case (let badge?, _?): tailEnd + String(badge).utf8.count
        case (nil, _): payload.count
        default: bytes(badge: badge).count
        }
    }

    /// A badge-only event's: `{"aps":{"badge":N}}`.
    static let badgeOnly = PayloadTemplate(.object([JSONMember("aps", .object([]))]), badgeSlot: true)

    /// The payload as it is, as a tree.
    var value: JSONValue {
        // Bytes this module wrote: they parse.
        guard let value = try? JSON.parse(payload) else { preconditionFailure("the JSON writer wrote what its reader refuses") }
        return value
    }
}

/// Writes a badge count into `aps.badge` of a payload, keeping every other key.
public enum BadgeInjection {
    /// Sets `aps.badge` of the payload object to `badge` (replacing a badge already there, in
    /// place, or appending it to `aps`) and returns the compact JSON.
    public static func inject(badge: Int64, into payload: JSONValue) -> [UInt8] {
        PayloadTemplate(payload, badgeSlot: true).bytes(badge: badge)
    }

    /// Writes the payload object at `span` compactly with `aps.badge`'s value left out, and returns the offset
    /// where it goes: the first `badge` of the last `aps` object in place (later duplicates dropped: a last-wins
    /// reader must not see a stale count), else appended to it, else a new `aps`, last.
    static func writeWithBadgeSlot(_ text: JSONText, payload span: Range<Int>, into out: inout [UInt8]) -> Int {
        var apsPosition: Int?
        var count = 0
        text.forEachMember(of: span) { key, _ in
            if text.string(key, is: "aps") { apsPosition = count }
            count += 1
        }
        var slot: Int?
        var position = 0
        out.append(UInt8(ascii: "{"))
        text.forEachMember(of: span) { key, value in
            if position > 0 { out.append(UInt8(ascii: ",")) }
            text.writeString(key, into: &out)
            out.append(UInt8(ascii: ":"))
            if position == apsPosition, text.kind(value) == .object {
                slot = writeAPS(text, value, into: &out)
            } else {
                text.writeCompact(value, into: &out)
            }
            position += 1
        }
        if slot == nil {
            if position > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #""aps":{"badge":"#.utf8)
            slot = out.count
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "}"))
        return slot!
    }

    /// Writes the `aps` object at `span` with the value of its first `badge` left out; returns where it goes.
    private static func writeAPS(_ text: JSONText, _ span: Range<Int>, into out: inout [UInt8]) -> Int {
        var slot: Int?
        var first = true
        out.append(UInt8(ascii: "{"))
        text.forEachMember(of: span) { key, value in
            let isBadge = text.string(key, is: "badge")
            if isBadge && slot != nil { return }
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            if isBadge {
                out.append(contentsOf: #""badge":"#.utf8)
                slot = out.count
            } else {
                text.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                text.writeCompact(value, into: &out)
            }
        }
        if slot == nil {
            if !first { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #""badge":"#.utf8)
            slot = out.count
        }
        out.append(UInt8(ascii: "}"))
        return slot!
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

extension PushEvent {
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
        guard let topic = topic(defaultTopic: defaultTopic) else {
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

    /// The `apns-topic` a device's notification gets: the event's `apns.topic`, else `defaultTopic` (the device
    /// registration's, else the configuration's).
    public func topic(defaultTopic: String?) -> String? {
        apns?.topic ?? defaultTopic
    }

    /// The notification to `token` made from `sibling`, this event's notification to another device with
    /// the same topic: only the token and the `apns-id` differ, so only the token is checked.
    public func render(for token: String, like sibling: APNsNotification) throws(EventRejection) -> APNsNotification {
        let device: APNsDeviceToken
        do {
            device = try APNsDeviceToken(hex: token)
        } catch {
            throw EventRejection(error)
        }
        return sibling.sent(to: device, apnsID: DeliveryIdentity.apnsID(eventID: id, token: token))
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
