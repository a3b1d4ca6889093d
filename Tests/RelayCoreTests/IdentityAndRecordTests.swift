import APNsCore
import Foundation
import Testing
@testable import RelayCore

@Suite struct IdentityTests {
    @Test func uuidV5MatchesKnownVector() {
        let python = DeliveryIdentity.uuidV5(namespace: DeliveryIdentity.dnsNamespace, name: Array("python.org".utf8))
        #expect(APNsUUIDText.format(python) == "886313e1-3b8a-5372-9b90-0c9aee199e5d")
        #expect(APNsUUIDText.format(DeliveryIdentity.namespace) == "f928e2b1-f388-52ff-a7c3-48c5c3fba8b6")
    }

    /// Fixed vectors: these must never change, or resends after an upgrade get new apns-ids.
    @Test func apnsIDIsStable() {
        let deviceA = String(repeating: "a1", count: 32)
        let deviceB = String(repeating: "b2", count: 32)
        #expect(APNsUUIDText.format(DeliveryIdentity.apnsID(eventID: "evt-7f3a", token: deviceA)) == "bcd323f0-f7b6-5baf-90e6-b2f86d21362f")
        #expect(APNsUUIDText.format(DeliveryIdentity.apnsID(eventID: "evt-7f3a", token: deviceB)) == "2152f0da-6f01-5056-885f-8a75390a5a81")
        #expect(APNsUUIDText.format(DeliveryIdentity.apnsID(eventID: "e", token: deviceA)) == "8d0f353a-ef9e-52cd-b242-5af423c487a8")
        #expect(APNsUUIDText.format(DeliveryIdentity.apnsID(eventID: "evt-7f3a", token: deviceA.uppercased())) == "bcd323f0-f7b6-5baf-90e6-b2f86d21362f")
    }

    /// The name is the event id, a NUL and the lower-cased token, whatever the token's length and case.
    @Test func apnsIDHashesTheLowerCasedToken() {
        let long = String(repeating: "aB3", count: 50)
        func named(_ eventID: String, _ token: String) -> UUID {
            DeliveryIdentity.uuidV5(namespace: DeliveryIdentity.namespace, name: Array(eventID.utf8) + [0] + Array(token.lowercased().utf8))
        }
        // The bytes around the capitals' range ("@" and "[" below and above "A"-"Z", "`" and "{" around "a"-"z"), at
        // every position of an eight-byte word and in a tail shorter than one.
        let edges = String(repeating: "@AZ[`az{", count: 8) + "@AZ[`az"
        for token in [long, long.lowercased(), "ÄB-ünicode", String(repeating: "f", count: 64), edges, String(edges.dropFirst(3)), "A1\u{7f}b" + edges] {
            #expect(DeliveryIdentity.apnsID(eventID: "evt-1", token: token) == named("evt-1", token), "\(token)")
        }
    }

    /// A device digest is written into progress markers and read by the partition's next owner, maybe another build:
    /// FNV-1a-64 of the lower-cased token, fixed forever.
    @Test func deviceDigestIsFNV1aOfTheLowerCasedToken() {
        let token = String(repeating: "0a1B2c3D", count: 8)
        var expected: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in token.lowercased().utf8 { expected = (expected ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        #expect(DeviceDigest(token: token).value == expected)
        #expect(DeviceDigest(token: token.lowercased()) == DeviceDigest(token: token.uppercased()))
        // A fixed vector (computed outside Swift): the text a marker carries.
        #expect(DeviceDigest(token: String(repeating: "AB", count: 32)).text == "544cc8e1f3802265")
    }

    @Test func collapseIDIsDerivedFromTheEventID() {
        #expect(DeliveryIdentity.collapseID(eventID: "evt-1") == "evt-1")
        #expect(DeliveryIdentity.collapseID(eventID: "evt-1", eventCollapseID: "thread-9") == "thread-9")
        let longID = String(repeating: "x", count: 100)
        let derived = DeliveryIdentity.collapseID(eventID: longID)
        #expect(derived == "sha1-50e483690ec481f4af7f6fb524b2b99eb1716565")
        #expect(derived.utf8.count <= 64)
        #expect(DeliveryIdentity.collapseID(eventID: String(repeating: "y", count: 64)).utf8.count == 64)
        // An event id that cannot be a header value is hashed like a long one.
        for unsendable in ["a\nb", " lead", "trail\t", "del\u{7f}"] {
            let hashed = DeliveryIdentity.collapseID(eventID: unsendable)
            #expect(hashed.hasPrefix("sha1-") && hashed.utf8.count == 45, "\(unsendable.debugDescription) gave \(hashed)")
        }
        #expect(DeliveryIdentity.collapseID(eventID: "inner space\tand tab") == "inner space\tand tab")
    }
}

@Suite struct RecordEncodingTests {
    @Test func resultRecordHasEveryFieldInOrder() {
        let record = ResultRecord(eventID: "evt-1", user: "u-42", token: "ab", seq: 17, badge: 3, status: .delivered,
                                  apnsID: "bcd323f0-f7b6-5baf-90e6-b2f86d21362f", httpStatus: 200, reason: nil,
                                  attempts: 1, latencyMs: 12, at: 1_795_000_000_000)
        #expect(String(decoding: record.encoded(), as: UTF8.self)
            == #"{"event_id":"evt-1","user":"u-42","token":"ab","seq":17,"badge":3,"status":"delivered","apns_id":"bcd323f0-f7b6-5baf-90e6-b2f86d21362f","http_status":200,"reason":null,"attempts":1,"latency_ms":12,"at":1795000000000}"#)
        let invalid = ResultRecord(eventID: "e\"1", user: nil, token: nil, seq: nil, badge: nil, status: .invalid, apnsID: nil,
                                   httpStatus: nil, reason: "seq must be an integer >= 1", attempts: 0, latencyMs: nil, at: 5)
        #expect(String(decoding: invalid.encoded(), as: UTF8.self)
            == #"{"event_id":"e\"1","user":null,"token":null,"seq":null,"badge":null,"status":"invalid","apns_id":null,"http_status":null,"reason":"seq must be an integer >= 1","attempts":0,"latency_ms":null,"at":5}"#)
    }

    @Test func integersAreWrittenInFullWithTheirSign() {
        let record = ResultRecord(eventID: "e", user: nil, token: nil, seq: Int64.max, badge: -7, status: .delivered, apnsID: nil,
                                  httpStatus: 200, reason: nil, attempts: 0, latencyMs: Int64.min, at: 0)
        #expect(String(decoding: record.encoded(), as: UTF8.self)
            == #"{"event_id":"e","user":null,"token":null,"seq":9223372036854775807,"badge":-7,"status":"delivered","apns_id":null,"http_status":200,"reason":null,"attempts":0,"latency_ms":-9223372036854775808,"at":0}"#)
    }

    @Test("the optional result keys come after the contract's, each only when set; the contract's keys are written as before")
    func resultRecordGrowsAtTheEnd() {
        var record = ResultRecord(eventID: "evt-1", user: "u-42", token: "ab", seq: 17, badge: 3, status: .delivered,
                                  apnsID: "bcd323f0-f7b6-5baf-90e6-b2f86d21362f", httpStatus: 200, reason: nil,
                                  attempts: 2, latencyMs: 12, at: 1_795_000_000_000, late: true)
        let contract = #"{"event_id":"evt-1","user":"u-42","token":"ab","seq":17,"badge":3,"status":"delivered","apns_id":"bcd323f0-f7b6-5baf-90e6-b2f86d21362f","http_status":200,"reason":null,"attempts":2,"latency_ms":12,"at":1795000000000"#
        #expect(String(decoding: record.encoded(), as: UTF8.self) == contract + #","late":true}"#)
        record.environment = .sandbox
        record.apnsUniqueID = "a6b1c2d3-0000-4000-8000-00000000abcd"
        #expect(String(decoding: record.encoded(), as: UTF8.self)
            == contract + #","late":true,"environment":"sandbox","apns_unique_id":"a6b1c2d3-0000-4000-8000-00000000abcd"}"#)
    }

    @Test("a wrong-environment record names the token, where it belongs, where it was sent and who named that")
    func wrongEnvironmentRecord() {
        let record = WrongEnvironmentRecord(token: "ab", user: "u-42", topic: "com.example.app", environment: .sandbox, wrongEnvironment: .production,
                                            source: .registration, eventID: "evt-1", at: 1_795_000_000_000)
        #expect(String(decoding: record.encoded(), as: UTF8.self)
            == #"{"token":"ab","user":"u-42","topic":"com.example.app","environment":"sandbox","wrong_environment":"production","source":"registration","event_id":"evt-1","at":1795000000000}"#)
    }

    @Test func statusNamesMatchTheContract() {
        #expect(DeliveryStatus.allCases.map(\.rawValue)
            == ["delivered", "rejected", "unregistered", "expired", "failed", "superseded", "duplicate", "invalid", "no_devices"])
    }

    @Test func failedTokenRecord() {
        let record = FailedTokenRecord(token: "ab", user: "u-42", topic: "com.example.app", environment: .production,
                                       reason: "Unregistered", since: 1_795_000_000_000, eventID: "evt-1")
        #expect(String(decoding: record.encoded(), as: UTF8.self)
            == #"{"token":"ab","user":"u-42","topic":"com.example.app","environment":"production","reason":"Unregistered","since":1795000000000,"event_id":"evt-1"}"#)
        let feedback = FailedTokenRecord(token: "ab", user: nil, topic: nil, environment: nil, reason: "Feedback", since: 1, eventID: nil)
        #expect(String(decoding: feedback.encoded(), as: UTF8.self)
            == #"{"token":"ab","user":null,"topic":null,"environment":null,"reason":"Feedback","since":1,"event_id":null}"#)
    }

    @Test func convenienceRecords() {
        let duplicate = ResultRecord.forEvent(id: "e", user: "u", seq: 3, badge: nil, status: .duplicate, reason: "seq 3 <= last applied 5", at: 9)
        #expect(String(decoding: duplicate.encoded(), as: UTF8.self)
            == #"{"event_id":"e","user":"u","token":null,"seq":3,"badge":null,"status":"duplicate","apns_id":null,"http_status":null,"reason":"seq 3 <= last applied 5","attempts":0,"latency_ms":null,"at":9}"#)
        let registration = DeviceRegistration(token: "ab", user: "u", topic: "t", environment: .sandbox, registeredAt: 1)
        let failed = FailedTokenRecord(registration: registration, reason: "BadDeviceToken", since: 2, eventID: "e")
        #expect(failed == FailedTokenRecord(token: "ab", user: "u", topic: "t", environment: .sandbox, reason: "BadDeviceToken", since: 2, eventID: "e"))
    }

    @Test("a record's strings are escaped as the JSON serializer escapes them, wherever the byte to escape falls, however long the string")
    func recordStringsAreEscapedAsTheSerializerEscapesThem() {
        let specials = ["\"", "\\", "\n", "\r", "\t", "\u{00}", "\u{01}", "\u{1f}", " ", "\u{7f}", "é", "😀", "a"]
        func expected(_ text: String, since: Int64) -> [UInt8] {
            JSON.serialize(.object([
                JSONMember("token", .string(text)), JSONMember("user", .null), JSONMember("topic", .string(text)),
                JSONMember("environment", .null), JSONMember("reason", .string(text)), JSONMember("since", .integer(since)),
                JSONMember("event_id", .null),
            ]))
        }
        // Up to 17 bytes around the special one: before, inside and after the first and second eight-byte words.
        for length in 0..<18 {
            for special in specials {
                for position in 0...length {
                    var text = String(repeating: "x", count: length)
                    text.insert(contentsOf: special, at: text.index(text.startIndex, offsetBy: position))
                    let record = FailedTokenRecord(token: text, user: nil, topic: text, environment: nil, reason: text, since: Int64.min, eventID: nil)
                    #expect(record.encoded() == expected(text, since: Int64.min), "\(text.debugDescription)")
                }
            }
        }
        // Longer than the writer's first room (512 bytes), every byte escaped as \u00XX: it grows.
        let long = String(repeating: "\u{01}\"ab", count: 300)
        let record = FailedTokenRecord(token: long, user: nil, topic: long, environment: nil, reason: long, since: 0, eventID: nil)
        #expect(record.encoded() == expected(long, since: 0))
    }

    @Test func badgeStateRecordRoundTrips() throws {
        let record = BadgeStateRecord(badge: 4, seq: 17, updatedAt: 1_795_000_000_000)
        #expect(String(decoding: record.encoded(), as: UTF8.self) == #"{"badge":4,"seq":17,"updated_at":1795000000000}"#)
        #expect(try BadgeStateRecord.decode(record.encoded()) == record)
        #expect(throws: EventRejection.self) { try BadgeStateRecord.decode(Array(#"{"badge":-1,"seq":1}"#.utf8)) }
        #expect(throws: EventRejection.self) { try BadgeStateRecord.decode(Array(#"{"badge":1,"seq":"1"}"#.utf8)) }
    }
}
