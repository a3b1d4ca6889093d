@testable import APNsCore
import Foundation
import Testing

let goodToken = String(repeating: "ab", count: 32)
let goodPayload = Array(#"{"aps":{"alert":"hi"}}"#.utf8)

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

/// A notification is checked against Apple's rules when it is built: each rule, and the raw values named.
@Suite("Notification validation")
struct APNsNotificationTests {
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
