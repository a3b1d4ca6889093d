import APNs
import NIOCore
import Testing

@Suite("Legacy binary formats and decoders (no sockets)")
struct BinaryFormatTests {
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

    @Test("every format round-trips through the frame decoder, also fed one byte at a time", arguments: APNsBinaryFormat.allCases)
    func roundTrip(format: APNsBinaryFormat) throws {
        let payload = Array(#"{"aps":{"alert":"round trip","badge":3}}"#.utf8)
        let notifications = (0..<5).map {
            APNsBinaryNotification(token: (0..<32).map { UInt8($0) &+ UInt8(truncatingIfNeeded: $0) }, payload: payload,
                                   identifier: UInt32($0) * 7919, expiration: UInt32($0), priority: $0 % 2 == 0 ? 10 : 5)
        }
        var stream: [UInt8] = []
        for notification in notifications { stream += try notification.encoded(format) }
        var decoder = APNsBinaryFrameDecoder()
        var frames: [APNsBinaryFrame] = []
        for byte in stream {
            decoder.feed([byte])
            while let frame = try decoder.next() { frames.append(frame) }
        }
        #expect(decoder.bufferedBytes == 0)
        #expect(frames.count == notifications.count)
        for (frame, notification) in zip(frames, notifications) {
            #expect(frame.format == format)
            #expect(frame.token == notification.token)
            #expect(frame.payload == notification.payload)
            #expect(frame.identifier == (format == .simple ? nil : notification.identifier))
            #expect(frame.expiration == (format == .simple ? nil : notification.expiration))
            #expect(frame.priority == (format == .framed ? notification.priority : nil))
        }
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

    @Test("error responses decode every documented status, split anywhere")
    func errorResponses() throws {
        let statuses: [(UInt8, APNsBinaryStatus, String)] = [
            (0, .noErrors, "NoErrors"), (1, .processingError, "ProcessingError"), (2, .missingDeviceToken, "MissingDeviceToken"),
            (3, .missingTopic, "MissingTopic"), (4, .missingPayload, "MissingPayload"), (5, .invalidTokenSize, "InvalidTokenSize"),
            (6, .invalidTopicSize, "InvalidTopicSize"), (7, .invalidPayloadSize, "InvalidPayloadSize"), (8, .invalidToken, "InvalidToken"),
            (10, .shutdown, "Shutdown"), (255, .unknown, "Unknown"),
        ]
        for (byte, status, name) in statuses {
            for split in 0...6 {
                let bytes: [UInt8] = [8, byte, 0xDE, 0xAD, 0xBE, 0xEF]
                var decoder = APNsBinaryErrorResponseDecoder()
                decoder.feed(bytes[..<split])
                if split < 6 { #expect(try decoder.next() == nil) }
                decoder.feed(bytes[split...])
                let response = try #require(try decoder.next())
                #expect(response == APNsBinaryErrorResponse(status: status, identifier: 0xDEAD_BEEF))
                #expect(response.encoded == bytes)
                #expect(status.name == name)
                #expect(status.rawValue == byte)
                #expect(try decoder.next() == nil)
            }
        }
        #expect(APNsBinaryStatus(rawValue: 9) == .other(9))
        var wrong = APNsBinaryErrorResponseDecoder()
        wrong.feed([7, 8, 0, 0, 0, 1])
        #expect(throws: APNsBinaryDecodingError.unexpectedCommand(7)) { try wrong.next() }
    }

    @Test("status classification: 8 token dead, 10 and 0 processed, the rest permanent")
    func classification() {
        #expect(APNsBinaryStatus.invalidToken.response.classification == .tokenDead)
        #expect(APNsBinaryStatus.invalidToken.response.reason == .other("InvalidToken"))
        #expect(APNsBinaryStatus.shutdown.response.classification == .delivered)
        #expect(APNsBinaryStatus.noErrors.response.classification == .delivered)
        for status in [APNsBinaryStatus.processingError, .missingDeviceToken, .missingTopic, .missingPayload, .invalidTokenSize,
                       .invalidTopicSize, .invalidPayloadSize, .unknown, .other(9)] {
            #expect(status.response.classification == .permanent, "\(status)")
        }
        let outcome = APNsOutcome(classification: .tokenDead, lastAttempt: .response(APNsBinaryStatus.invalidToken.response), attempts: 1, apnsID: .init())
        #expect(outcome.httpStatus == nil)
        #expect(outcome.legacyStatus == .invalidToken)
    }

    @Test("1,000 feedback tuples in random-sized chunks decode to the same 1,000")
    func feedbackChunks() throws {
        var generator = SystemRandomNumberGenerator()
        let tuples = (0..<1_000).map { index in
            APNsFeedbackTuple(timestamp: 1_700_000_000 + UInt32(index), token: (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
        }
        let stream = tuples.flatMap(\.encoded)
        for seed in 0..<3 {
            var rng = SplitMix(seed: UInt64(seed))
            var decoder = APNsFeedbackDecoder()
            var decoded: [APNsFeedbackTuple] = []
            var offset = 0
            while offset < stream.count {
                let size = Int(rng.next() % 97) + 1
                let end = min(stream.count, offset + size)
                decoder.feed(stream[offset..<end])
                decoded += try decoder.drain()
                offset = end
            }
            try decoder.finish()
            #expect(decoded == tuples)
        }
        #expect(tuples[5].sinceMilliseconds == 1_700_000_005_000)
    }

    @Test("a truncated final feedback tuple is reported, not invented")
    func feedbackTruncated() throws {
        let tuples = (0..<3).map { APNsFeedbackTuple(timestamp: UInt32($0), token: [UInt8](repeating: UInt8($0), count: 32)) }
        let stream = tuples.flatMap(\.encoded)
        for cut in 1..<38 {
            var decoder = APNsFeedbackDecoder()
            decoder.feed(stream.dropLast(cut))
            let decoded = try decoder.drain()
            #expect(decoded == Array(tuples.prefix(2)))
            #expect(throws: APNsBinaryDecodingError.truncated(bytes: 38 - cut)) { try decoder.finish() }
        }
    }

    @Test("lengths are bounded before they are trusted")
    func boundedLengths() {
        var feedback = APNsFeedbackDecoder()
        feedback.feed([0, 0, 0, 1, 0xFF, 0xFF])
        #expect(throws: APNsBinaryDecodingError.lengthOutOfBounds(field: "feedback token", length: 65_535, bound: 1...100)) { try feedback.next() }
        var frames = APNsBinaryFrameDecoder()
        frames.feed([2, 0x7F, 0xFF, 0xFF, 0xFF])
        #expect(throws: APNsBinaryDecodingError.self) { try frames.next() }
        var simple = APNsBinaryFrameDecoder()
        simple.feed([0, 0x10, 0x00])
        #expect(throws: APNsBinaryDecodingError.lengthOutOfBounds(field: "token", length: 4096, bound: 0...100)) { try simple.next() }
        var unknown = APNsBinaryFrameDecoder()
        unknown.feed([9])
        #expect(throws: APNsBinaryDecodingError.unexpectedCommand(9)) { try unknown.next() }
    }
}

/// A small seeded generator so chunk sizes are reproducible.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
