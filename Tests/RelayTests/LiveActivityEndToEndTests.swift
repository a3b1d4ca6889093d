import APNs
import APNsSimulator
import Foundation
import Kafka
import Testing

@testable import Relay

/// Live Activities started remotely (push-to-start tokens), updated through their channel, and iOS 18 control
/// widgets, through Kafka, the relay service and the simulator.
@Suite("Live Activities and controls end to end", .serialized)
struct LiveActivityEndToEndTests {
    /// Push-to-start tokens: ActivityKit's `pushToStartToken`, one per device and activity type.
    static let startOnChannel = String(repeating: "5a", count: 40)
    static let startWithToken = String(repeating: "5b", count: 40)
    /// A control's push token (`ControlPushInfo.token`).
    static let control = String(repeating: "c0", count: 32)

    static func start(_ id: String, token: String, aps: String) -> String {
        """
        {"id":"\(id)","tokens":["\(token)"],"apns":{"push_type":"liveactivity","topic":"com.example.app.push-type.liveactivity",\
        "priority":10,"payload":{"aps":{\(aps)}}}}
        """
    }

    /// A start's `aps` members (iOS 17.2+), then `extra` (iOS 18's `input-push-channel` / `input-push-token`).
    static func startAPS(_ extra: String, attributesType: Bool = true) -> String {
        (attributesType ? #""attributes-type":"MatchAttributes","# : "")
            + #""timestamp":1700000000,"event":"start","content-state":{"score":"0-0"},"attributes":{"home":"A","away":"B"},"#
            + #""alert":{"title":"Kick-off","body":"A - B"}"# + extra
    }

    @Test("a Live Activity started with a push-to-start token (subscribed to a channel, or asking for its own push token), updated by a broadcast to the channel, and a control reloaded; malformed starts are dead letters")
    func liveActivitiesAndControls() async throws {
        let setup = try await RelayTestCluster.start(brokers: 1)
        let (cluster, configuration, producer) = (setup.cluster, setup.configuration, setup.producer)
        let apns = try await SimulatedAPNs.start()
        let channel = apns.simulator.createChannel(bundleID: "com.example.app", storagePolicy: .mostRecent)
        let events: [(key: String, value: String)] = [
            ("start-1", Self.start("start-1", token: Self.startOnChannel, aps: Self.startAPS(#","input-push-channel":"\#(channel)""#))),
            ("start-2", Self.start("start-2", token: Self.startWithToken, aps: Self.startAPS(#","input-push-token":1"#))),
            // Every update after the start: one broadcast to the activities subscribed to the channel.
            (channel, #"{"id":"update-1","apns":{"channel_id":"\#(channel)","push_type":"liveactivity","priority":5,"payload":{"aps":{"timestamp":1700000060,"event":"update","content-state":{"score":"1-0"}}}}}"#),
            ("controls-1", #"{"id":"controls-1","tokens":["\#(Self.control)"],"apns":{"push_type":"controls","topic":"com.example.app.push-type.controls","expiration":0,"payload":{"aps":{"content-changed":true}}}}"#),
            ("controls-2", #"{"id":"controls-2","tokens":["\#(Self.control)"],"apns":{"push_type":"controls","topic":"com.example.app","payload":{"aps":{"content-changed":true}}}}"#),
            // A start the device could not show: no attributes-type. A broadcast cannot start an activity.
            ("start-3", Self.start("start-3", token: Self.startWithToken, aps: Self.startAPS("", attributesType: false))),
            (channel, #"{"id":"start-4","apns":{"channel_id":"\#(channel)","push_type":"liveactivity","payload":{"aps":{"timestamp":1700000000,"event":"start","content-state":{},"attributes-type":"MatchAttributes","attributes":{}}}}}"#),
        ]
        for event in events {
            _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array(event.key.utf8), value: Array(event.value.utf8)))
        }
        try await producer.flush()

        let consumed = events.count
        _ = try await apns.runRelay(configuration) { $0.counters.eventsConsumed >= consumed && $0.pendingRecords == 0 }
        await apns.simulator.shutdown()

        // The starts reach their push-to-start tokens as written: push type, topic, priority, every aps key.
        for (token, extra) in [(Self.startOnChannel, #","input-push-channel":"\#(channel)""#), (Self.startWithToken, #","input-push-token":1"#)] {
            let shown = apns.simulator.deliveries(for: token)
            #expect(shown.count == 1, "\(token.prefix(8)): \(shown.count) deliveries")
            #expect(shown.first?.pushType == "liveactivity" && shown.first?.topic == "com.example.app.push-type.liveactivity" && shown.first?.priority == 10)
            let sent = try JSONSerialization.jsonObject(with: Data(#"{"aps":{\#(Self.startAPS(extra))}}"#.utf8)) as? NSDictionary
            let received = try shown.first.map { try JSONSerialization.jsonObject(with: Data($0.payload)) as? NSDictionary }
            #expect(received == sent, "no badge or any other key added")
        }
        #expect(apns.simulator.broadcasts(for: channel).map(\.requestID) == [APNsUUIDText.format(DeliveryIdentity.apnsID(eventID: "update-1", channelID: channel))])
        let control = apns.simulator.deliveries(for: Self.control)
        #expect(control.map(\.pushType) == ["controls"] && control.first?.topic == "com.example.app.push-type.controls", "\(control)")

        let results = try await readAll(cluster, topic: "push.results", partitions: 6)
            .compactMap { try JSONSerialization.jsonObject(with: Data($0.value ?? [])) as? [String: Any] }
        let byEvent = Dictionary(results.map { ($0["event_id"] as? String ?? "", $0) }) { first, _ in first }
        for id in ["start-1", "start-2", "update-1", "controls-1"] {
            #expect(byEvent[id]?["status"] as? String == "delivered", "\(id): \(byEvent[id] ?? [:])")
        }
        #expect(byEvent["controls-2"]?["status"] as? String == "invalid")
        #expect(byEvent["controls-2"]?["reason"] as? String == "apns-topic must end with .push-type.controls for this push type", "\(byEvent["controls-2"] ?? [:])")

        let deadLetters = try await readAll(cluster, topic: "push.dlq", partitions: 6)
            .map { message in (String(decoding: message.key ?? [], as: UTF8.self), String(decoding: message.header("x-error")?.value ?? [], as: UTF8.self)) }
        let errors = Dictionary(deadLetters) { first, _ in first }
        #expect(deadLetters.count == 2, "\(deadLetters)")
        #expect(errors["start-3"] == "apns.payload.aps.attributes-type is required to start a Live Activity (the name of its ActivityAttributes type)", "\(errors)")
        #expect(errors[channel] == "apns.payload.aps.event start needs a push-to-start token in tokens: a broadcast updates or ends the Live Activities on its channel", "\(errors)")
        await producer.close()
    }
}
