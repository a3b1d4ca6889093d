public import Foundation

/// The field of a notification that a validation rule is about.
public enum APNsField: String, Sendable, Hashable, CaseIterable {
    case deviceToken = "device_token"
    case channelID = "apns-channel-id"
    case topic = "apns-topic"
    case pushType = "apns-push-type"
    case priority = "apns-priority"
    case expiration = "apns-expiration"
    case collapseID = "apns-collapse-id"
    case apnsID = "apns-id"
    case payload = "payload"
}

/// A violation of Apple's rules, found before anything is sent. Names the field it is about.
public struct APNsValidationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong with the field.
    public enum Problem: Sendable, Hashable {
        /// The value is empty.
        case empty
        /// The value has an odd number of hex digits.
        case oddLength
        /// The value contains characters that are not hex digits.
        case notHex
        /// The value is shorter than `minimum`.
        case tooShort(minimum: Int, actual: Int)
        /// The value is longer than `maximum` (characters or bytes, depending on the field).
        case tooLong(maximum: Int, actual: Int)
        /// The topic does not end with the suffix the push type requires.
        case missingSuffix(String)
        /// The value contains characters that are not allowed (whitespace, control characters).
        case invalidCharacters
        /// The value is not one of the allowed values.
        case notAllowed(String)
        /// The payload is not valid JSON or not a JSON object.
        case notJSONObject
        /// The payload has no `aps` member.
        case missingAps
        /// The payload's `aps` member is not a dictionary.
        case apsNotDictionary
    }

    /// The field the rule is about.
    public let field: APNsField
    /// What is wrong.
    public let problem: Problem

    /// Creates an error for `field`.
    public init(_ field: APNsField, _ problem: Problem) {
        self.field = field
        self.problem = problem
    }

    /// A sentence naming the field and the rule, e.g. `apns-topic must end with .voip for this push type`.
    public var description: String {
        let name = field.rawValue
        return switch problem {
        case .empty: "\(name) must not be empty"
        case .oddLength: "\(name) must have an even number of hex characters"
        case .notHex: "\(name) must contain only hex characters (0-9, a-f)"
        case .tooShort(let minimum, let actual): "\(name) is \(actual) long, the minimum is \(minimum)"
        case .tooLong(let maximum, let actual): "\(name) is \(actual) long, the limit is \(maximum)"
        case .missingSuffix(let suffix): "\(name) must end with \(suffix) for this push type"
        case .invalidCharacters: "\(name) contains characters that are not allowed (spaces or control characters)"
        case .notAllowed(let value): "\(name) does not allow \(value)"
        case .notJSONObject: "\(name) must be a JSON object"
        case .missingAps: "\(name) must have an aps member"
        case .apsNotDictionary: "\(name) aps must be an object"
        }
    }
}

/// An APNs device token: 32 to 100 bytes, written as 64 to 200 hex digits.
///
/// Held as its lower-case hex text, the form the HTTP/2 request path and the relay's records use: a token that
/// arrives as lower-case text (as the relay's do) is kept without a copy, and only the legacy binary interface
/// reads it as bytes.
public struct APNsDeviceToken: Sendable, Hashable, CustomStringConvertible {
    /// Lower-case hex, as APNs expects in the request path.
    public let hex: String

    /// The raw token bytes.
    public var bytes: [UInt8] {
        var hex = hex
        return hex.withUTF8 { digits in
            [UInt8](unsafeUninitializedCapacity: digits.count / 2) { bytes, initialized in
                for index in 0..<digits.count / 2 { bytes[index] = Self.byte(at: index, of: digits) }
                initialized = digits.count / 2
            }
        }
    }

    /// Parses a hex token (either case). Throws `APNsValidationError` naming `.deviceToken`.
    public init(hex: some StringProtocol) throws(APNsValidationError) {
        try self.init(hex: String(hex))
    }

    /// Parses a hex token (either case). Throws `APNsValidationError` naming `.deviceToken`.
    ///
    /// The `String` form is not generic, so callers in other modules (the simulator, per request) do not run the
    /// unspecialised generic code, which looks up type metadata for every character. It reads the string's own
    /// UTF-8 in place; lower-case text is kept as it is (no allocation).
    public init(hex: String) throws(APNsValidationError) {
        var text = hex
        let isLowerCase = try text.withUTF8 { digits in Result { () throws(APNsValidationError) in try Self.validate(hexDigits: digits) } }.get()
        self.hex = isLowerCase ? hex : hex.lowercased()
    }

    /// The rules in the order a person fixes them: the length, then the characters, then the pairing. Returns
    /// whether every letter is lower-case.
    private static func validate(hexDigits utf8: UnsafeBufferPointer<UInt8>) throws(APNsValidationError) -> Bool {
        if utf8.isEmpty { throw APNsValidationError(.deviceToken, .empty) }
        if utf8.count < 64 { throw APNsValidationError(.deviceToken, .tooShort(minimum: 64, actual: utf8.count)) }
        if utf8.count > 200 { throw APNsValidationError(.deviceToken, .tooLong(maximum: 200, actual: utf8.count)) }
        var isLowerCase = true
        var index = 0
        // Eight digits at a time (one token per notification).
        while index + 8 <= utf8.count {
            let word = ByteWord.load(utf8.baseAddress!, at: index)
            if ByteWord.hexDigits(of: word, upperCase: false) != ByteWord.highBits {
                guard ByteWord.hexDigits(of: word, upperCase: true) == ByteWord.highBits else {
                    throw APNsValidationError(.deviceToken, .notHex)
                }
                isLowerCase = false
            }
            index += 8
        }
        for character in utf8[index...] {
            switch character {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): continue
            case UInt8(ascii: "A")...UInt8(ascii: "F"): isLowerCase = false
            default: throw APNsValidationError(.deviceToken, .notHex)
            }
        }
        if utf8.count % 2 != 0 { throw APNsValidationError(.deviceToken, .oddLength) }
        return isLowerCase
    }

    /// Wraps raw token bytes (32...100 bytes).
    public init(bytes: [UInt8]) throws(APNsValidationError) {
        if bytes.isEmpty { throw APNsValidationError(.deviceToken, .empty) }
        if bytes.count < 32 { throw APNsValidationError(.deviceToken, .tooShort(minimum: 64, actual: bytes.count * 2)) }
        if bytes.count > 100 { throw APNsValidationError(.deviceToken, .tooLong(maximum: 200, actual: bytes.count * 2)) }
        self.hex = Self.hexText(of: bytes)
    }

    /// The lower-case hex text of `bytes`, two digits per byte (a token's text; the collapse id's digest).
    public static func hexText(of bytes: [UInt8]) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            for (index, byte) in bytes.enumerated() {
                out[2 * index] = hexDigit(byte >> 4)
                out[2 * index + 1] = hexDigit(byte & 0x0F)
            }
            return bytes.count * 2
        }
    }

    /// `prefix` followed by the lower-case hex (the request `:path` is one per notification).
    package func hex(prefixedBy prefix: StaticString) -> String {
        var text = String(decoding: UnsafeBufferPointer(start: prefix.utf8Start, count: prefix.utf8CodeUnitCount), as: UTF8.self)
        text += hex
        return text
    }

    /// Appends `prefix` and the token's lower-case hex to `out` (a request's header block), with no string between.
    package func appendHex(prefixedBy prefix: StaticString, to out: inout [UInt8]) {
        out.append(contentsOf: UnsafeBufferPointer(start: prefix.utf8Start, count: prefix.utf8CodeUnitCount))
        var hex = hex
        hex.withUTF8 { out.append(contentsOf: $0) }
    }

    /// The byte written by the digits at `2 * index` and `2 * index + 1` of `digits` (valid lower-case hex).
    @inline(__always)
    private static func byte(at index: Int, of digits: UnsafeBufferPointer<UInt8>) -> UInt8 {
        hexValue(digits[2 * index]) << 4 | hexValue(digits[2 * index + 1])
    }

    /// A shortened form for logs (first 8 hex digits).
    public var shortDescription: String { Self.shortened(hex: hex) }

    /// The form of a token every log line uses: its first 8 hex digits and "…", never the whole token
    /// (contract, guarantee 6). For tokens held as text (the relay, the simulator, the CLI).
    public static func shortened(hex: some StringProtocol) -> String {
        String(hex.prefix(8)).lowercased() + "…"
    }

    public var description: String { shortDescription }

    /// A stable 64-bit hash (FNV-1a) of the token bytes, identical in every process.
    public var stableHash: UInt64 {
        var hex = hex
        return hex.withUTF8 { digits in
            // Once per notification (the pool picks its connection by it): each byte computed from its digits.
            (0..<digits.count / 2).reduce(FNV1a.offsetBasis) { hash, index in FNV1a.step(hash, Self.byte(at: index, of: digits)) }
        }
    }

    /// The value of a byte known to be a hex digit (either case): its low four bits, plus 9 for a letter (bit 6 set).
    @inlinable @inline(__always)
    public static func hexValue(_ digit: UInt8) -> UInt8 {
        (digit & 0x0F) &+ 9 &* (digit >> 6)
    }

    /// The lower-case hex digit of `value` (0-15), the inverse of ``hexValue(_:)``.
    @inlinable @inline(__always)
    public static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") &+ value : UInt8(ascii: "a") &- 10 &+ value
    }
}

/// 64-bit FNV-1a: a hash that is the same in every process (Swift's `Hasher` is seeded per process).
enum FNV1a {
    static var offsetBasis: UInt64 { 0xcbf2_9ce4_8422_2325 }

    static func hash(_ bytes: some Sequence<UInt8>) -> UInt64 {
        bytes.reduce(offsetBasis, step)
    }

    /// The hash after one more byte.
    @inline(__always)
    static func step(_ hash: UInt64, _ byte: UInt8) -> UInt64 {
        (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
    }
}

/// A broadcast channel id, as APNs issues it when a channel is created (`apns-channel-id`): base64 text.
public struct APNsChannelID: Sendable, Hashable, CustomStringConvertible {
    /// The id exactly as APNs wrote it.
    public let value: String

    /// Checks the form of an id: 1 to 256 characters of base64 (`A-Z a-z 0-9 + /`, `=` padding) that decode
    /// to at least one byte. Whether the channel exists is APNs' answer, not a rule of the form. Throws naming
    /// `.channelID`.
    public init(_ value: String) throws(APNsValidationError) {
        if value.isEmpty { throw APNsValidationError(.channelID, .empty) }
        if value.utf8.count > Self.maximumLength {
            throw APNsValidationError(.channelID, .tooLong(maximum: Self.maximumLength, actual: value.utf8.count))
        }
        guard let decoded = Data(base64Encoded: value), !decoded.isEmpty else {
            throw APNsValidationError(.channelID, .notAllowed("text that is not base64"))
        }
        self.value = value
    }

    /// The longest id accepted. Apple's are 24 characters (16 bytes); the bound only keeps headers and paths sane.
    public static let maximumLength = 256

    /// A shortened form for logs (first 8 characters), as for device tokens.
    public var shortDescription: String { String(value.prefix(8)) + "…" }

    public var description: String { shortDescription }
}

/// Who a notification goes to: one device, or every device subscribed to a broadcast channel.
public enum APNsRecipient: Sendable, Hashable {
    /// `POST /3/device/{token}`.
    case device(APNsDeviceToken)
    /// `POST /4/broadcasts/apps/{bundle id}` with `apns-channel-id` (iOS 18 Live Activities).
    case channel(APNsChannelID)

    /// A stable 64-bit hash (FNV-1a) that picks the connection slot: a recipient keeps its connection.
    public var stableHash: UInt64 {
        switch self {
        case .device(let token): return token.stableHash
        case .channel(let channel): return FNV1a.hash(channel.value.utf8)
        }
    }

    /// The shortened form logs use.
    public var shortDescription: String {
        switch self {
        case .device(let token): token.shortDescription
        case .channel(let channel): "channel " + channel.shortDescription
        }
    }
}

/// The `apns-push-type` values Apple defines.
public enum APNsPushType: String, Sendable, Hashable, CaseIterable {
    case alert, background, voip, complication, fileprovider, mdm, location, liveactivity, pushtotalk, widgets
    /// A control's push token (iOS 18 control widgets, `ControlPushHandler`): the system reloads that control.
    case controls

    /// The suffixes the `apns-topic` must end with for this push type (any one of them), or empty when
    /// the topic is the plain bundle id.
    ///
    /// `pushtotalk` accepts Apple's documented `.voip-ptt` and the `.push-type.pushtotalk` spelling.
    public var requiredTopicSuffixes: [String] {
        switch self {
        case .voip: return [".voip"]
        case .complication: return [".complication"]
        case .fileprovider: return [".pushkit.fileprovider"]
        case .liveactivity: return [".push-type.liveactivity"]
        case .pushtotalk: return [".voip-ptt", ".push-type.pushtotalk"]
        case .widgets: return [".push-type.widgets"]
        case .controls: return [".push-type.controls"]
        case .location: return [".location-query"]
        case .alert, .background, .mdm: return []
        }
    }

    /// The largest payload Apple accepts for this push type, in bytes.
    public var maximumPayloadSize: Int { self == .voip ? 5120 : 4096 }
}

/// The `apns-priority` values.
public enum APNsPriority: Int, Sendable, Hashable, CaseIterable {
    /// Deliver immediately (not allowed for background pushes).
    case immediate = 10
    /// Deliver taking the device's power into account.
    case conservePower = 5
    /// Lowest priority: prioritise the device's power over all else.
    case low = 1
}

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
