import APNsCore
import Testing
@testable import RelayCore

@Suite("Records written to Kafka: results, failed tokens, wrong environments")
struct RecordsTests {
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
}
