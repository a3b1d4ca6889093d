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
        guard Self.isBase64(value.utf8) else {
            throw APNsValidationError(.channelID, .notAllowed("text that is not base64"))
        }
        self.value = value
    }

    /// Base64's grammar, as the published event schema's pattern spells it: groups of four from its alphabet, the
    /// last one padded with at most two `=`. (Foundation's decoder takes `====` as one byte.) A non-empty text of that
    /// form decodes to at least one byte.
    private static func isBase64(_ text: String.UTF8View) -> Bool {
        guard text.count % 4 == 0 else { return false }
        var padding = 0
        for byte in text {
            if byte == UInt8(ascii: "=") {
                padding += 1
                continue
            }
            let inAlphabet = (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "/")
            guard padding == 0, inAlphabet else { return false }
        }
        return padding <= 2
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
