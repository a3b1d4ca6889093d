@testable import APNsCore
import Foundation
import Testing

private let goodToken = String(repeating: "ab", count: 32)
private let goodPayload = Array(#"{"aps":{"alert":"hi"}}"#.utf8)

struct TokenCase: Sendable, CustomStringConvertible {
    let hex: String
    let problem: APNsValidationError.Problem?
    var description: String { "\(hex.prefix(12))…(\(hex.count))" }
}

struct NotificationCase: Sendable, CustomStringConvertible {
    let name: String
    let topic: String
    let pushType: APNsPushType
    let priority: APNsPriority
    let expiration: Int64?
    let collapseID: String?
    let payload: [UInt8]
    let expected: APNsValidationError?
    var description: String { name }

    init(_ name: String, topic: String = "com.example.app", pushType: APNsPushType = .alert, priority: APNsPriority = .immediate,
         expiration: Int64? = nil, collapseID: String? = nil, payload: [UInt8] = goodPayload, expected: APNsValidationError?) {
        self.name = name
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.payload = payload
        self.expected = expected
    }
}

@Suite("Notification validation")
struct ValidationTests {
    static let tokenCases: [TokenCase] = [
        TokenCase(hex: goodToken, problem: nil),
        TokenCase(hex: String(repeating: "AB", count: 32), problem: nil),
        TokenCase(hex: String(repeating: "0f", count: 100), problem: nil),
        TokenCase(hex: "", problem: .empty),
        TokenCase(hex: String(repeating: "a", count: 65), problem: .oddLength),
        TokenCase(hex: String(repeating: "zz", count: 32), problem: .notHex),
        TokenCase(hex: String(repeating: "ab", count: 31), problem: .tooShort(minimum: 64, actual: 62)),
        TokenCase(hex: String(repeating: "ab", count: 101), problem: .tooLong(maximum: 200, actual: 202)),
    ]

    @Test("device token rule", arguments: tokenCases)
    func deviceToken(_ testCase: TokenCase) {
        do throws(APNsValidationError) {
            let token = try APNsDeviceToken(hex: testCase.hex)
            #expect(testCase.problem == nil)
            #expect(token.bytes.count == testCase.hex.count / 2)
            #expect(token.hex == testCase.hex.lowercased())
        } catch {
            #expect(error == APNsValidationError(.deviceToken, testCase.problem ?? .empty))
        }
    }

    @Test("a token's every byte is checked: any byte but a hex digit, at any position of the digits read together or of the tail, is refused; either case is read")
    func everyByteOfATokenIsChecked() {
        let hexDigits = Set("0123456789abcdefABCDEF".utf8)
        for length in [64, 70] {
            for position in 0..<length {
                for byte in UInt8.min...UInt8.max {
                    var digits = Array(repeating: UInt8(ascii: "7"), count: length)
                    digits[position] = byte
                    let text = String(decoding: digits, as: UTF8.self)
                    do throws(APNsValidationError) {
                        let token = try APNsDeviceToken(hex: text)
                        #expect(hexDigits.contains(byte), "byte \(byte) at \(position)")
                        #expect(token.hex == text.lowercased())
                    } catch {
                        // A byte above 0x7f may decode to a longer replacement; any error but notHex is then its length.
                        #expect(!hexDigits.contains(byte) && (error == APNsValidationError(.deviceToken, .notHex) || byte >= 0x80),
                                "byte \(byte) at \(position): \(error)")
                    }
                }
            }
        }
    }

    @Test("ByteWord's range test marks exactly the bytes in the range, at every position of the word, for every byte value")
    func byteWordRanges() {
        let ranges: [ClosedRange<UInt8>] = [0x00...0x1F, 0x22...0x22, 0x30...0x39, 0x41...0x5A, 0x61...0x66, 0x00...0x7F, 0x7F...0x7F]
        for range in ranges {
            for position in 0..<8 {
                for byte in UInt8.min...UInt8.max {
                    // The other seven bytes are each range's neighbours and the extremes, to catch a carry or borrow.
                    var bytes: [UInt8] = [range.lowerBound &- 1, range.upperBound &+ 1, 0x00, 0x7F, 0x80, 0xFF, range.lowerBound, range.upperBound]
                    bytes[position] = byte
                    let word = bytes.withUnsafeBufferPointer { ByteWord.load($0.baseAddress!, at: 0) }
                    let marked = ByteWord.bytes(of: word, from: range.lowerBound, through: range.upperBound)
                    let expected = bytes.enumerated().reduce(UInt64(0)) { mark, entry in
                        range.contains(entry.element) ? mark | (UInt64(0x80) << (8 * UInt64(entry.offset))) : mark
                    }
                    #expect(marked == expected, "byte \(byte) at \(position) in \(range)")
                    #expect(ByteWord.nonASCII(word) == bytes.enumerated().reduce(UInt64(0)) { mark, entry in
                        entry.element >= 0x80 ? mark | (UInt64(0x80) << (8 * UInt64(entry.offset))) : mark
                    })
                    if let first = bytes.firstIndex(where: range.contains) {
                        #expect(ByteWord.firstMarked(marked) == first, "byte \(byte) at \(position) in \(range)")
                    }
                }
            }
        }
    }

    @Test("a token is the same whatever the case it was written in: equal, the same bytes, the same stable hash (its connection)")
    func deviceTokenCase() throws {
        let lower = String(repeating: "0a1b2c3d", count: 8)
        let fromLower = try APNsDeviceToken(hex: lower)
        let fromUpper = try APNsDeviceToken(hex: lower.uppercased())
        let fromBytes = try APNsDeviceToken(bytes: Array(repeating: [0x0a, 0x1b, 0x2c, 0x3d], count: 8).flatMap { $0 })
        #expect(fromLower == fromUpper && fromLower == fromBytes)
        #expect(fromUpper.hex == lower && fromBytes.hex == lower)
        #expect(fromUpper.bytes == fromBytes.bytes && fromLower.bytes.prefix(4) == [0x0a, 0x1b, 0x2c, 0x3d])
        // FNV-1a over the 32 bytes, computed here independently: the same in every process and every form.
        var expected: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in fromBytes.bytes { expected = (expected ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        #expect(fromLower.stableHash == expected && fromUpper.stableHash == expected && fromBytes.stableHash == expected)
        // Every digit, in either case, read at its value.
        let everyDigit = String(repeating: "0123456789abcdef", count: 4)
        var everyDigitHash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in Array(repeating: [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef] as [UInt8], count: 4).joined() {
            everyDigitHash = (everyDigitHash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        #expect(try APNsDeviceToken(hex: everyDigit).stableHash == everyDigitHash)
        #expect(try APNsDeviceToken(hex: everyDigit.uppercased()).stableHash == everyDigitHash)
    }

    static let notificationCases: [NotificationCase] = [
        NotificationCase("valid alert", expected: nil),
        NotificationCase("empty topic", topic: "", expected: APNsValidationError(.topic, .empty)),
        NotificationCase("topic with space", topic: "com.example app", expected: APNsValidationError(.topic, .invalidCharacters)),
        NotificationCase("voip without suffix", pushType: .voip, expected: APNsValidationError(.topic, .missingSuffix(".voip"))),
        NotificationCase("voip ok", topic: "com.example.app.voip", pushType: .voip, expected: nil),
        NotificationCase("complication without suffix", pushType: .complication, expected: APNsValidationError(.topic, .missingSuffix(".complication"))),
        NotificationCase("complication ok", topic: "com.example.app.complication", pushType: .complication, expected: nil),
        NotificationCase("fileprovider without suffix", pushType: .fileprovider, expected: APNsValidationError(.topic, .missingSuffix(".pushkit.fileprovider"))),
        NotificationCase("fileprovider ok", topic: "com.example.app.pushkit.fileprovider", pushType: .fileprovider, expected: nil),
        NotificationCase("liveactivity without suffix", pushType: .liveactivity, expected: APNsValidationError(.topic, .missingSuffix(".push-type.liveactivity"))),
        NotificationCase("liveactivity ok", topic: "com.example.app.push-type.liveactivity", pushType: .liveactivity, expected: nil),
        NotificationCase("pushtotalk without suffix", pushType: .pushtotalk, expected: APNsValidationError(.topic, .missingSuffix(".voip-ptt"))),
        NotificationCase("pushtotalk ok", topic: "com.example.app.push-type.pushtotalk", pushType: .pushtotalk, expected: nil),
        NotificationCase("pushtotalk apple suffix", topic: "com.example.app.voip-ptt", pushType: .pushtotalk, expected: nil),
        NotificationCase("widgets without suffix", pushType: .widgets, expected: APNsValidationError(.topic, .missingSuffix(".push-type.widgets"))),
        NotificationCase("controls without suffix", pushType: .controls, expected: APNsValidationError(.topic, .missingSuffix(".push-type.controls"))),
        NotificationCase("controls ok", topic: "com.example.app.push-type.controls", pushType: .controls, expected: nil),
        NotificationCase("controls priority 1", topic: "com.example.app.push-type.controls", pushType: .controls, priority: .low, expected: nil),
        NotificationCase("suffix alone", topic: ".voip", pushType: .voip, expected: APNsValidationError(.topic, .missingSuffix(".voip"))),
        NotificationCase("background priority 10", pushType: .background, priority: .immediate, expected: APNsValidationError(.priority, .notAllowed("10 is not allowed for background pushes"))),
        NotificationCase("background priority 5", pushType: .background, priority: .conservePower, expected: nil),
        NotificationCase("mdm priority 1", pushType: .mdm, priority: .low, expected: nil),
        NotificationCase("negative expiration", expiration: -1, expected: APNsValidationError(.expiration, .notAllowed("negative"))),
        NotificationCase("expiration zero", expiration: 0, expected: nil),
        NotificationCase("empty collapse id", collapseID: "", expected: APNsValidationError(.collapseID, .empty)),
        NotificationCase("collapse id 64 bytes", collapseID: String(repeating: "c", count: 64), expected: nil),
        NotificationCase("collapse id 65 bytes", collapseID: String(repeating: "c", count: 65), expected: APNsValidationError(.collapseID, .tooLong(maximum: 64, actual: 65))),
        NotificationCase("collapse id with a line feed", collapseID: "a\nb", expected: APNsValidationError(.collapseID, .invalidCharacters)),
        NotificationCase("collapse id with a NUL", collapseID: "a\u{0}b", expected: APNsValidationError(.collapseID, .invalidCharacters)),
        NotificationCase("collapse id with DEL", collapseID: "a\u{7f}", expected: APNsValidationError(.collapseID, .invalidCharacters)),
        NotificationCase("collapse id with a leading space", collapseID: " a", expected: APNsValidationError(.collapseID, .invalidCharacters)),
        NotificationCase("collapse id with a trailing tab", collapseID: "a\t", expected: APNsValidationError(.collapseID, .invalidCharacters)),
        NotificationCase("collapse id with inner space and tab", collapseID: "game 1\tscore", expected: nil),
        NotificationCase("collapse id multibyte 66 bytes", collapseID: String(repeating: "é", count: 33), expected: APNsValidationError(.collapseID, .tooLong(maximum: 64, actual: 66))),
        NotificationCase("empty payload", payload: [], expected: APNsValidationError(.payload, .empty)),
        NotificationCase("payload not json", payload: Array("nope".utf8), expected: APNsValidationError(.payload, .notJSONObject)),
        NotificationCase("payload array", payload: Array("[1]".utf8), expected: APNsValidationError(.payload, .notJSONObject)),
        NotificationCase("payload without aps", payload: Array(#"{"a":1}"#.utf8), expected: APNsValidationError(.payload, .missingAps)),
        NotificationCase("aps not dictionary", payload: Array(#"{"aps":1}"#.utf8), expected: APNsValidationError(.payload, .apsNotDictionary)),
        NotificationCase("payload 4096", payload: payload(size: 4096), expected: nil),
        NotificationCase("payload 4097", payload: payload(size: 4097), expected: APNsValidationError(.payload, .tooLong(maximum: 4096, actual: 4097))),
        NotificationCase("voip payload 5120", topic: "a.voip", pushType: .voip, payload: payload(size: 5120), expected: nil),
        NotificationCase("voip payload 5121", topic: "a.voip", pushType: .voip, payload: payload(size: 5121), expected: APNsValidationError(.payload, .tooLong(maximum: 5120, actual: 5121))),
    ]

    static func payload(size: Int) -> [UInt8] {
        let prefix = #"{"aps":{},"x":""#
        let suffix = #""}"#
        return Array((prefix + String(repeating: "x", count: size - prefix.utf8.count - suffix.utf8.count) + suffix).utf8)
    }

    @Test("notification rule", arguments: notificationCases)
    func notification(_ testCase: NotificationCase) throws {
        let token = try APNsDeviceToken(hex: goodToken)
        do throws(APNsValidationError) {
            let notification = try APNsNotification(
                token: token, topic: testCase.topic, pushType: testCase.pushType, priority: testCase.priority,
                expiration: testCase.expiration, collapseID: testCase.collapseID, payload: testCase.payload)
            #expect(testCase.expected == nil, "accepted but expected \(String(describing: testCase.expected))")
            #expect(notification.payload == testCase.payload)
        } catch {
            #expect(error == testCase.expected)
        }
    }

    @Test("raw values: push type, priority and apns-id are named")
    func rawValues() {
        func failure(_ build: () throws -> APNsNotification) -> APNsField? {
            do {
                _ = try build()
                return nil
            } catch {
                return (error as? APNsValidationError)?.field
            }
        }
        let id = UUID().uuidString
        #expect(failure { try APNsNotification(tokenHex: goodToken, topic: "a", pushType: "alert", priority: 10, apnsID: id, payload: goodPayload) } == nil)
        #expect(failure { try APNsNotification(tokenHex: goodToken, topic: "a", pushType: "banner", priority: 10, apnsID: id, payload: goodPayload) } == .pushType)
        #expect(failure { try APNsNotification(tokenHex: goodToken, topic: "a", pushType: "alert", priority: 7, apnsID: id, payload: goodPayload) } == .priority)
        #expect(failure { try APNsNotification(tokenHex: goodToken, topic: "a", pushType: "alert", priority: 10, apnsID: "not-a-uuid", payload: goodPayload) } == .apnsID)
        #expect(failure { try APNsNotification(tokenHex: "xyz", topic: "a", pushType: "alert", priority: 10, apnsID: id, payload: goodPayload) } == .deviceToken)
        #expect(APNsPushType.allCases.count == 11)
    }

    @Test("reasons round-trip and classify")
    func reasons() {
        #expect(APNsReason.allCases.count == 38)
        for reason in APNsReason.allCases {
            #expect(APNsReason(rawValue: reason.rawValue) == reason)
        }
        #expect(APNsReason(rawValue: "Whatever") == .other("Whatever"))
        let unregistered = APNsResponse.parse(status: 410, apnsIDHeader: nil, retryAfterHeader: nil, body: Array(#"{"reason":"Unregistered","timestamp":1700000000000}"#.utf8))
        #expect(unregistered.reason == .unregistered)
        #expect(unregistered.timestamp == 1_700_000_000_000)
        #expect(unregistered.classification == .tokenDead)
        #expect(APNsResponse(status: 400, reason: .badDeviceToken).classification == .tokenDead)
        #expect(APNsResponse(status: 400, reason: .deviceTokenNotForTopic).classification == .tokenDead)
        #expect(APNsResponse(status: 400, reason: .badTopic).classification == .permanent)
        #expect(APNsResponse(status: 429, reason: .tooManyRequests).classification == .retryable)
        #expect(APNsResponse(status: 500, reason: .internalServerError).classification == .retryable)
        #expect(APNsResponse(status: 503, reason: .serviceUnavailable).classification == .retryable)
        #expect(APNsResponse(status: 200).classification == .delivered)
        // Broadcasts: a deleted channel is gone for good, and is not a dead device token.
        #expect(APNsReason.channelNotRegistered.httpStatus == 404)
        #expect(APNsResponse(status: 404, reason: .channelNotRegistered).classification == .permanent)
        #expect(APNsResponse(status: 400, reason: .badChannelId).classification == .permanent)
        #expect(APNsAttemptResult.failure(.connectionLost).classification == .retryable)
        #expect(APNsAttemptResult.failure(.deadlineExceeded).classification == .retryable)
        let retry = APNsResponse.parse(status: 429, apnsIDHeader: nil, retryAfterHeader: "3", body: Array(#"{"reason":"TooManyRequests"}"#.utf8))
        #expect(retry.retryAfterSeconds == 3)
    }

    @Test("apns-unique-id is kept when it is printable ASCII of at most 128 bytes, on any answer")
    func uniqueID() {
        let id = "a6b1c2d3-0000-4000-8000-00000000abcd"
        #expect(APNsResponse.parse(status: 200, apnsIDHeader: nil, retryAfterHeader: nil, uniqueIDHeader: id, body: []).uniqueID == id)
        #expect(APNsResponse.parse(status: 400, apnsIDHeader: nil, retryAfterHeader: nil, uniqueIDHeader: id,
                                   body: Array(#"{"reason":"BadTopic"}"#.utf8)).uniqueID == id)
        for odd in ["", "a b", "é", String(repeating: "a", count: 129), "a\u{7f}"] {
            #expect(APNsResponse.parse(status: 200, apnsIDHeader: nil, retryAfterHeader: nil, uniqueIDHeader: odd, body: []).uniqueID == nil)
        }
        #expect(APNsResponse.parse(status: 200, apnsIDHeader: nil, retryAfterHeader: nil, body: []).uniqueID == nil)
    }

    @Test("the id and the device path written straight into a header block read as their strings do")
    func headerBytesWithoutStrings() throws {
        let uuid = try #require(UUID(uuidString: "886313E1-3B8A-5372-9B90-0C9AEE199E5D"))
        var bytes = Array("x".utf8)
        APNsUUIDText.append(uuid, to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == "x" + APNsUUIDText.format(uuid))
        #expect(APNsUUIDText.format(uuid) == "886313e1-3b8a-5372-9b90-0c9aee199e5d")
        let token = try APNsDeviceToken(hex: String(repeating: "0a1B", count: 16))
        var path: [UInt8] = []
        token.appendHex(prefixedBy: "/3/device/", to: &path)
        #expect(String(decoding: path, as: UTF8.self) == token.hex(prefixedBy: "/3/device/"))
        #expect(String(decoding: path, as: UTF8.self) == "/3/device/" + String(repeating: "0a1b", count: 16))
    }
}
