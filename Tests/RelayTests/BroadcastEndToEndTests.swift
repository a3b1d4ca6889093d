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
