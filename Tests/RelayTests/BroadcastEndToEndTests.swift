import APNs
import APNsSimulator
import Foundation
import Kafka
import Testing

@testable import Relay

/// Broadcasts (`apns.channel_id`) through Kafka, the relay service and the simulator.
@Suite("Broadcast end to end", .serialized)
struct BroadcastEndToEndTests {
    @Test("broadcast events are sent once each, in order, to their channel and get one result with the channel id as token; an unknown channel is rejected")
    func broadcastThroughTheRelay() async throws {
        let setup = try await RelayTestCluster.start(brokers: 1)
        let (cluster, configuration, producer) = (setup.cluster, setup.configuration, setup.producer)
        let apns = try await SimulatedAPNs.start()
        let channel = apns.simulator.createChannel(bundleID: "com.example.app", storagePolicy: .mostRecent)
        let unknownChannel = "dW5rbm93bi1jaGFubmVs"
        // A device of another user: a broadcast fans out to nobody in the registry.
        _ = try await producer.enqueue(KafkaRecord(topic: "push.devices", key: Array(token(1).utf8),
            value: Array(#"{"user":"u-0","topic":"com.example.app","environment":"production","registered_at":1}"#.utf8)))
        // Keyed by channel id, so a channel's broadcasts share a partition and keep their order.
        for (id, target) in [("b-1", channel), ("b-2", channel), ("b-3", unknownChannel)] {
            _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array(target.utf8), value: Array("""
                {"id":"\(id)","apns":{"channel_id":"\(target)","push_type":"liveactivity","priority":5,\
                "payload":{"aps":{"timestamp":1700000000,"event":"update","content-state":{"n":"\(id)"}}}}}
                """.utf8)))
        }
        try await producer.flush()

        let relay = try await apns.runRelay(configuration) { $0.counters.notificationsByStatus.values.reduce(0, +) >= 3 && $0.pendingRecords == 0 }
        await apns.simulator.shutdown()

        let shown = apns.simulator.broadcasts(for: channel)
        #expect(shown.map(\.requestID) == ["b-1", "b-2"].map { APNsUUIDText.format(DeliveryIdentity.apnsID(eventID: $0, channelID: channel)) })
        #expect(shown.allSatisfy { $0.bundleID == "com.example.app" && $0.priority == 5 })
        #expect(apns.simulator.deliveryCount == 0, "no device token was sent to")

        let results = try await readAll(cluster, topic: "push.results", partitions: 6)
            .compactMap { try JSONSerialization.jsonObject(with: Data($0.value ?? [])) as? [String: Any] }
        let byEvent = Dictionary(uniqueKeysWithValues: results.map { ($0["event_id"] as? String ?? "", $0) })
        #expect(results.count == 3, "one result per broadcast event: \(results)")
        for id in ["b-1", "b-2"] {
            #expect(byEvent[id]?["token"] as? String == channel)
            #expect(byEvent[id]?["status"] as? String == "delivered")
            #expect(byEvent[id]?["http_status"] as? Int == 200)
            #expect(byEvent[id]?["apns_id"] as? String == APNsUUIDText.format(DeliveryIdentity.apnsID(eventID: id, channelID: channel)))
        }
        #expect(byEvent["b-3"]?["token"] as? String == unknownChannel)
        #expect(byEvent["b-3"]?["status"] as? String == "rejected")
        #expect(byEvent["b-3"]?["http_status"] as? Int == 404)
        #expect(byEvent["b-3"]?["reason"] as? String == "ChannelNotRegistered")
        #expect(try await readAll(cluster, topic: "push.failed-tokens", partitions: 6).isEmpty, "a channel is never a dead token")
        #expect(relay.status.snapshot.counters.deadLetters == 0)
        await producer.close()
    }
}

@Suite("Relay engine: broadcasts")
struct BroadcastEngineTests {
    let events = TopicPartition("push.events", 0)
    static let channel = "dGVzdC1jaGFubmVsLTE="

    func broadcast(_ id: String, channel: String = channel, topic: String? = nil) -> [UInt8] {
        let topicField = topic.map { "\"topic\":\"\($0)\"," } ?? ""
        return Array(#"{"id":"\#(id)","apns":{"channel_id":"\#(channel)","push_type":"liveactivity",\#(topicField)"payload":{"aps":{"event":"update"}}}}"#.utf8)
    }

    @Test("a channel has one broadcast in flight: the next goes out when the first is answered, in event order")
    func oneInFlightPerChannel() {
        var engine = RelayEngine(configuration: RelayEngine.Configuration().withTestTopic)
        _ = engine.assigned([events])
        _ = engine.restored(events, records: [], now: 0)
        func sends(_ effects: [RelayEffect]) -> [DeviceDispatch<PendingNotification>] {
            effects.compactMap { if case .send(let dispatch) = $0 { dispatch } else { nil } }
        }
        let first = sends(engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: 0, key: nil, value: broadcast("b-1")), now: 0))
        let second = sends(engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: 1, key: nil, value: broadcast("b-2")), now: 0))
        let otherChannel = sends(engine.consumed(
            KafkaMessage(topic: events.topic, partition: 0, offset: 2, key: nil, value: broadcast("c-1", channel: "b3RoZXI=")), now: 0))
        #expect(first.map(\.notification.payload.eventID) == ["b-1"])
        #expect(second.isEmpty, "waits behind b-1 on the same channel")
        #expect(otherChannel.map(\.notification.payload.eventID) == ["c-1"], "another channel is not held up")
        let pending = first[0].notification.payload
        #expect(pending.token == Self.channel && pending.user == nil && pending.badge == nil)
        #expect(pending.notification.channelID?.value == Self.channel)
        #expect(pending.notification.topic == "com.example.app", "the configured apns.topic is the bundle id")

        let answered = engine.sent(first[0], outcome: .delivered(), now: 0)
        #expect(sends(answered).map(\.notification.payload.eventID) == ["b-2"])
        let results = answered.compactMap { if case .publishResult(let record, _) = $0 { record } else { nil } }
        #expect(results.map(\.token) == [Self.channel])
        #expect(results.map(\.status) == [.delivered])
    }

    @Test("a rejected broadcast reports no failed token")
    func rejectedIsNotADeadToken() {
        var engine = RelayEngine(configuration: RelayEngine.Configuration().withTestTopic)
        _ = engine.assigned([events])
        _ = engine.restored(events, records: [], now: 0)
        let effects = engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: 0, key: nil, value: broadcast("b-1")), now: 0)
        guard let dispatch = effects.compactMap({ if case .send(let dispatch) = $0 { dispatch } else { nil } }).first else {
            Issue.record("not sent: \(effects)")
            return
        }
        // Even an answer that names a dead token (which APNs does not give for channels) is no failed-token record.
        let answered = engine.sent(dispatch, outcome: APNsOutcome(classification: .tokenDead, lastAttempt: .response(APNsResponse(status: 404, reason: .channelNotRegistered, timestamp: 5)), attempts: 1, apnsID: APNsOutcome.testID), now: 0)
        #expect(!answered.contains { if case .publishFailedToken = $0 { true } else { false } })
        #expect(answered.contains { if case .publishResult(let record, _) = $0 { record.status == .rejected && record.reason == "ChannelNotRegistered" } else { false } })
    }
}
