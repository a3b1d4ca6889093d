import APNsCore
import KafkaCore
import Testing

@testable import RelayCore

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
