public import NIOCore


/// Why a notification cannot be put on the binary wire. Raised before a single byte is written.
public enum APNsBinaryEncodingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The token is not 32 bytes.
    case tokenLength(actual: Int)
    /// The payload exceeds the format's limit.
    case payloadTooLarge(format: APNsBinaryFormat, limit: Int, actual: Int)
    /// The payload is empty.
    case payloadEmpty
    /// The expiration does not fit the 4-byte field (UNIX seconds, 0...4294967295).
    case expirationOutOfRange(Int64)
    /// The notification is a broadcast: the legacy interface addresses devices only.
    case noDeviceToken

    public var description: String {
        switch self {
        case .tokenLength(let actual): return "device token is \(actual) bytes; the binary interface takes exactly 32"
        case .payloadTooLarge(let format, let limit, let actual):
            return "payload is \(actual) bytes; the limit for binary format \(format.rawValue) is \(limit)"
        case .payloadEmpty: return "payload is empty"
        case .expirationOutOfRange(let value): return "expiration \(value) does not fit 4 bytes"
        case .noDeviceToken: return "a broadcast (apns-channel-id) cannot be sent over the binary interface"
        }
    }

    /// The status APNs would have answered for the same mistake.
    public var equivalentStatus: APNsBinaryStatus {
        switch self {
        case .tokenLength: return .invalidTokenSize
        case .payloadTooLarge: return .invalidPayloadSize
        case .payloadEmpty: return .missingPayload
        case .expirationOutOfRange: return .processingError
        case .noDeviceToken: return .missingDeviceToken
        }
    }
}

/// Frame item ids of format 2.
public enum APNsBinaryItem: UInt8, Sendable, Hashable {
    case token = 1
    case payload = 2
    case identifier = 3
    case expiration = 4
    case priority = 5
}

/// One notification as the binary interface sees it: the fields each format can carry.
public struct APNsBinaryNotification: Sendable, Hashable {
    /// The device token (32 bytes on the wire).
    public var token: [UInt8]
    /// The JSON payload.
    public var payload: [UInt8]
    /// The identifier echoed in error responses (formats 1 and 2).
    public var identifier: UInt32
    /// UNIX seconds after which APNs stops trying; 0 = deliver once (formats 1 and 2).
    public var expiration: UInt32
    /// 10 or 5 (format 2 only).
    public var priority: UInt8

    /// Creates the value.
    public init(token: [UInt8], payload: [UInt8], identifier: UInt32 = 0, expiration: UInt32 = 0, priority: UInt8 = 10) {
        self.token = token
        self.payload = payload
        self.identifier = identifier
        self.expiration = expiration
        self.priority = priority
    }

    /// Takes the wire fields of a validated notification. The legacy interface knows priorities 10 and 5 only;
    /// priority 1 is sent as 5.
    public init(_ notification: APNsNotification, identifier: UInt32) throws(APNsBinaryEncodingError) {
        let expiration = notification.expiration ?? 0
        guard expiration >= 0 && expiration <= Int64(UInt32.max) else { throw .expirationOutOfRange(expiration) }
        guard let token = notification.token else { throw .noDeviceToken }
        self.init(
            token: token.bytes, payload: notification.payload, identifier: identifier,
            expiration: UInt32(expiration), priority: notification.priority == .immediate ? 10 : 5)
    }

    /// Checks the limits of `format`; throws before anything is written.
    public func validate(for format: APNsBinaryFormat) throws(APNsBinaryEncodingError) {
        if token.count != APNsBinaryFormat.tokenLength { throw .tokenLength(actual: token.count) }
        if payload.isEmpty { throw .payloadEmpty }
        if payload.count > format.maximumPayloadSize {
            throw .payloadTooLarge(format: format, limit: format.maximumPayloadSize, actual: payload.count)
        }
    }

    /// The encoded size in `format`.
    public func encodedSize(_ format: APNsBinaryFormat) -> Int {
        switch format {
        case .simple: return 1 + 2 + token.count + 2 + payload.count
        case .enhanced: return 1 + 4 + 4 + 2 + token.count + 2 + payload.count
        case .framed: return 1 + 4 + framedItemsSize
        }
    }

    private var framedItemsSize: Int { (3 + token.count) + (3 + payload.count) + (3 + 4) + (3 + 4) + (3 + 1) }

    /// Validates, then appends the encoding in `format` to `buffer` (big-endian integers). On error the buffer
    /// is untouched.
    public func encode(_ format: APNsBinaryFormat, into buffer: inout ByteBuffer) throws(APNsBinaryEncodingError) {
        try validate(for: format)
        buffer.reserveCapacity(minimumWritableBytes: encodedSize(format))
        buffer.writeInteger(UInt8(format.rawValue))
        switch format {
        case .simple:
            writeTokenAndPayload(into: &buffer)
        case .enhanced:
            buffer.writeInteger(identifier)
            buffer.writeInteger(expiration)
            writeTokenAndPayload(into: &buffer)
        case .framed:
            buffer.writeInteger(UInt32(framedItemsSize))
            writeItem(.token, token, into: &buffer)
            writeItem(.payload, payload, into: &buffer)
            buffer.writeInteger(APNsBinaryItem.identifier.rawValue)
            buffer.writeInteger(UInt16(4))
            buffer.writeInteger(identifier)
            buffer.writeInteger(APNsBinaryItem.expiration.rawValue)
            buffer.writeInteger(UInt16(4))
            buffer.writeInteger(expiration)
            buffer.writeInteger(APNsBinaryItem.priority.rawValue)
            buffer.writeInteger(UInt16(1))
            buffer.writeInteger(priority)
        }
    }

    /// The encoding as bytes.
    public func encoded(_ format: APNsBinaryFormat) throws(APNsBinaryEncodingError) -> [UInt8] {
        var buffer = ByteBuffer()
        try encode(format, into: &buffer)
        return Array(buffer.readableBytesView)
    }

    private func writeTokenAndPayload(into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt16(token.count))
        buffer.writeBytes(token)
        buffer.writeInteger(UInt16(payload.count))
        buffer.writeBytes(payload)
    }

    private func writeItem(_ item: APNsBinaryItem, _ data: [UInt8], into buffer: inout ByteBuffer) {
        buffer.writeInteger(item.rawValue)
        buffer.writeInteger(UInt16(data.count))
        buffer.writeBytes(data)
    }
}

