import APNsCore
import Foundation
import KafkaCore
import Testing
@testable import RelayCore

/// The published schemas (``RecordSchema``) against the relay's own readers and writers, judged by python-jsonschema:
/// the event decoder refuses exactly what the event schema refuses, and every record the relay's encoders write
/// validates against its topic's schema.
@Suite struct RecordSchemaTests {
    @Test("every topic's schema is JSON, is named by its topic and its configuration key, and lists the code's enums")
    func schemasAreNamedAndListTheCodesValues() throws {
        for schema in RecordSchema.allCases {
            let root = try #require(try JSONSerialization.jsonObject(with: Data(schema.text.utf8)) as? [String: Any])
            #expect(root["$schema"] as? String == "https://json-schema.org/draft/2020-12/schema")
            #expect(root["$id"] as? String == "urn:apns-relay:schema:\(schema.topic)")
            #expect(RecordSchema(naming: schema.topic) == schema && RecordSchema(naming: schema.configurationKey) == schema)
        }
        #expect(RecordSchema(naming: "push.elsewhere") == nil)
        let events = try JSONSerialization.jsonObject(with: Data(RecordSchema.events.text.utf8)) as? [String: Any]
        let apns = ((events?["$defs"] as? [String: Any])?["apns"] as? [String: Any])?["properties"] as? [String: Any]
        let pushTypes = (apns?["push_type"] as? [String: Any])?["enum"] as? [Any]
        #expect(pushTypes?.compactMap { $0 as? String } == APNsPushType.allCases.map(\.rawValue))
        let results = try JSONSerialization.jsonObject(with: Data(RecordSchema.results.text.utf8)) as? [String: Any]
        let statuses = ((results?["properties"] as? [String: Any])?["status"] as? [String: Any])?["enum"] as? [String]
        #expect(statuses == DeliveryStatus.allCases.map(\.rawValue))
    }

    @Test("the event decoder refuses what the schema refuses, and accepts what it accepts: the decoder's cases, the fuzz corpus and every field of valid events set to each of a set of values")
    func decoderAndSchemaAgree() throws {
        var cases: [(name: String, bytes: [UInt8], transport: APNsTransport)] = []
        cases += malformedEvents.map { ($0.name, $0.bytes, $0.transport) }
        cases += acceptedEvents.enumerated().map { ("accepted \($0.offset)", Array($0.element.utf8), .http2) }
        cases += try fuzzCorpus().map { ($0.name, $0.bytes, .http2) }
        cases += variants().map { ($0.name, $0.bytes, .http2) }
        let verdicts = try SchemaValidation.verdicts(cases.map { SchemaValidation.Record(.events, label: $0.name, value: $0.bytes) })
        try #require(verdicts.count == cases.count)
        var disagreements: [String] = []
        var beyondSchema: [String] = []
        for (input, verdict) in zip(cases, verdicts) {
            let refusal: EventRejection?
            do {
                _ = try PushEventDecoder(transport: input.transport).decode(input.bytes)
                refusal = nil
            } catch {
                refusal = error
            }
            if let refusal, Self.isBeyondSchema(refusal) {
                beyondSchema.append(input.name)
                continue
            }
            if (refusal == nil) != verdict.valid {
                let text = String(decoding: input.bytes.prefix(300), as: UTF8.self)
                disagreements.append("\(input.name): decoder \(refusal.map { "refuses (\($0.reason))" } ?? "accepts"), schema \(verdict.valid ? "accepts" : "refuses (\(verdict.error ?? ""))"): \(text)")
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.count) of \(cases.count) cases:\n\(disagreements.prefix(20).joined(separator: "\n"))")
        // The named limits beyond JSON Schema are a handful of the decoder's cases and the corpus, not a way out for the rest.
        #expect(beyondSchema.count <= 16, "\(beyondSchema.count) cases refused beyond the schema: \(beyondSchema)")
        #expect(cases.count >= 2_000)
    }

    /// The decoder's rules no JSON Schema states (the schema's `description` names them): sizes in bytes of UTF-8 (a
    /// payload once its badge is written in, a collapse id, a Live Activity name: the schema bounds characters),
    /// nesting depth, and the configured transport.
    static func isBeyondSchema(_ refusal: EventRejection) -> Bool {
        let reason = refusal.reason
        return (reason.hasPrefix("apns.payload is ") && reason.contains(" bytes, the limit"))
            || (reason.hasPrefix("apns.collapse_id is ") && reason.contains(" bytes, the limit is 64"))
            || reason.hasPrefix("event is not valid JSON: nesting deeper than")
            || reason.hasPrefix("apns.channel_id needs apns.transport http2")
    }

    @Test("each record the relay writes, with every optional key and without, validates against its topic's schema; one with a key the schema does not list does not")
    func writtenRecordsValidate() throws {
        let token = String(repeating: "ab", count: 32)
        let channel = "dGVzdC1jaGFubmVsLTE="
        let apnsID = DeliveryIdentity.apnsID(eventID: "e-1", token: token).uuidString
        let marker = ProgressMarker(through: 120, open: [100, 101, 107], devicesDone: [100: [DeviceDigest(token: token)]])
        var records: [SchemaValidation.Record] = [
            .init(.results, label: "delivered", value: ResultRecord(
                eventID: "e-1", user: "u-1", token: token, seq: 3, badge: 4, status: .delivered, apnsID: apnsID, httpStatus: 200,
                reason: nil, attempts: 1, latencyMs: 12, at: 1_795_000_000_000).encoded()),
            .init(.results, label: "every optional key", value: ResultRecord(
                eventID: "e-1", user: "u-1", token: token, seq: 3, badge: 4, status: .unregistered, apnsID: apnsID, httpStatus: 410,
                reason: "Unregistered", attempts: 2, latencyMs: 40, at: 1_795_000_000_000, late: true, environment: .sandbox,
                apnsUniqueID: "4c1e8a36-2c07-4ac8-a6b3-3c2e0ab0c4f1", unregisteredSince: 1_794_999_000_000, registeredAgain: true).encoded()),
            .init(.results, label: "broadcast", value: ResultRecord(
                eventID: "b-1", user: nil, token: channel, seq: nil, badge: nil, status: .delivered, apnsID: apnsID, httpStatus: 200,
                reason: nil, attempts: 1, latencyMs: 5, at: 1).encoded()),
            .init(.results, label: "whole event", value: ResultRecord.forEvent(
                id: "e-2", user: "u-1", seq: 9, badge: nil, status: .invalid, reason: "apns.payload.aps is required", at: 2).encoded()),
            .init(.failedTokens, label: "410", value: FailedTokenRecord(
                token: token, user: "u-1", topic: "com.example.app", environment: .production, reason: "Unregistered", since: 7, eventID: "e-1").encoded()),
            .init(.failedTokens, label: "feedback", value: FailedTokenRecord(
                token: token, user: nil, topic: nil, environment: nil, reason: "Feedback", since: 7, eventID: nil).encoded()),
            .init(.wrongEnvironment, label: "wrong environment", value: WrongEnvironmentRecord(
                token: token, user: nil, topic: "com.example.app", environment: .sandbox, wrongEnvironment: .production, source: .event,
                eventID: "e-1", at: 9).encoded()),
            .init(.deadLetter, label: "reference", value: DeadLetterReference(
                source: RecordReference(TopicPartition("push.events", 2), 77), key: Array("u-1".utf8), size: 1_200_000,
                error: "apns.payload is 1,200,000 bytes").encoded()),
            .init(.badgeState, label: "user, first write", value: BadgeStateRecord(badge: 0, seq: 0, updatedAt: 1).encoded()),
            .init(.badgeState, label: "user, every key", value: BadgeStateRecord(
                badge: 5, seq: 12, offset: 340, skipped: [SkippedSeqs(lower: 4, upper: 6, skippedAt: 1_795_000_000_000)],
                forwarded: [ForwardSource(partition: 3, offset: 15), ForwardSource(partition: 4, offset: 2)], forwardedAt: [3: 330],
                updatedAt: 1_795_000_000_000).encoded()),
            .init(.badgeState, label: "progress marker", value: marker.encoded(at: 5)),
            .init(.badgeState, label: "empty progress marker", value: ProgressMarker(through: -1, open: []).encoded(at: 5)),
            .init(.badgeState, label: "layout", value: PartitionLayout(partitionCount: 6).encoded()),
            .init(.badgeState, label: "layout after a growth", value: PartitionLayout(partitionCount: 8).encoded(
                readAgain: [ReadAgain(partition: 0, committed: 40, progress: marker), ReadAgain(partition: 1, committed: -1, progress: nil)], at: 5)),
        ]
        let unlisted = String(decoding: ResultRecord.forEvent(id: "e-3", user: nil, seq: nil, badge: nil, status: .duplicate, reason: nil, at: 3).encoded(), as: UTF8.self)
            .replacingOccurrences(of: "}", with: ",\"extra\":1}")
        records.append(.init(.results, label: "a key the schema does not list", value: Array(unlisted.utf8)))
        let verdicts = try SchemaValidation.verdicts(records)
        #expect(verdicts.filter { !$0.valid }.map(\.label) == ["a key the schema does not list"], "\(verdicts.filter { !$0.valid })")
    }

    @Test("device registrations: the registry's decoder and the schema agree")
    func deviceRegistrationsAgree() throws {
        let token = String(repeating: "cd", count: 32)
        let values = [
            #"{"user":"u","topic":"t","environment":"production","registered_at":1}"#,
            #"{"user":"u","topic":"t","environment":"sandbox","registered_at":1e3,"push_to_start":"T","future":[1]}"#,
            #"{"user":"u","topic":"t","environment":"sandbox","registered_at":1,"activity_id":"a","push_to_start":null}"#,
            #"{"user":"u","topic":"t","environment":"sandbox","registered_at":1,"activity_id":"a","push_to_start":"T"}"#,
            #"{"user":"","topic":"t","environment":"production","registered_at":1}"#,
            #"{"user":"u","topic":"t","environment":"development","registered_at":1}"#,
            #"{"user":"u","topic":"t","environment":"production","registered_at":-1}"#,
            #"{"user":"u","topic":"t","environment":"production"}"#,
            #"{"user":"u","topic":"t","environment":"production","registered_at":1,"activity_id":""}"#,
            #"{"user":"u","topic":5,"environment":"production","registered_at":1}"#,
            #"[]"#,
        ]
        let verdicts = try SchemaValidation.verdicts(values.map { SchemaValidation.Record(.devices, label: $0, value: Array($0.utf8)) })
        for (value, verdict) in zip(values, verdicts) {
            let decoded = (try? DeviceRegistration.decode(token: token, value: Array(value.utf8))) != nil
            #expect(decoded == verdict.valid, "\(value): decoder \(decoded), schema \(verdict.error ?? "accepts")")
        }
    }
}

/// Events the decoder accepts (the other decoder tests' events, and whole numbers written with a fraction or an exponent).
private let acceptedEvents: [String] = {
    let token = String(repeating: "a1", count: 32)
    let start = #""event":"start","timestamp":1,"attributes-type":"T","attributes":{},"content-state":{}"#
    return [
        #"{"id":"evt-7f3a","user":"u-42","seq":17,"tokens":["\#(token.uppercased())"],"badge":{"increment":1},"apns":{"topic":"com.example.app","push_type":"alert","priority":10,"expiration":1795000000,"collapse_id":"thread-9","payload":{"aps":{"alert":{"title":"Hi","body":"You have mail"},"sound":"default"},"thread":9}},"future_field":{"anything":[1,2,3]}}"#,
        #"{"id":"\#(String(repeating: "é", count: 128))","user":"u","badge":{"set":1}}"#,
        #"{"id":"e","user":"u","seq":null,"tokens":null,"apns":null,"badge":{"set":2}}"#,
        #"{"id":"e","user":"u","apns":{"push_type":"background","payload":{"aps":{"content-available":1}}}}"#,
        #"{"id":"e","tokens":["\#(token)"],"apns":{"environment":"sandbox","payload":{"aps":{}}}}"#,
        #"{"id":"b-1","apns":{"channel_id":"dGVzdC1jaGFubmVsLTE=","push_type":"liveactivity","topic":"com.example.app","payload":{"aps":{"event":"update","content-state":{}}}}}"#,
        #"{"id":"e","tokens":["\#(token)"],"apns":{"push_type":"liveactivity","payload":{"aps":{\#(start),"input-push-token":1}}}}"#,
        #"{"id":"e","tokens":["\#(token)"],"apns":{"push_type":"liveactivity","payload":{"aps":{\#(start),"input-push-channel":"dGVzdC1jaGFubmVsLTE="}}}}"#,
        #"{"id":"la-1","live_activity":{"activity_id":"match-7"},"apns":{"push_type":"liveactivity","payload":{"aps":{"event":"update","content-state":{}}}}}"#,
        #"{"id":"la-2","user":"u-1","live_activity":{"push_to_start":"MatchAttributes"},"apns":{"push_type":"liveactivity","payload":{"aps":{\#(start)}}}}"#,
        #"{"id":"e","user":"u","seq":1e3,"badge":{"set":2.0},"apns":{"priority":10.0,"expiration":17950000e2,"payload":{"aps":{}}}}"#,
        #"{"id":"e","user":"u","seq":9223372036854775807,"badge":{"decrement":0}}"#,
        #"{"id":"e","user":"u","apns":{"collapse_id":"a\tb c","payload":{"aps":{}}}}"#,
        #"{"id":"e","user":"u","live_activity":null,"apns":{"channel_id":null,"payload":{"aps":{"event":"start"}}}}"#,
    ]
}()

/// The committed fuzz corpus of the event decoder (seeds and fixed crashes).
private func fuzzCorpus() throws -> [(name: String, bytes: [UInt8])] {
    let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/Corpus/EventDecoderFuzz")
    let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
    return try files.map { ("corpus \($0)", Array(try Data(contentsOf: directory.appendingPathComponent($0)))) }
}

/// Valid events with one field at a time set to each of a set of values, or removed.
private func variants() -> [(name: String, bytes: [UInt8])] {
    let token = String(repeating: "a1", count: 32)
    let bases = [
        #"{"id":"e","user":"u","seq":3,"tokens":["\#(token)"],"badge":{"increment":1},"apns":{"topic":"t","push_type":"alert","priority":10,"expiration":5,"collapse_id":"c","environment":"sandbox","payload":{"aps":{"alert":"hi"}}}}"#,
        #"{"id":"b","apns":{"channel_id":"dGVzdC1jaGFubmVsLTE=","push_type":"liveactivity","payload":{"aps":{"event":"update","content-state":{}}}}}"#,
        #"{"id":"l","user":"u","live_activity":{"push_to_start":"T"},"apns":{"push_type":"liveactivity","payload":{"aps":{"event":"start","attributes-type":"T","attributes":{},"content-state":{},"input-push-token":1}}}}"#,
        #"{"id":"a","live_activity":{"activity_id":"m"},"apns":{"push_type":"liveactivity","payload":{"aps":{"event":"update"}}}}"#,
        #"{"id":"s","user":"u","badge":{"set":0}}"#,
        #"{"id":"k","tokens":["\#(token)"],"apns":{"push_type":"background","priority":5,"payload":{"aps":{}}}}"#,
    ]
    let paths: [[String]] = [
        ["id"], ["user"], ["seq"], ["tokens"], ["tokens", "0"], ["badge"], ["badge", "set"], ["badge", "increment"], ["badge", "decrement"],
        ["live_activity"], ["live_activity", "push_to_start"], ["live_activity", "activity_id"], ["apns"], ["apns", "topic"], ["apns", "push_type"],
        ["apns", "priority"], ["apns", "expiration"], ["apns", "collapse_id"], ["apns", "channel_id"], ["apns", "environment"], ["apns", "payload"],
        ["apns", "payload", "aps"], ["apns", "payload", "aps", "event"], ["apns", "payload", "aps", "attributes-type"],
        ["apns", "payload", "aps", "attributes"], ["apns", "payload", "aps", "content-state"], ["apns", "payload", "aps", "input-push-token"],
        ["apns", "payload", "aps", "input-push-channel"],
    ]
    let values: [String?] = [
        nil, "null", "\"\"", "\"x\"", "0", "1", "-1", "5", "10", "1.5", "2.0", "1e1", "true", "[]", "{}", "\"background\"", "\"liveactivity\"",
        "\"start\"", "\"end\"", "\"sandbox\"", "\"\(token)\"", "\"\(token.uppercased())\"", "[\"\(token)\"]", "\"dGVzdC1jaGFubmVsLTE=\"", "\"====\"",
        "{\"set\":1}", "{\"set\":1,\"increment\":1}", "{\"aps\":{}}", "{\"activity_id\":\"z\"}", "\" c\"", "\"\(String(repeating: "x", count: 129))\"",
        "9223372036854775808",
    ]
    var cases: [(String, [UInt8])] = []
    for (baseIndex, base) in bases.enumerated() {
        guard let root = try? JSON.parse(Array(base.utf8)) else { preconditionFailure("a base event is not JSON") }
        for path in paths {
            for value in values {
                let replacement = value.map { literal -> JSONValue in
                    guard let parsed = try? JSON.parse(Array(literal.utf8)) else { preconditionFailure("\(literal) is not JSON") }
                    return parsed
                }
                guard let changed = root.replacing(at: path[...], with: replacement) else { continue }
                cases.append(("base \(baseIndex), \(path.joined(separator: ".")) = \(value ?? "removed")", JSON.serialize(changed)))
            }
        }
    }
    return cases
}

extension JSONValue {
    /// The value with the member or element at `path` set to `replacement` (removed when `nil`); `nil` when the path
    /// runs through something that is not there (a member is added only at the end of the path).
    fileprivate func replacing(at path: ArraySlice<String>, with replacement: JSONValue?) -> JSONValue? {
        guard let step = path.first else { return replacement }
        switch self {
        case .object(var members):
            let index = members.lastIndex { $0.key == step }
            if path.count == 1 {
                if let index { members.remove(at: index) }
                if let replacement { members.append(JSONMember(step, replacement)) }
                return .object(members)
            }
            guard let index, let inner = members[index].value.replacing(at: path.dropFirst(), with: replacement) else { return nil }
            members[index].value = inner
            return .object(members)
        case .array(var elements):
            guard let position = Int(step), elements.indices.contains(position) else { return nil }
            if path.count == 1 {
                if let replacement { elements[position] = replacement } else { elements.remove(at: position) }
                return .array(elements)
            }
            guard let inner = elements[position].replacing(at: path.dropFirst(), with: replacement) else { return nil }
            elements[position] = inner
            return .array(elements)
        default:
            return nil
        }
    }
}
