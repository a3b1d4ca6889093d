import APNsCore
import Foundation
import Testing
@testable import RelayCore

let validToken = String(repeating: "a1", count: 32)

struct MalformedEvent: Sendable, CustomTestStringConvertible {
    let name: String
    let bytes: [UInt8]
    let transport: APNsTransport
    let reason: String

    init(_ name: String, _ json: String, transport: APNsTransport = .http2, _ reason: String) {
        self.name = name
        self.bytes = Array(json.utf8)
        self.transport = transport
        self.reason = reason
    }

    init(_ name: String, bytes: [UInt8], _ reason: String) {
        self.name = name
        self.bytes = bytes
        self.transport = .http2
        self.reason = reason
    }

    var testDescription: String { name }
}

private func alertEvent(alertLength: Int, pushType: String = "alert", badge: String? = nil) -> String {
    let alert = String(repeating: "x", count: alertLength)
    let badgePart = badge.map { ",\"badge\":\($0)" } ?? ""
    return "{\"id\":\"e\",\"user\":\"u\"\(badgePart),\"apns\":{\"push_type\":\"\(pushType)\",\"payload\":{\"aps\":{\"alert\":\"\(alert)\"}}}}"
}

private let allowedPushTypes = "alert, background, voip, complication, fileprovider, mdm, location, liveactivity, pushtotalk, widgets, controls"

/// A Live Activity start to a push-to-start token, with `aps` (the members inside `"aps":{...}`).
private func liveActivityStart(_ aps: String) -> String {
    "{\"id\":\"e\",\"tokens\":[\"\(validToken)\"],\"apns\":{\"push_type\":\"liveactivity\",\"payload\":{\"aps\":{\(aps)}}}}"
}

private let completeStart = #""event":"start","timestamp":1,"attributes-type":"T","attributes":{},"content-state":{}"#

let malformedEvents: [MalformedEvent] = [
    MalformedEvent("not JSON", "hello", "event is not valid JSON: unexpected character 'h' at byte 0"),
    MalformedEvent("misspelled literal", "nul", "event is not valid JSON: unexpected end of input at byte 3"),
    MalformedEvent("empty input", "", "event is not valid JSON: unexpected end of input at byte 0"),
    MalformedEvent("truncated object", "{\"id\":\"e1\"", "event is not valid JSON: unexpected end of input at byte 10"),
    MalformedEvent("trailing data", "{\"id\":\"e\"} x", "event is not valid JSON: unexpected data after the JSON value at byte 11"),
    MalformedEvent("invalid UTF-8", bytes: Array("{\"id\":\"".utf8) + [0xFF] + Array("\"}".utf8),
                   "event is not valid JSON: string is not valid UTF-8 at byte 9"),
    MalformedEvent("nesting too deep", String(repeating: "[", count: 100), "event is not valid JSON: nesting deeper than 64 levels at byte 64"),
    MalformedEvent("array at top", "[1,2]", "event must be a JSON object, got an array"),
    MalformedEvent("string at top", "\"hello\"", "event must be a JSON object, got a string"),
    MalformedEvent("id missing", "{}", "id is required"),
    MalformedEvent("id null", "{\"id\":null,\"user\":\"u\",\"badge\":{\"set\":1}}", "id is required"),
    MalformedEvent("id number", "{\"id\":5,\"user\":\"u\",\"badge\":{\"set\":1}}", "id must be a string, got a number"),
    MalformedEvent("id empty", "{\"id\":\"\",\"user\":\"u\",\"badge\":{\"set\":1}}", "id must be 1 to 128 characters, got 0"),
    MalformedEvent("id too long", "{\"id\":\"\(String(repeating: "i", count: 129))\",\"user\":\"u\",\"badge\":{\"set\":1}}",
                   "id must be 1 to 128 characters, got 129"),
    MalformedEvent("id too long in characters of two bytes", "{\"id\":\"\(String(repeating: "é", count: 129))\",\"user\":\"u\",\"badge\":{\"set\":1}}",
                   "id must be 1 to 128 characters, got 129"),
    MalformedEvent("user number", "{\"id\":\"e\",\"user\":7,\"badge\":{\"set\":1}}", "user must be a string, got a number"),
    MalformedEvent("user empty", "{\"id\":\"e\",\"user\":\"\",\"badge\":{\"set\":1}}", "user must not be empty"),
    MalformedEvent("badge without user", "{\"id\":\"e\",\"tokens\":[\"\(validToken)\"],\"badge\":{\"set\":1}}",
                   "user is required when badge is present"),
    MalformedEvent("no user, no tokens", "{\"id\":\"e\",\"apns\":{\"payload\":{\"aps\":{}}}}", "user is required when tokens is absent"),
    MalformedEvent("seq zero", "{\"id\":\"e\",\"user\":\"u\",\"seq\":0,\"badge\":{\"set\":1}}", "seq must be an integer >= 1"),
    MalformedEvent("seq negative", "{\"id\":\"e\",\"user\":\"u\",\"seq\":-3,\"badge\":{\"set\":1}}", "seq must be an integer >= 1"),
    MalformedEvent("seq string", "{\"id\":\"e\",\"user\":\"u\",\"seq\":\"5\",\"badge\":{\"set\":1}}", "seq must be an integer >= 1"),
    MalformedEvent("seq fraction", "{\"id\":\"e\",\"user\":\"u\",\"seq\":1.5,\"badge\":{\"set\":1}}", "seq must be an integer >= 1"),
    MalformedEvent("seq boolean", "{\"id\":\"e\",\"user\":\"u\",\"seq\":true,\"badge\":{\"set\":1}}", "seq must be an integer >= 1"),
    MalformedEvent("seq exponent that leaves a fraction", "{\"id\":\"e\",\"user\":\"u\",\"seq\":15e-1,\"badge\":{\"set\":1}}", "seq must be an integer >= 1"),
    MalformedEvent("seq past Int64 with a fraction", "{\"id\":\"e\",\"user\":\"u\",\"seq\":9223372036854775808.0,\"badge\":{\"set\":1}}", "seq must be an integer >= 1"),
    MalformedEvent("seq overflow", "{\"id\":\"e\",\"user\":\"u\",\"seq\":99999999999999999999,\"badge\":{\"set\":1}}", "seq must be an integer >= 1"),
    MalformedEvent("tokens string", "{\"id\":\"e\",\"user\":\"u\",\"tokens\":\"abc\",\"badge\":{\"set\":1}}",
                   "tokens must be an array of strings, got a string"),
    MalformedEvent("tokens empty", "{\"id\":\"e\",\"user\":\"u\",\"tokens\":[],\"badge\":{\"set\":1}}",
                   "tokens must not be empty (omit it to use the user's devices)"),
    MalformedEvent("token number", "{\"id\":\"e\",\"user\":\"u\",\"tokens\":[5],\"badge\":{\"set\":1}}", "tokens[0] must be a string, got a number"),
    MalformedEvent("token too short", "{\"id\":\"e\",\"user\":\"u\",\"tokens\":[\"\(validToken)\",\"ab\"],\"badge\":{\"set\":1}}",
                   "tokens[1] must be 64 to 200 hex characters, got 2"),
    MalformedEvent("token too long", "{\"id\":\"e\",\"user\":\"u\",\"tokens\":[\"\(String(repeating: "ab", count: 101))\"],\"badge\":{\"set\":1}}",
                   "tokens[0] must be 64 to 200 hex characters, got 202"),
    MalformedEvent("token odd length", "{\"id\":\"e\",\"user\":\"u\",\"tokens\":[\"\(validToken)f\"],\"badge\":{\"set\":1}}",
                   "tokens[0] must have an even number of hex characters, got 65"),
    MalformedEvent("token not hex", "{\"id\":\"e\",\"user\":\"u\",\"tokens\":[\"\(String(repeating: "g1", count: 32))\"],\"badge\":{\"set\":1}}",
                   "tokens[0] must contain only hex characters (0-9, a-f)"),
    MalformedEvent("badge number", "{\"id\":\"e\",\"user\":\"u\",\"badge\":3}", "badge must be an object, got a number"),
    MalformedEvent("badge empty", "{\"id\":\"e\",\"user\":\"u\",\"badge\":{}}", "badge must have exactly one of set, increment, decrement"),
    MalformedEvent("badge two operations", "{\"id\":\"e\",\"user\":\"u\",\"badge\":{\"set\":1,\"increment\":2}}",
                   "badge must have exactly one of set, increment, decrement"),
    MalformedEvent("badge unknown operation", "{\"id\":\"e\",\"user\":\"u\",\"badge\":{\"add\":1}}",
                   "badge must have exactly one of set, increment, decrement"),
    MalformedEvent("increment negative", "{\"id\":\"e\",\"user\":\"u\",\"badge\":{\"increment\":-1}}", "badge.increment must be an integer >= 0"),
    MalformedEvent("set string", "{\"id\":\"e\",\"user\":\"u\",\"badge\":{\"set\":\"3\"}}", "badge.set must be an integer >= 0"),
    MalformedEvent("decrement fraction", "{\"id\":\"e\",\"user\":\"u\",\"badge\":{\"decrement\":1.5}}", "badge.decrement must be an integer >= 0"),
    MalformedEvent("set null", "{\"id\":\"e\",\"user\":\"u\",\"badge\":{\"set\":null}}", "badge.set must be an integer >= 0"),
    MalformedEvent("neither badge nor apns", "{\"id\":\"e\",\"user\":\"u\"}", "event must have badge, apns or both"),
    MalformedEvent("apns string", "{\"id\":\"e\",\"user\":\"u\",\"apns\":\"x\"}", "apns must be an object, got a string"),
    MalformedEvent("topic number", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"topic\":5,\"payload\":{\"aps\":{}}}}",
                   "apns.topic must be a string, got a number"),
    MalformedEvent("topic empty", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"topic\":\"\",\"payload\":{\"aps\":{}}}}", "apns.topic must not be empty"),
    MalformedEvent("push_type unknown", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"push_type\":\"banner\",\"payload\":{\"aps\":{}}}}",
                   "apns.push_type must be one of \(allowedPushTypes), got \"banner\""),
    MalformedEvent("push_type upper case", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"push_type\":\"Alert\",\"payload\":{\"aps\":{}}}}",
                   "apns.push_type must be one of \(allowedPushTypes), got \"Alert\""),
    MalformedEvent("push_type number", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"push_type\":1,\"payload\":{\"aps\":{}}}}",
                   "apns.push_type must be a string, got a number"),
    MalformedEvent("Live Activity start without attributes-type", liveActivityStart(#""event":"start","attributes":{},"content-state":{}"#),
                   "apns.payload.aps.attributes-type is required to start a Live Activity (the name of its ActivityAttributes type)"),
    MalformedEvent("Live Activity start with an empty attributes-type", liveActivityStart(#""event":"start","attributes-type":"","attributes":{},"content-state":{}"#),
                   "apns.payload.aps.attributes-type is required to start a Live Activity (the name of its ActivityAttributes type)"),
    MalformedEvent("Live Activity start without attributes", liveActivityStart(#""event":"start","attributes-type":"T","content-state":{}"#),
                   "apns.payload.aps.attributes is required to start a Live Activity (an object: its ActivityAttributes)"),
    MalformedEvent("Live Activity start with attributes not an object", liveActivityStart(#""event":"start","attributes-type":"T","attributes":[],"content-state":{}"#),
                   "apns.payload.aps.attributes is required to start a Live Activity (an object: its ActivityAttributes)"),
    MalformedEvent("Live Activity start without content-state", liveActivityStart(#""event":"start","attributes-type":"T","attributes":{}"#),
                   "apns.payload.aps.content-state is required to start a Live Activity (an object: its initial ContentState)"),
    MalformedEvent("Live Activity start asking for a token with 2", liveActivityStart(completeStart + #","input-push-token":2"#),
                   "apns.payload.aps.input-push-token must be 1 (asks for the started activity's push token)"),
    MalformedEvent("Live Activity start on a channel id that is not one", liveActivityStart(completeStart + #","input-push-channel":"not base64!""#),
                   "apns.payload.aps.input-push-channel must be a channel id as APNs issues it (base64)"),
    MalformedEvent("Live Activity start as a broadcast",
                   #"{"id":"e","apns":{"channel_id":"dGVzdC1jaGFubmVsLTE=","push_type":"liveactivity","payload":{"aps":{"#+completeStart+"}}}}",
                   "apns.payload.aps.event start needs a push-to-start token in tokens: a broadcast updates or ends the Live Activities on its channel"),
    MalformedEvent("priority 7", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"priority\":7,\"payload\":{\"aps\":{}}}}", "apns.priority must be 10, 5 or 1"),
    MalformedEvent("priority string", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"priority\":\"10\",\"payload\":{\"aps\":{}}}}",
                   "apns.priority must be 10, 5 or 1"),
    MalformedEvent("priority 10 for background",
                   "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"push_type\":\"background\",\"priority\":10,\"payload\":{\"aps\":{}}}}",
                   "apns.priority 10 is not allowed for push_type background (use 5 or 1)"),
    MalformedEvent("expiration negative", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"expiration\":-1,\"payload\":{\"aps\":{}}}}",
                   "apns.expiration must be an integer >= 0 (epoch seconds)"),
    MalformedEvent("collapse_id too long",
                   "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"collapse_id\":\"\(String(repeating: "c", count: 65))\",\"payload\":{\"aps\":{}}}}",
                   "apns.collapse_id is 65 bytes, the limit is 64"),
    MalformedEvent("collapse_id multibyte too long",
                   "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"collapse_id\":\"\(String(repeating: "é", count: 33))\",\"payload\":{\"aps\":{}}}}",
                   "apns.collapse_id is 66 bytes, the limit is 64"),
    MalformedEvent("collapse_id with a line feed",
                   "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"collapse_id\":\"a\\nb\",\"payload\":{\"aps\":{}}}}",
                   "apns.collapse_id must not contain control characters or start or end with a space or tab"),
    MalformedEvent("collapse_id with a trailing space",
                   "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"collapse_id\":\"ab \",\"payload\":{\"aps\":{}}}}",
                   "apns.collapse_id must not contain control characters or start or end with a space or tab"),
    MalformedEvent("collapse_id number", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"collapse_id\":3,\"payload\":{\"aps\":{}}}}",
                   "apns.collapse_id must be a string, got a number"),
    MalformedEvent("collapse_id empty", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"collapse_id\":\"\",\"payload\":{\"aps\":{}}}}",
                   "apns.collapse_id must not be empty"),
    MalformedEvent("environment unknown",
                   "{\"id\":\"e\",\"tokens\":[\"\(validToken)\"],\"apns\":{\"environment\":\"development\",\"payload\":{\"aps\":{}}}}",
                   "apns.environment must be \"production\" or \"sandbox\""),
    MalformedEvent("environment upper case", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"environment\":\"Sandbox\",\"payload\":{\"aps\":{}}}}",
                   "apns.environment must be \"production\" or \"sandbox\""),
    MalformedEvent("environment number", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"environment\":1,\"payload\":{\"aps\":{}}}}",
                   "apns.environment must be \"production\" or \"sandbox\""),
    MalformedEvent("payload missing", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"topic\":\"t\"}}", "apns.payload is required when apns is present"),
    MalformedEvent("payload array", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"payload\":[]}}", "apns.payload must be an object, got an array"),
    MalformedEvent("payload string", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"payload\":\"{}\"}}", "apns.payload must be an object, got a string"),
    MalformedEvent("aps missing", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"payload\":{\"data\":1}}}", "apns.payload.aps is required"),
    MalformedEvent("aps string", "{\"id\":\"e\",\"user\":\"u\",\"apns\":{\"payload\":{\"aps\":\"x\"}}}", "apns.payload.aps must be an object, got a string"),
    MalformedEvent("alert payload too big after badge", alertEvent(alertLength: 5_180, badge: "{\"set\":3}"),
                   "apns.payload is 5,210 bytes, the limit for push_type alert is 4,096"),
    MalformedEvent("fits only without the badge", alertEvent(alertLength: 4_076, badge: "{\"increment\":1}"),
                   "apns.payload is 4,106 bytes, the limit for push_type alert is 4,096"),
    MalformedEvent("voip payload too big", alertEvent(alertLength: 5_101, pushType: "voip"),
                   "apns.payload is 5,121 bytes, the limit for push_type voip is 5,120"),
    MalformedEvent("binary format 0 limit", alertEvent(alertLength: 280), transport: .binary(.simple),
                   "apns.payload is 300 bytes, the limit for the binary transport (format 0) is 256"),
    MalformedEvent("binary format 1 limit", alertEvent(alertLength: 237), transport: .binary(.enhanced),
                   "apns.payload is 257 bytes, the limit for the binary transport (format 1) is 256"),
    MalformedEvent("binary format 2 limit", alertEvent(alertLength: 2_029), transport: .binary(.framed),
                   "apns.payload is 2,049 bytes, the limit for the binary transport (format 2) is 2,048"),
    // Broadcasts (apns.channel_id): no devices, no user, no badge; liveactivity only.
    MalformedEvent("broadcast with tokens", broadcastEvent(extra: "\"tokens\":[\"\(validToken)\"],"),
                   "tokens is not allowed with apns.channel_id (an event with apns.channel_id is a broadcast to the channel's subscribers)"),
    MalformedEvent("broadcast with user", broadcastEvent(extra: #""user":"u-1","#),
                   "user is not allowed with apns.channel_id (an event with apns.channel_id is a broadcast to the channel's subscribers)"),
    MalformedEvent("broadcast with user and badge", broadcastEvent(extra: #""user":"u-1","badge":{"set":1},"#),
                   "user is not allowed with apns.channel_id (an event with apns.channel_id is a broadcast to the channel's subscribers)"),
    MalformedEvent("broadcast with badge", broadcastEvent(extra: #""badge":{"set":1},"#),
                   "badge is not allowed with apns.channel_id (an event with apns.channel_id is a broadcast to the channel's subscribers)"),
    MalformedEvent("broadcast of an alert", broadcastEvent(pushType: "alert"),
                   "apns.push_type must be liveactivity with apns.channel_id, got \"alert\""),
    MalformedEvent("broadcast without push type", broadcastEvent(pushType: nil),
                   "apns.push_type must be liveactivity with apns.channel_id, got \"alert\""),
    MalformedEvent("broadcast with collapse id", broadcastEvent(apnsExtra: #""collapse_id":"c","#),
                   "apns.collapse_id is not allowed with apns.channel_id (broadcasts have no collapse id)"),
    MalformedEvent("channel id not a string", broadcastEvent(channelID: "7"), "apns.channel_id must be a string, got a number"),
    MalformedEvent("channel id not base64", broadcastEvent(channelID: #""not base64!""#),
                   "apns.channel_id must be a channel id as APNs issues it (base64): apns-channel-id does not allow text that is not base64"),
    MalformedEvent("channel id empty", broadcastEvent(channelID: #""""#),
                   "apns.channel_id must be a channel id as APNs issues it (base64): apns-channel-id must not be empty"),
    MalformedEvent("broadcast on the binary transport", broadcastEvent(), transport: .binary(.framed),
                   "apns.channel_id needs apns.transport http2 (the binary interface has no broadcasts)"),
    MalformedEvent("live_activity not an object", liveActivityEvent(target: #""match-7""#),
                   #"live_activity must be {"push_to_start":"<attributes type>"} or {"activity_id":"<id>"}, got a string"#),
    MalformedEvent("live_activity with both targets", liveActivityEvent(target: #"{"push_to_start":"T","activity_id":"a"}"#),
                   #"live_activity must be {"push_to_start":"<attributes type>"} or {"activity_id":"<id>"}"#),
    MalformedEvent("live_activity with an empty id", liveActivityEvent(target: #"{"activity_id":""}"#),
                   "live_activity.activity_id must be a non-empty string of at most 256 bytes"),
    MalformedEvent("live_activity beside tokens", liveActivityEvent(target: #"{"activity_id":"a"}"#, extra: #""tokens":["\#(String(repeating: "ab", count: 32))"],"#),
                   "tokens is not allowed with live_activity (its registered tokens are the targets)"),
    MalformedEvent("live_activity with another push type", liveActivityEvent(target: #"{"activity_id":"a"}"#, pushType: "alert"),
                   "apns.push_type must be liveactivity with live_activity"),
    MalformedEvent("an activity's tokens with a badge and no user", liveActivityEvent(target: #"{"activity_id":"a"}"#, user: false, extra: #""badge":{"set":1},"#),
                   "user is required when badge is present"),
    MalformedEvent("live_activity with an unknown key", liveActivityEvent(target: #"{"activity_id":"a","id":"b"}"#),
                   #"live_activity must be {"push_to_start":"<attributes type>"} or {"activity_id":"<id>"}: unknown key"#),
    MalformedEvent("push-to-start without a user", liveActivityEvent(target: #"{"push_to_start":"MatchAttributes"}"#, user: false, event: "start"),
                   "user is required with live_activity.push_to_start (whose tokens they are)"),
    MalformedEvent("push-to-start that is no start", liveActivityEvent(target: #"{"push_to_start":"MatchAttributes"}"#),
                   "apns.payload.aps.event must be start with live_activity.push_to_start"),
    MalformedEvent("an activity's tokens asked to start", liveActivityEvent(target: #"{"activity_id":"a"}"#, event: "start"),
                   "apns.payload.aps.event start needs live_activity.push_to_start: an activity's tokens update or end it"),
]

/// An event addressing registered Live Activity tokens; `target` is the raw `live_activity` value, `extra` goes before
/// `apns`, `event` is `aps.event` (a start carries what a start needs).
private func liveActivityEvent(target: String, user: Bool = true, pushType: String = "liveactivity", event: String = "update", extra: String = "") -> String {
    let start = event == "start" ? #","attributes-type":"T","attributes":{},"content-state":{}"# : #","content-state":{}"#
    return #"{"id":"la-1",\#(user ? #""user":"u-1","# : "")"live_activity":\#(target),\#(extra)"apns":{"push_type":"\#(pushType)","payload":{"aps":{"event":"\#(event)"\#(start)}}}}"#
}

/// A broadcast event; `channelID` is raw JSON, `extra` goes before `apns`, `apnsExtra` inside it.
private func broadcastEvent(channelID: String = #""dGVzdC1jaGFubmVsLTE=""#, pushType: String? = "liveactivity", extra: String = "", apnsExtra: String = "") -> String {
    let type = pushType.map { "\"push_type\":\"\($0)\"," } ?? ""
    return #"{"id":"b-1",\#(extra)"apns":{"channel_id":\#(channelID),\#(type)\#(apnsExtra)"topic":"com.example.app","payload":{"aps":{"event":"update","content-state":{}}}}}"#
}

@Suite struct PushEventDecoderTests {
    @Test(arguments: malformedEvents)
    func malformedEventYieldsItsReason(_ input: MalformedEvent) {
        let decoder = PushEventDecoder(transport: input.transport)
        do {
            let event = try decoder.decode(input.bytes)
            Issue.record("decoded \(event) but expected: \(input.reason)")
        } catch {
            #expect(error.reason == input.reason)
        }
    }

    @Test func tableHasFortyOrMoreCases() {
        #expect(malformedEvents.count >= 40)
    }

    @Test func contractExampleDecodes() throws {
        let json = """
        {"id":"evt-7f3a","user":"u-42","seq":17,"tokens":["\(validToken.uppercased())"],"badge":{"increment":1},
         "apns":{"topic":"com.example.app","push_type":"alert","priority":10,"expiration":1795000000,"collapse_id":"thread-9",
         "payload":{"aps":{"alert":{"title":"Hi","body":"You have mail"},"sound":"default"},"thread":9}},
         "future_field":{"anything":[1,2,3]}}
        """
        let event = try PushEventDecoder().decode(Array(json.utf8))
        #expect(event.id == "evt-7f3a")
        #expect(event.user == "u-42")
        #expect(event.seq == 17)
        #expect(event.tokens == [validToken])
        #expect(event.badge == .increment(1))
        #expect(event.apns?.topic == "com.example.app")
        #expect(event.apns?.priority == .immediate)
        #expect(event.apns?.expiration == 1_795_000_000)
        #expect(event.apns?.collapseID == "thread-9")
        #expect(event.isBadgeOnly == false)
        let payload = try event.renderPayload(badge: 4)
        #expect(String(decoding: payload, as: UTF8.self)
            == #"{"aps":{"alert":{"title":"Hi","body":"You have mail"},"sound":"default","badge":4},"thread":9}"#)
        let rendered = try event.render(for: validToken, badge: 4, defaultTopic: nil)
        #expect(rendered.collapseID == "thread-9")
        #expect(rendered.topic == "com.example.app")
    }

    @Test("an id is measured in characters, not bytes: 128 characters of two bytes each are an id")
    func idLengthCountsCharacters() throws {
        let id = String(repeating: "é", count: 128)
        let event = try PushEventDecoder().decode(Array(#"{"id":"\#(id)","user":"u","badge":{"set":1}}"#.utf8))
        #expect(event.id == id)
    }

    @Test func nullOptionalFieldsCountAsAbsent() throws {
        let json = #"{"id":"e","user":"u","seq":null,"tokens":null,"apns":null,"badge":{"set":2}}"#
        let event = try PushEventDecoder().decode(Array(json.utf8))
        #expect(event.seq == nil)
        #expect(event.tokens == nil)
        #expect(event.targets == .registeredDevices(user: "u"))
    }

    @Test func defaultsForPushTypeAndPriority() throws {
        let alert = try PushEventDecoder().decode(Array(#"{"id":"e","user":"u","apns":{"payload":{"aps":{}}}}"#.utf8))
        #expect(alert.pushType == .alert)
        #expect(alert.priority == .immediate)
        let background = try PushEventDecoder().decode(
            Array(#"{"id":"e","user":"u","apns":{"push_type":"background","payload":{"aps":{"content-available":1}}}}"#.utf8))
        #expect(background.priority == .conservePower)
    }

    @Test func environmentIsOptional() throws {
        let decoder = PushEventDecoder()
        let sandbox = try decoder.decode(Array("{\"id\":\"e\",\"tokens\":[\"\(validToken)\"],\"apns\":{\"environment\":\"sandbox\",\"payload\":{\"aps\":{}}}}".utf8))
        #expect(sandbox.apns?.environment == .sandbox)
        let unset = try decoder.decode(Array(#"{"id":"e","user":"u","apns":{"environment":null,"payload":{"aps":{}}}}"#.utf8))
        #expect(unset.apns != nil && unset.apns?.environment == nil)
    }

    @Test func broadcastDecodesAndRendersForTheChannel() throws {
        let event = try PushEventDecoder().decode(Array(broadcastEvent().utf8))
        let channel = try APNsChannelID("dGVzdC1jaGFubmVsLTE=")
        #expect(event.targets == .channel(channel))
        #expect(event.user == nil && event.tokens == nil && event.badge == nil)
        #expect(event.ledgerUpdate(tag: 0) == nil)
        let notification = try event.renderBroadcast(to: channel, defaultTopic: "com.example.default")
        #expect(notification.recipient == .channel(channel))
        #expect(notification.token == nil)
        #expect(notification.topic == "com.example.app")
        #expect(notification.pushType == .liveactivity)
        #expect(notification.collapseID == nil)
        #expect(notification.apnsID == DeliveryIdentity.apnsID(eventID: "b-1", channelID: channel.value))
        #expect(String(decoding: notification.payload, as: UTF8.self) == #"{"aps":{"event":"update","content-state":{}}}"#)
        // The bundle id: the event's topic (a Live Activity topic is sent as its bundle id), else the configuration's.
        let suffixed = try PushEventDecoder().decode(Array(broadcastEvent().replacingOccurrences(of: "com.example.app", with: "com.example.app.push-type.liveactivity").utf8))
        #expect(try suffixed.renderBroadcast(to: channel, defaultTopic: nil).topic == "com.example.app")
        let noTopic = try PushEventDecoder().decode(Array(broadcastEvent().replacingOccurrences(of: #""topic":"com.example.app","#, with: "").utf8))
        #expect(try noTopic.renderBroadcast(to: channel, defaultTopic: "com.example.default").topic == "com.example.default")
        #expect(throws: EventRejection.self) { try noTopic.renderBroadcast(to: channel, defaultTopic: nil) }
    }

    @Test("a Live Activity start with everything the device needs decodes, with iOS 18's input-push-token or input-push-channel; updates and ends are not checked")
    func liveActivityStartsDecode() throws {
        for extra in ["", #","input-push-token":1"#, #","input-push-channel":"dGVzdC1jaGFubmVsLTE=""#] {
            let event = try PushEventDecoder().decode(Array(liveActivityStart(completeStart + extra).utf8))
            #expect(event.pushType == .liveactivity && event.payload["aps"]?["event"] == .string("start"))
        }
        for aps in [#""event":"update","timestamp":1,"content-state":{}"#, #""event":"end","timestamp":1"#, #""event":"update""#] {
            #expect(throws: Never.self) { try PushEventDecoder().decode(Array(liveActivityStart(aps).utf8)) }
        }
        // Only a liveactivity push is a Live Activity: the same keys in an alert are the app's own.
        #expect(throws: Never.self) { try PushEventDecoder().decode(Array(alertEvent(alertLength: 1).replacingOccurrences(of: "\"alert\":\"x\"", with: "\"event\":\"start\"").utf8)) }
    }

    @Test func eventWithTokensNeedsNoUser() throws {
        let event = try PushEventDecoder().decode(Array("{\"id\":\"e\",\"tokens\":[\"\(validToken)\"],\"apns\":{\"payload\":{\"aps\":{}}}}".utf8))
        #expect(event.user == nil)
        #expect(event.targets == .tokens([validToken]))
        #expect(event.ledgerUpdate(tag: 0) == nil)
    }

    @Test func maximumSizesAreAccepted() throws {
        _ = try PushEventDecoder().decode(Array(alertEvent(alertLength: 4_066, badge: "{\"set\":3}").utf8))
        _ = try PushEventDecoder().decode(Array(alertEvent(alertLength: 5_100, pushType: "voip").utf8))
        _ = try PushEventDecoder(transport: .binary(.simple)).decode(Array(alertEvent(alertLength: 236).utf8))
        _ = try PushEventDecoder(transport: .binary(.framed)).decode(Array(alertEvent(alertLength: 2_028).utf8))
    }

    @Test("an integer is a whole number however it is written (JSON Schema's integer), read in place and from a tree alike", arguments: [
        ("0", 0), ("-0", 0), ("7", 7), ("-7", -7), ("12", 12), ("9223372036854775807", Int64.max), ("9223372036854775808", nil),
        ("-9223372036854775808", Int64.min), ("-9223372036854775809", nil), ("99999999999999999999", nil), ("1.0", 1), ("1e2", 100),
        ("-1E-2", nil), ("0.5", nil), ("2.50e1", 25), ("1500e-3", nil), ("1000e-3", 1), ("0.0e-400", 0), ("1e400", nil), ("1e-400", nil),
        ("9.223372036854775807e18", Int64.max), ("9.223372036854775808e18", nil), ("-9.223372036854775808E+18", Int64.min),
        ("100000000000000000000e-2", 1_000_000_000_000_000_000), ("12.000000000000000000000", 12),
    ] as [(String, Int64?)])
    func integerInPlace(literal: String, expected: Int64?) throws {
        let read = JSON.read(Array(literal.utf8)) { checked in (try? checked.get()).map { $0.integer($0.root) } }
        #expect(read == .some(expected))
        #expect(try JSON.parse(Array(literal.utf8)).integerValue == expected)
    }

    @Test func badgeOperationsFloorAtZero() {
        #expect(BadgeOperation.decrement(5).applied(to: 3) == 0)
        #expect(BadgeOperation.increment(2).applied(to: 3) == 5)
        #expect(BadgeOperation.set(0).applied(to: 3) == 0)
        #expect(BadgeOperation.increment(1).applied(to: Int64.max) == Int64.max)
    }

    @Test("strings: plain ASCII taken as is; an escape, a non-ASCII byte or a control character after an ASCII start still handled by the full rules")
    func jsonStringsAcrossBothPaths() throws {
        #expect(try JSON.parse(Array(#"["", "plain-ascii 123", "ab\nc", "abé", "ab\u00e9"]"#.utf8))
            == .array([.string(""), .string("plain-ascii 123"), .string("ab\nc"), .string("abé"), .string("abé")]))
        #expect(throws: JSONParseError(message: "control character in string", offset: 3)) {
            try JSON.parse(Array("\"ab".utf8) + [0x01] + Array("\"".utf8))
        }
        #expect(throws: JSONParseError(message: "unterminated string", offset: 4)) { try JSON.parse(Array("\"abc".utf8)) }
        #expect(throws: JSONParseError(message: "string is not valid UTF-8", offset: 5)) {
            try JSON.parse(Array("\"ab".utf8) + [0xC3] + Array("\"".utf8))
        }
    }

    @Test("a string's end is found wherever a quote, an escape, a control or a non-ASCII byte falls, in short and long strings")
    func stringEndsAtEveryPosition() throws {
        // Each kind of byte that ends a plain run, as JSON spells it and as it decodes.
        let specials: [(json: String, decoded: String)] = [(#"\""#, "\""), (#"\\"#, "\\"), (#"\n"#, "\n"), (#"\u0041"#, "A"), ("é", "é"), ("\u{7F}", "\u{7F}")]
        for length in 0...19 {
            for position in 0...length {
                for special in specials {
                    let before = String(repeating: "a", count: position), after = String(repeating: "b", count: length - position)
                    let json = before + special.json + after
                    let expected = before + special.decoded + after
                    // The checker's walk, then the decoder's: the next member must be found just past the string.
                    #expect(try JSON.parse(Array("[\"\(json)\",\"next\"]".utf8)) == .array([.string(expected), .string("next")]), "\(json)")
                    let event = try PushEventDecoder().decode(Array("{\"id\":\"\(json)\",\"user\":\"u-1\",\"badge\":{\"set\":1}}".utf8))
                    #expect(event.id == expected && event.user == "u-1", "\(json)")
                }
                // A raw control byte is refused where it stands.
                let bytes = Array(("[\"" + String(repeating: "a", count: position)).utf8) + [0x01] + Array("\"]".utf8)
                #expect(throws: JSONParseError(message: "control character in string", offset: 2 + position)) { try JSON.parse(bytes) }
            }
        }
    }

    @Test func jsonRoundTripsEscapes() throws {
        let value = try JSON.parse(Array(#"{"a":"\ud83d\ude00 \"q\" \\ \/ \b\f\t","b":[true,false,null,-0.5e-3]}"#.utf8))
        let text = String(decoding: JSON.serialize(value), as: UTF8.self)
        #expect(text == "{\"a\":\"😀 \\\"q\\\" \\\\ / \\u0008\\u000c\\t\",\"b\":[true,false,null,-0.5e-3]}")
        #expect(try JSON.parse(JSON.serialize(value)) == value)
    }
}
