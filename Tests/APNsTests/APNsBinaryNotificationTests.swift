import APNs
import NIOCore
import Testing

/// The legacy notification's three wire formats, byte for byte, and the limits checked before any byte is written.
@Suite("Legacy binary notification formats (no sockets)")
struct APNsBinaryNotificationTests {
    static let token = [UInt8](repeating: 0xAA, count: 32)
    static let payload = Array(#"{"aps":{}}"#.utf8)  // 10 bytes
    static let sample = APNsBinaryNotification(token: token, payload: payload, identifier: 0x0102_0304, expiration: 3600, priority: 5)

    @Test("format 0 (simple): 0 | token length | token | payload length | payload")
    func simpleVector() throws {
        let expected: [UInt8] = [0x00, 0x00, 0x20] + Self.token + [0x00, 0x0A] + Self.payload
        #expect(try Self.sample.encoded(.simple) == expected)
        #expect(Self.sample.encodedSize(.simple) == expected.count)
    }

    @Test("format 1 (enhanced): 1 | identifier | expiry | token length | token | payload length | payload")
    func enhancedVector() throws {
        let expected: [UInt8] = [0x01, 0x01, 0x02, 0x03, 0x04, 0x00, 0x00, 0x0E, 0x10, 0x00, 0x20] + Self.token + [0x00, 0x0A] + Self.payload
        #expect(try Self.sample.encoded(.enhanced) == expected)
        #expect(Self.sample.encodedSize(.enhanced) == expected.count)
    }

    @Test("format 2 (framed): 2 | frame length | token, payload, identifier, expiration, priority items")
    func framedVector() throws {
        let expected: [UInt8] = [0x02, 0x00, 0x00, 0x00, 0x42]
            + [0x01, 0x00, 0x20] + Self.token
            + [0x02, 0x00, 0x0A] + Self.payload
            + [0x03, 0x00, 0x04, 0x01, 0x02, 0x03, 0x04]
            + [0x04, 0x00, 0x04, 0x00, 0x00, 0x0E, 0x10]
            + [0x05, 0x00, 0x01, 0x05]
        #expect(try Self.sample.encoded(.framed) == expected)
        #expect(Self.sample.encodedSize(.framed) == expected.count)
    }

    @Test("payload limits: 256 bytes for formats 0 and 1, 2048 for format 2; the buffer stays untouched")
    func payloadLimits() throws {
        let at256 = APNsBinaryNotification(token: Self.token, payload: [UInt8](repeating: 0x20, count: 256))
        let at257 = APNsBinaryNotification(token: Self.token, payload: [UInt8](repeating: 0x20, count: 257))
        let at2049 = APNsBinaryNotification(token: Self.token, payload: [UInt8](repeating: 0x20, count: 2049))
        _ = try at256.encoded(.simple)
        _ = try at256.encoded(.enhanced)
        _ = try at257.encoded(.framed)
        var buffer = ByteBuffer()
        #expect(throws: APNsBinaryEncodingError.payloadTooLarge(format: .simple, limit: 256, actual: 257)) { try at257.encode(.simple, into: &buffer) }
        #expect(throws: APNsBinaryEncodingError.payloadTooLarge(format: .enhanced, limit: 256, actual: 257)) { try at257.encode(.enhanced, into: &buffer) }
        #expect(throws: APNsBinaryEncodingError.payloadTooLarge(format: .framed, limit: 2048, actual: 2049)) { try at2049.encode(.framed, into: &buffer) }
        #expect(buffer.readableBytes == 0)
    }

    @Test("the token must be 32 bytes; the buffer stays untouched", arguments: [0, 31, 33, 64, 100])
    func tokenLength(length: Int) {
        let notification = APNsBinaryNotification(token: [UInt8](repeating: 1, count: length), payload: Self.payload)
        for format in APNsBinaryFormat.allCases {
            var buffer = ByteBuffer()
            #expect(throws: APNsBinaryEncodingError.tokenLength(actual: length)) { try notification.encode(format, into: &buffer) }
            #expect(buffer.readableBytes == 0)
        }
    }

}
