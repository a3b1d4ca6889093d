import APNsCore
import Foundation
import Testing
@testable import RelayCore

/// A device's notification rendered from its event: the payload template written once at decode, the badge injected
/// per device (replaced in place, appended, or a new `aps`), badge-only payloads, and the size checked again after.
@Suite("Rendering an event's notification: the payload template and the badge")
struct PushEventRenderingTests {
    /// The injection writes the payload straight from the event's members; this is the rule it follows, spelled out
    /// on the value: the last `aps` gets the badge if it is an object (first `badge` replaced in place, later ones
    /// dropped, else appended), otherwise a new `aps` object is appended.
    private static func injectedByValue(badge: Int64, into payload: JSONValue) -> [UInt8] {
        guard case .object(var members) = payload else { return JSON.serialize(payload) }
        let badgeMember = JSONMember("badge", .integer(badge))
        if let apsIndex = members.lastIndex(where: { $0.key == "aps" }), case .object(var aps) = members[apsIndex].value {
            if let existing = aps.firstIndex(where: { $0.key == "badge" }) {
                aps = Array(aps[..<existing]) + [badgeMember] + aps[(existing + 1)...].filter { $0.key != "badge" }
            } else {
                aps.append(badgeMember)
            }
            members[apsIndex].value = .object(aps)
        } else {
            members.append(JSONMember("aps", .object([badgeMember])))
        }
        return JSON.serialize(.object(members))
    }

    @Test func badgeOnlyEventSendsBadgeOnlyPayload() throws {
        let event = try PushEventDecoder().decode(Array(#"{"id":"e","user":"u","seq":3,"badge":{"set":7}}"#.utf8))
        #expect(event.isBadgeOnly)
        let rendered = try event.render(for: validToken, badge: 7, defaultTopic: "com.example.app")
        #expect(String(decoding: rendered.payload, as: UTF8.self) == #"{"aps":{"badge":7}}"#)
        #expect(rendered.pushType == .alert)
        #expect(rendered.priority == .conservePower)
        #expect(rendered.collapseID == "e")
        #expect(rendered.apnsID == DeliveryIdentity.apnsID(eventID: "e", token: validToken))
        #expect(event.ledgerUpdate(tag: "x") == BadgeUpdate(user: "u", seq: 3, operation: .set(7), tag: "x"))
    }

    @Test("a device's notification made from another device's is the one rendered for it alone")
    func siblingRenderingMatchesFullRendering() throws {
        let event = try PushEventDecoder().decode(Array(#"{"id":"e","user":"u","seq":3,"badge":{"set":7},"apns":{"collapse_id":"c","expiration":9,"payload":{"aps":{"alert":"hi"}}}}"#.utf8))
        let first = try event.render(for: validToken, badge: 7, defaultTopic: "com.example.app")
        let otherToken = String(repeating: "C4", count: 40)
        let alone = try event.render(for: otherToken, badge: 7, defaultTopic: "com.example.app")
        #expect(try event.render(for: otherToken, like: first) == alone)
        // The token is still checked: a bad one is rejected naming it.
        #expect(throws: EventRejection.self) { try event.render(for: "zz", like: first) }
    }

    @Test func injectionReplacesBadgeAndKeepsKeys() throws {
        let bytes = Array(#"{"x":[1,2.50,"\u00e9\n"],"aps":{"badge":1,"sound":"s","badge":2},"z":null}"#.utf8)
        let injected = try BadgeInjection.inject(badge: 9, intoPayloadBytes: bytes)
        #expect(String(decoding: injected, as: UTF8.self) == "{\"x\":[1,2.50,\"é\\n\"],\"aps\":{\"badge\":9,\"sound\":\"s\"},\"z\":null}")
    }

    @Test("badge injection, every shape of payload, against the rule applied to the value", arguments: [
        #"{}"#, #"{"aps":{}}"#, #"{"aps":{"badge":1}}"#, #"{"aps":{"alert":"a"}}"#, #"{"aps":{"alert":"a","badge":1,"badge":2,"sound":"s"}}"#,
        #"{"aps":{"sound":"s","badge":1}}"#, #"{"aps":1}"#, #"{"aps":[1]}"#, #"{"x":1}"#, #"{"aps":{"badge":1},"aps":{"alert":"b"}}"#,
        #"{"aps":{"badge":1},"aps":"not an object"}"#, #"{"a\"b":"\u0001","aps":{"k\\":"v"}}"#, #"[1,2]"#, #""text""#,
    ])
    func injectionMatchesTheRule(payload: String) throws {
        let value = try JSON.parse(Array(payload.utf8))
        for badge: Int64 in [0, 7, 123_456_789] {
            let injected = BadgeInjection.inject(badge: badge, into: value)
            #expect(String(decoding: injected, as: UTF8.self) == String(decoding: Self.injectedByValue(badge: badge, into: value), as: UTF8.self))
            if case .object = value { #expect(try JSON.parse(injected) != value) }
        }
    }

    @Test("a payload template, with or without a badge slot, renders what injection into the value renders", arguments: [
        #"{}"#, #"{"aps":{"badge":1}}"#, #"{"aps":{"alert":"a","badge":1,"badge":2,"sound":"s"}}"#, #"{"aps":1}"#,
        #"{"aps":{"badge":1},"aps":{"alert":"b"}}"#, #"{"a\"b":"\u0001","aps":{"k\\":"v"}}"#, #"[1,2]"#,
    ])
    func templateRendersLikeInjection(payload: String) throws {
        let value = try JSON.parse(Array(payload.utf8))
        for template in [PayloadTemplate(value, badgeSlot: true), PayloadTemplate(value, badgeSlot: false)] {
            #expect(template.bytes(badge: nil) == JSON.serialize(value))
            for badge: Int64 in [0, 7, -1, Int64.max] {
                #expect(String(decoding: template.bytes(badge: badge), as: UTF8.self)
                    == String(decoding: Self.injectedByValue(badge: badge, into: value), as: UTF8.self))
            }
        }
    }

    @Test("a payload as a producer writes it (spaces, escapes, escaped and duplicated keys) decodes to the template of its value", arguments: [
        #"{ "aps" : { "alert" : "a b" , "badge" : 1 } , "n" : [ 1 , -2.5e+3 , true , null , { } , [ ] ] }"#,
        #"{"\u0061ps":{"b\u0061dge":4,"alert":"\u00e9\/\"\t"},"x":"😀"}"#,
        #"{"aps":{"badge":1,"badge":2},"aps":{"sound":"s","badge":3,"badge":4}}"#,
        "{\"aps\":{\"alert\":\"\\ud83d\\ude00\"},\n\t\"k\\\\\":\"v\"}",
        #"{"aps":"first, not an object","aps":{"alert":"a"}}"#,
    ])
    func decodedPayloadMatchesItsValue(payload: String) throws {
        let value = try JSON.parse(Array(payload.utf8))
        for badge in ["", #","badge":{"increment":2}"#] {
            let event = try PushEventDecoder().decode(Array(#"{"id":"e","user":"u"\#(badge),"apns":{"payload":\#(payload)}}"#.utf8))
            #expect(event.payload == value)
            #expect(event.payloadTemplate.bytes(badge: nil) == JSON.serialize(value))
            for count: Int64 in [0, 7, Int64.max] {
                #expect(String(decoding: event.payloadTemplate.bytes(badge: count), as: UTF8.self)
                    == String(decoding: Self.injectedByValue(badge: count, into: value), as: UTF8.self))
                #expect(event.payloadTemplate.count(badge: count) == event.payloadTemplate.bytes(badge: count).count)
            }
        }
    }

    @Test func injectionRechecksTheSize() throws {
        // 4,086 bytes before injection; `,"badge":0` makes exactly 4,096.
        let payload = "{\"aps\":{\"alert\":\"\(String(repeating: "x", count: 4_066))\"}}"
        let fitting = try BadgeInjection.inject(badge: 0, intoPayloadBytes: Array(payload.utf8))
        #expect(fitting.count == 4_096)
        #expect(throws: EventRejection.self) { try BadgeInjection.inject(badge: 10, intoPayloadBytes: Array(payload.utf8)) }
    }

    @Test func injectionOverTheLimitNamesSizes() {
        let payload = "{\"aps\":{\"alert\":\"\(String(repeating: "x", count: 4_076))\"}}"
        do {
            _ = try BadgeInjection.inject(badge: 12_345, intoPayloadBytes: Array(payload.utf8))
            Issue.record("expected the size check to fail")
        } catch {
            #expect(error.reason == "apns.payload is 4,110 bytes, the limit for push_type alert is 4,096")
        }
    }

}
