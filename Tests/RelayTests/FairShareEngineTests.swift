import Kafka
import Testing

@testable import Relay

/// Priority classes and per-user shares through the engine: what a device and a user see, with APNs
/// holding every answer (a slow APNs is when waiting order matters).
@Suite("Priority and fair share in the engine")
struct FairShareEngineTests {
    let events = TopicPartition("push.events", 0)

    func message(_ offset: Int64, _ value: String) -> KafkaMessage {
        KafkaMessage(topic: events.topic, partition: events.partition, offset: offset, key: nil, value: Array(value.utf8))
    }

    static func background(_ id: String, user: String, token: String) -> String {
        #"{"id":"\#(id)","user":"\#(user)","tokens":["\#(token)"],"apns":{"push_type":"background","payload":{"aps":{"content-available":1}}}}"#
    }

    static func alert(_ id: String, user: String, tokens: [String], seq: Int? = nil) -> String {
        let seqField = seq.map { #""seq":\#($0),"# } ?? ""
        return #"{"id":"\#(id)","user":"\#(user)",\#(seqField)"tokens":[\#(tokens.map { "\"\($0)\"" }.joined(separator: ","))],"apns":{"payload":{"aps":{"alert":"\#(id)"}}}}"#
    }

    @Test("an alert read behind a flood of background pushes that fills the window is sent at once, before the flood's waiting sends")
    func alertPassesFlood() {
        var harness = EngineHarness(configuration: .init(maxInFlight: 100), seed: 21)
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true
        for index in 0..<300 {
            harness.run(harness.engine.consumed(message(Int64(index), Self.background("bg-\(index)", user: "b\(index)", token: token(index))),
                                                now: harness.now))
        }
        harness.settle()
        let floodSent = harness.sent.count
        #expect(floodSent < 100, "background pushes fill the window up to the urgent reserve: \(floodSent) sent")
        harness.run(harness.engine.consumed(message(300, Self.alert("alert", user: "a", tokens: [token(1_000)])), now: harness.now))
        harness.settle()
        #expect(harness.sent.map(\.eventID).suffix(1) == ["alert"], "the alert is sent while 200 background pushes still wait")
        #expect(harness.engine.notificationsInFlight <= 100)
        harness.apnsSilent = false
        harness.settle()
        #expect(harness.results.filter { $0.status == .delivered }.count == 301)
    }

    @Test("one user with many devices and events holds at most its share of the window; other users' sends go at once")
    func hotUserHoldsItsShare() {
        var harness = EngineHarness(configuration: .init(maxInFlight: 100), seed: 22)
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true
        let hotDevices = (0..<20).map { token(5_000 + $0) }
        for seq in 1...50 {
            harness.run(harness.engine.consumed(message(Int64(seq - 1), Self.alert("hot-\(seq)", user: "hot", tokens: hotDevices, seq: seq)),
                                                now: harness.now))
        }
        for other in 0..<30 {
            harness.run(harness.engine.consumed(message(Int64(50 + other), Self.alert("o-\(other)", user: "o\(other)", tokens: [token(other)])),
                                                now: harness.now))
        }
        harness.settle()
        let othersSent = Set(harness.sent.map(\.eventID).filter { $0.hasPrefix("o-") })
        #expect(othersSent.count == 30, "every other user's alert is on the wire: \(othersSent.count)")
        #expect(harness.engine.notificationsInFlight <= 100)
        let hotInWindow = harness.engine.notificationsInFlight - 30
        #expect(hotInWindow <= 10, "the hot user holds \(hotInWindow), its share is 10")
        harness.apnsSilent = false
        harness.settle()
        #expect(harness.results.filter { $0.status == .delivered }.count == 50 * 20 + 30)
        for device in hotDevices {
            #expect(harness.received[device]?.count == 50, "every hot event reaches \(device)")
        }
        // Each device saw the hot user's alerts in seq order.
        let order = harness.sent.filter { $0.token == hotDevices[0] }.compactMap(\.seq)
        #expect(order == Array(1...50).map(Int64.init))
    }
}
