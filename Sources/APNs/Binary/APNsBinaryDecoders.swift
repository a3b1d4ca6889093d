public import NIOCore

/// A stream of the legacy interface that cannot be decoded. Every length is checked against a bound before it is
/// used, so a corrupt or hostile peer cannot make a decoder wait for (or allocate) gigabytes.
public enum APNsBinaryDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The first byte is not a command this decoder knows.
    case unexpectedCommand(UInt8)
    /// A length field is outside its bound.
    case lengthOutOfBounds(field: String, length: Int, bound: ClosedRange<Int>)
    /// A format-2 item does not fit its frame, or repeats.
    case malformedFrame(String)
    /// The stream ended inside a record; `bytes` were buffered.
    case truncated(bytes: Int)

    public var description: String {
        switch self {
        case .unexpectedCommand(let command): return "unexpected command byte \(command)"
        case .lengthOutOfBounds(let field, let length, let bound):
            return "\(field) length \(length) is outside \(bound.lowerBound)...\(bound.upperBound)"
        case .malformedFrame(let detail): return "malformed frame: \(detail)"
        case .truncated(let bytes): return "stream ended inside a record (\(bytes) bytes left over)"
        }
    }
}

/// A decoder fed bytes as they arrive, in any split; it decodes from ``buffer``.
public protocol APNsIncrementalDecoder {
    /// The bytes received and not decoded yet (append with `feed`).
    var buffer: ByteBuffer { get set }
}

extension APNsIncrementalDecoder {
    /// Bytes buffered but not yet decoded.
    public var bufferedBytes: Int { buffer.readableBytes }

    /// Appends received bytes.
    public mutating func feed(_ bytes: ByteBuffer) {
        var bytes = bytes
        buffer.writeBuffer(&bytes)
    }

    /// Appends received bytes.
    public mutating func feed(_ bytes: some Sequence<UInt8>) { buffer.writeBytes(bytes) }
}

/// An error response of the binary gateway: `8 | status (1) | identifier (4)`.
public struct APNsBinaryErrorResponse: Sendable, Hashable {
    /// The command byte of an error response.
    public static let command: UInt8 = 8
    /// The encoded size.
    public static let size = 6
    /// What went wrong.
    public var status: APNsBinaryStatus
    /// The identifier of the notification it is about (for shutdown: the last one processed).
    public var identifier: UInt32

    /// Creates the value.
    public init(status: APNsBinaryStatus, identifier: UInt32) {
        self.status = status
        self.identifier = identifier
    }

    /// The six bytes on the wire.
    public var encoded: [UInt8] {
        [Self.command, status.rawValue, UInt8(identifier >> 24), UInt8((identifier >> 16) & 0xff), UInt8((identifier >> 8) & 0xff), UInt8(identifier & 0xff)]
    }
}

/// Decodes error responses from bytes as they arrive, in any split.
public struct APNsBinaryErrorResponseDecoder: APNsIncrementalDecoder, Sendable {
    /// The bytes received and not decoded yet.
    public var buffer = ByteBuffer()

    /// Creates an empty decoder.
    public init() {}

    /// The next complete response, or `nil` until more bytes arrive.
    public mutating func next() throws(APNsBinaryDecodingError) -> APNsBinaryErrorResponse? {
        guard let command = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return nil }
        guard command == APNsBinaryErrorResponse.command else { throw .unexpectedCommand(command) }
        guard buffer.readableBytes >= APNsBinaryErrorResponse.size,
            let status = buffer.getInteger(at: buffer.readerIndex + 1, as: UInt8.self),
            let identifier = buffer.getInteger(at: buffer.readerIndex + 2, as: UInt32.self)
        else { return nil }
        buffer.moveReaderIndex(forwardBy: APNsBinaryErrorResponse.size)
        buffer.discardReadBytes()
        return APNsBinaryErrorResponse(status: APNsBinaryStatus(rawValue: status), identifier: identifier)
    }
}

/// One tuple of the feedback service: `timestamp (4) | token length (2) | token`.
public struct APNsFeedbackTuple: Sendable, Hashable {
    /// When APNs found the app gone, in UNIX seconds.
    public var timestamp: UInt32
    /// The device token.
    public var token: [UInt8]

    /// Creates the value.
    public init(timestamp: UInt32, token: [UInt8]) {
        self.timestamp = timestamp
        self.token = token
    }

    /// The timestamp in epoch milliseconds (the `since` of a failed-token record).
    public var sinceMilliseconds: Int64 { Int64(timestamp) * 1000 }

    /// The token as lower-case hex.
    public var tokenHex: String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(token.count * 2)
        for byte in token {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes on the wire.
    public var encoded: [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeInteger(timestamp)
        buffer.writeInteger(UInt16(token.count))
        buffer.writeBytes(token)
        return Array(buffer.readableBytesView)
    }
}

/// Decodes feedback tuples from bytes as they arrive, in any split. Call ``finish()`` at end of stream: a
/// truncated last tuple is reported, never invented.
public struct APNsFeedbackDecoder: APNsIncrementalDecoder, Sendable {
    /// Token lengths accepted (APNs tokens are 32 to 100 bytes; the feedback service sends 32).
    public static let tokenLengthBound = 1...100
    /// The bytes received and not decoded yet.
    public var buffer = ByteBuffer()

    /// Creates an empty decoder.
    public init() {}

    /// The next complete tuple, or `nil` until more bytes arrive.
    public mutating func next() throws(APNsBinaryDecodingError) -> APNsFeedbackTuple? {
        let start = buffer.readerIndex
        guard let timestamp = buffer.getInteger(at: start, as: UInt32.self),
            let length = buffer.getInteger(at: start + 4, as: UInt16.self)
        else { return nil }
        guard Self.tokenLengthBound.contains(Int(length)) else {
            throw .lengthOutOfBounds(field: "feedback token", length: Int(length), bound: Self.tokenLengthBound)
        }
        guard let token = buffer.getBytes(at: start + 6, length: Int(length)) else { return nil }
        buffer.moveReaderIndex(forwardBy: 6 + Int(length))
        if buffer.readerIndex > 4096 { buffer.discardReadBytes() }
        return APNsFeedbackTuple(timestamp: timestamp, token: token)
    }

    /// Every complete tuple buffered now.
    public mutating func drain() throws(APNsBinaryDecodingError) -> [APNsFeedbackTuple] {
        var tuples: [APNsFeedbackTuple] = []
        while let tuple = try next() { tuples.append(tuple) }
        return tuples
    }

    /// The end of the stream: throws ``APNsBinaryDecodingError/truncated(bytes:)`` when a partial tuple is left.
    public func finish() throws(APNsBinaryDecodingError) {
        if buffer.readableBytes > 0 { throw .truncated(bytes: buffer.readableBytes) }
    }
}

/// One notification as a gateway reads it off the wire, before any rule is checked (the gateway answers rule
/// violations with a status; only undecodable bytes are errors).
public struct APNsBinaryFrame: Sendable, Hashable {
    /// The command it arrived in.
    public var format: APNsBinaryFormat
    /// The token (possibly empty or of the wrong size).
    public var token: [UInt8]
    /// The payload (possibly empty or too large).
    public var payload: [UInt8]
    /// The identifier (formats 1 and 2; `nil` for format 0 or a frame without one).
    public var identifier: UInt32?
    /// The expiry (formats 1 and 2).
    public var expiration: UInt32?
    /// The priority (format 2).
    public var priority: UInt8?

    /// Creates the value.
    public init(format: APNsBinaryFormat, token: [UInt8], payload: [UInt8], identifier: UInt32? = nil, expiration: UInt32? = nil, priority: UInt8? = nil) {
        self.format = format
        self.token = token
        self.payload = payload
        self.identifier = identifier
        self.expiration = expiration
        self.priority = priority
    }
}

/// Decodes notifications of formats 0, 1 and 2 from bytes as they arrive (the gateway side, and round trips).
public struct APNsBinaryFrameDecoder: APNsIncrementalDecoder, Sendable {
    /// The token length accepted on the wire before the gateway's own check (a wrong size is answered with 5).
    public static let tokenLengthBound = 0...100
    /// The payload length accepted on the wire before the gateway's own check (too large is answered with 7).
    public static let payloadLengthBound = 0...8_192
    /// The format-2 frame length accepted.
    public static let frameLengthBound = 0...(8_192 + 256)
    /// The bytes received and not decoded yet.
    public var buffer = ByteBuffer()

    /// Creates an empty decoder.
    public init() {}

    /// The next complete notification, or `nil` until more bytes arrive.
    public mutating func next() throws(APNsBinaryDecodingError) -> APNsBinaryFrame? {
        var cursor = buffer
        guard let command = cursor.readInteger(as: UInt8.self) else { return nil }
        let frame: APNsBinaryFrame?
        switch command {
        case 0:
            frame = try Self.readTokenAndPayload(&cursor).map { APNsBinaryFrame(format: .simple, token: $0.token, payload: $0.payload) }
        case 1:
            guard let identifier = cursor.readInteger(as: UInt32.self), let expiration = cursor.readInteger(as: UInt32.self) else { return nil }
            frame = try Self.readTokenAndPayload(&cursor).map {
                APNsBinaryFrame(format: .enhanced, token: $0.token, payload: $0.payload, identifier: identifier, expiration: expiration)
            }
        case 2:
            guard let length = cursor.readInteger(as: UInt32.self) else { return nil }
            guard Self.frameLengthBound.contains(Int(length)) else {
                throw .lengthOutOfBounds(field: "frame", length: Int(length), bound: Self.frameLengthBound)
            }
            guard var items = cursor.readSlice(length: Int(length)) else { return nil }
            frame = try Self.readItems(&items)
        default:
            throw .unexpectedCommand(command)
        }
        guard let frame else { return nil }
        buffer = cursor
        if buffer.readerIndex > 16_384 { buffer.discardReadBytes() }
        return frame
    }

    private static func readTokenAndPayload(_ cursor: inout ByteBuffer) throws(APNsBinaryDecodingError) -> (token: [UInt8], payload: [UInt8])? {
        guard let tokenLength = cursor.readInteger(as: UInt16.self) else { return nil }
        guard tokenLengthBound.contains(Int(tokenLength)) else {
            throw .lengthOutOfBounds(field: "token", length: Int(tokenLength), bound: tokenLengthBound)
        }
        guard let token = cursor.readBytes(length: Int(tokenLength)), let payloadLength = cursor.readInteger(as: UInt16.self) else { return nil }
        guard payloadLengthBound.contains(Int(payloadLength)) else {
            throw .lengthOutOfBounds(field: "payload", length: Int(payloadLength), bound: payloadLengthBound)
        }
        guard let payload = cursor.readBytes(length: Int(payloadLength)) else { return nil }
        return (token, payload)
    }

    private static func readItems(_ items: inout ByteBuffer) throws(APNsBinaryDecodingError) -> APNsBinaryFrame {
        var frame = APNsBinaryFrame(format: .framed, token: [], payload: [])
        var seen = Set<UInt8>()
        while items.readableBytes > 0 {
            guard let id = items.readInteger(as: UInt8.self), let length = items.readInteger(as: UInt16.self),
                let data = items.readBytes(length: Int(length))
            else { throw .malformedFrame("an item runs past the frame") }
            guard seen.insert(id).inserted else { throw .malformedFrame("item \(id) repeats") }
            switch APNsBinaryItem(rawValue: id) {
            case .token: frame.token = data
            case .payload: frame.payload = data
            case .identifier:
                guard data.count == 4 else { throw .malformedFrame("identifier item is \(data.count) bytes") }
                frame.identifier = data.reduce(0) { $0 << 8 | UInt32($1) }
            case .expiration:
                guard data.count == 4 else { throw .malformedFrame("expiration item is \(data.count) bytes") }
                frame.expiration = data.reduce(0) { $0 << 8 | UInt32($1) }
            case .priority:
                guard data.count == 1 else { throw .malformedFrame("priority item is \(data.count) bytes") }
                frame.priority = data[0]
            case nil:
                throw .malformedFrame("unknown item id \(id)")
            }
        }
        return frame
    }
}
