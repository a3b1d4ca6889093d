import APNs
import NIOCore
import Testing

@Suite("Legacy binary decoders: frames, error responses, feedback tuples (no sockets)")
struct APNsBinaryDecodersTests {
    static let token = [UInt8](repeating: 0xAA, count: 32)
    static let payload = Array(#"{"aps":{}}"#.utf8)  // 10 bytes
    static let sample = APNsBinaryNotification(token: token, payload: payload, identifier: 0x0102_0304, expiration: 3600, priority: 5)

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

    @Test("1,000 feedback tuples in random-sized chunks decode to the same 1,000")
    func feedbackChunks() throws {
        var generator = SystemRandomNumberGenerator()
        let tuples = (0..<1_000).map { index in
            APNsFeedbackTuple(timestamp: 1_700_000_000 + UInt32(index), token: (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
        }
        let stream = tuples.flatMap(\.encoded)
        for seed in 0..<3 {
            var rng = SplitMix64(seed: UInt64(seed))
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
