public import Foundation

/// A notification that has passed Apple's rules.
public struct APNsNotification: Sendable, Hashable {
    /// The fields every device of a fan-out shares, in one immutable object: a notification is copied many times
    /// on its way (queued, written, answered, on two threads), and each copy then retains one reference for them
    /// rather than one per field; a sibling (``sent(to:apnsID:)``) shares it.
    private final class Fields: Sendable {
        let topic: String
        let pushType: APNsPushType
        let priority: APNsPriority
        let expiration: Int64?
        let collapseID: String?
        let payload: [UInt8]

        init(topic: String, pushType: APNsPushType, priority: APNsPriority, expiration: Int64?, collapseID: String?, payload: [UInt8]) {
            self.topic = topic
            self.pushType = pushType
            self.priority = priority
            self.expiration = expiration
            self.collapseID = collapseID
            self.payload = payload
        }
    }

    private let fields: Fields
    /// The device, or the broadcast channel.
    public let recipient: APNsRecipient
    /// `apns-id`: the notification's UUID; kept across resends.
    public let apnsID: UUID

    /// The `apns-topic` (bundle id plus the push type's suffix); for a broadcast, the bundle id (it goes into the path).
    public var topic: String { fields.topic }
    /// The push type.
    public var pushType: APNsPushType { fields.pushType }
    /// The priority.
    public var priority: APNsPriority { fields.priority }
    /// `apns-expiration` in UNIX epoch seconds; `0` means "deliver once, don't store"; `nil` omits the header.
    public var expiration: Int64? { fields.expiration }
    /// `apns-collapse-id`, at most 64 bytes.
    public var collapseID: String? { fields.collapseID }
    /// The JSON payload bytes.
    public var payload: [UInt8] { fields.payload }

    private init(fields: Fields, recipient: APNsRecipient, apnsID: UUID) {
        self.fields = fields
        self.recipient = recipient
        self.apnsID = apnsID
    }

    /// The same notification to another device, with that device's `apns-id`. Nothing else changes, so
    /// nothing is validated again: an event fanned out to several devices checks its topic, collapse id
    /// and payload once.
    public func sent(to token: APNsDeviceToken, apnsID: UUID) -> APNsNotification {
        APNsNotification(fields: fields, recipient: .device(token), apnsID: apnsID)
    }

    public static func == (lhs: APNsNotification, rhs: APNsNotification) -> Bool {
        lhs.recipient == rhs.recipient && lhs.apnsID == rhs.apnsID
            && (lhs.fields === rhs.fields || (lhs.topic == rhs.topic && lhs.pushType == rhs.pushType && lhs.priority == rhs.priority
                && lhs.expiration == rhs.expiration && lhs.collapseID == rhs.collapseID && lhs.payload == rhs.payload))
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(recipient)
        hasher.combine(topic)
        hasher.combine(pushType)
        hasher.combine(priority)
        hasher.combine(expiration)
        hasher.combine(collapseID)
        hasher.combine(apnsID)
        hasher.combine(payload)
    }

    /// The device token, unless this is a broadcast.
    public var token: APNsDeviceToken? {
        if case .device(let token) = recipient { return token }
        return nil
    }

    /// The broadcast channel, if this is a broadcast.
    public var channelID: APNsChannelID? {
        if case .channel(let channel) = recipient { return channel }
        return nil
    }

    /// The app's bundle id: the topic without the suffix its push type requires (`com.example.app.voip` →
    /// `com.example.app`; a broadcast's topic is its bundle id already). It picks the app's credential.
    public var bundleID: String {
        for suffix in pushType.requiredTopicSuffixes where topic.hasSuffix(suffix) {
            return String(topic.dropLast(suffix.count))
        }
        return topic
    }

    /// Validates every field against Apple's rules; throws an error naming the first bad field.
    public init(
        token: APNsDeviceToken,
        topic: String,
        pushType: APNsPushType = .alert,
        priority: APNsPriority = .immediate,
        expiration: Int64? = nil,
        collapseID: String? = nil,
        apnsID: UUID = UUID(),
        payload: [UInt8]
    ) throws(APNsValidationError) {
        try Self.validateDevice(topic: topic, pushType: pushType, priority: priority, expiration: expiration, collapseID: collapseID, payload: payload)
        self.fields = Fields(topic: topic, pushType: pushType, priority: priority, expiration: expiration, collapseID: collapseID, payload: payload)
        self.recipient = .device(token)
        self.apnsID = apnsID
    }

    /// Checks a device notification's fields against Apple's rules.
    private static func validateDevice(topic: String, pushType: APNsPushType, priority: APNsPriority, expiration: Int64?, collapseID: String?,
                                       payload: [UInt8]) throws(APNsValidationError) {
        try Self.validateTopic(topic, pushType: pushType)
        if pushType == .background && priority == .immediate {
            throw APNsValidationError(.priority, .notAllowed("10 is not allowed for background pushes"))
        }
        if let expiration, expiration < 0 {
            throw APNsValidationError(.expiration, .notAllowed("negative"))
        }
        if let collapseID {
            if collapseID.isEmpty { throw APNsValidationError(.collapseID, .empty) }
            let size = collapseID.utf8.count
            if size > 64 { throw APNsValidationError(.collapseID, .tooLong(maximum: 64, actual: size)) }
            // Checked here because the connection sends our headers without re-validating them.
            if !Self.isValidHeaderValue(collapseID) { throw APNsValidationError(.collapseID, .invalidCharacters) }
        }
        try Self.validatePayload(payload, pushType: pushType)
    }

    /// A broadcast to every device subscribed to `channel` of the app `bundleID` (push type `liveactivity`, as Apple
    /// requires for channels). The bundle id goes into the request path, so it is checked as a topic and may not
    /// contain `/`, `?` or `#`. A broadcast has no collapse id. `apnsID` is sent as `apns-request-id`.
    public init(
        channel: APNsChannelID,
        bundleID: String,
        priority: APNsPriority = .immediate,
        expiration: Int64? = nil,
        apnsID: UUID = UUID(),
        payload: [UInt8]
    ) throws(APNsValidationError) {
        try Self.validateBundleID(bundleID)
        if let expiration, expiration < 0 {
            throw APNsValidationError(.expiration, .notAllowed("negative"))
        }
        try Self.validatePayload(payload, pushType: .liveactivity)
        self.fields = Fields(topic: bundleID, pushType: .liveactivity, priority: priority, expiration: expiration, collapseID: nil, payload: payload)
        self.recipient = .channel(channel)
        self.apnsID = apnsID
    }

    /// Checks a bundle id that goes into a request path (broadcasts, channel management): a topic without a push
    /// type suffix rule, and no `/`, `?` or `#`. Throws naming `.topic`.
    public static func validateBundleID(_ bundleID: String) throws(APNsValidationError) {
        try validateTopic(bundleID, pushType: .alert)
        if bundleID.utf8.contains(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) {
            throw APNsValidationError(.topic, .invalidCharacters)
        }
    }

    /// Validates raw header-style values (as they arrive in an event) and builds a notification.
    public init(
        tokenHex: String,
        topic: String,
        pushType: String,
        priority: Int,
        expiration: Int64? = nil,
        collapseID: String? = nil,
        apnsID: String,
        payload: [UInt8]
    ) throws(APNsValidationError) {
        let token = try APNsDeviceToken(hex: tokenHex)
        guard let type = APNsPushType(rawValue: pushType) else {
            throw APNsValidationError(.pushType, .notAllowed(pushType))
        }
        guard let prio = APNsPriority(rawValue: priority) else {
            throw APNsValidationError(.priority, .notAllowed(String(priority)))
        }
        let id = try Self.parseAPNsID(apnsID)
        try self.init(token: token, topic: topic, pushType: type, priority: prio, expiration: expiration, collapseID: collapseID, apnsID: id,
                      payload: payload)
    }

    /// Parses an `apns-id` string; throws naming `.apnsID` unless it is a UUID.
    public static func parseAPNsID(_ string: String) throws(APNsValidationError) -> UUID {
        guard let id = UUID(uuidString: string) else { throw APNsValidationError(.apnsID, .notAllowed(string)) }
        return id
    }

    /// Whether `value` may be sent as an HTTP/2 header value: no control characters (tab aside) and no space or
    /// tab at either end (RFC 9113 §8.2.1). The rule for `apns-collapse-id`, which is free text.
    public static func isValidHeaderValue(_ value: String) -> Bool {
        let bytes = value.utf8
        func isBlank(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }
        func isControl(_ byte: UInt8) -> Bool { (byte < 0x20 && byte != 0x09) || byte == 0x7f }
        return !bytes.contains(where: isControl) && bytes.first.map(isBlank) != true && bytes.last.map(isBlank) != true
    }

    /// Checks a topic against the push type's suffix rule.
    public static func validateTopic(_ topic: String, pushType: APNsPushType) throws(APNsValidationError) {
        if topic.isEmpty { throw APNsValidationError(.topic, .empty) }
        if topic.utf8.count > 255 { throw APNsValidationError(.topic, .tooLong(maximum: 255, actual: topic.utf8.count)) }
        for scalar in topic.unicodeScalars where scalar.value <= 0x20 || scalar.value == 0x7f {
            throw APNsValidationError(.topic, .invalidCharacters)
        }
        let suffixes = pushType.requiredTopicSuffixes
        if !suffixes.isEmpty && !suffixes.contains(where: { topic.hasSuffix($0) && topic.count > $0.count }) {
            throw APNsValidationError(.topic, .missingSuffix(suffixes[0]))
        }
    }

    /// Checks a payload: a JSON object with an `aps` dictionary, within the push type's size limit.
    public static func validatePayload(_ payload: [UInt8], pushType: APNsPushType) throws(APNsValidationError) {
        if payload.isEmpty { throw APNsValidationError(.payload, .empty) }
        let limit = pushType.maximumPayloadSize
        if payload.count > limit { throw APNsValidationError(.payload, .tooLong(maximum: limit, actual: payload.count)) }
        switch APNsPayloadScanner.scan(payload) {
        case .valid: return
        case .notJSONObject: throw APNsValidationError(.payload, .notJSONObject)
        case .missingAps: throw APNsValidationError(.payload, .missingAps)
        case .apsNotDictionary: throw APNsValidationError(.payload, .apsNotDictionary)
        }
    }
}
