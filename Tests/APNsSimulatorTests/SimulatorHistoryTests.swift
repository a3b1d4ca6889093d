@testable import APNsSimulator
import APNsTestSupport
import Foundation
import TestSupport
import Testing

/// What the simulator keeps of its deliveries for inspection: a bounded history and the device log.
@Suite("The simulator's delivery history and device log", .serialized)
struct SimulatorHistoryTests {
    @Test("a delivery history of 2 keeps the newest two for inspection while the count, the sequence numbers and the answers cover all five")
    func boundedHistory() async throws {
        var setup = Harness.Setup()
        setup.simulator.deliveryHistory = 2
        try await Harness.run(setup) { simulator, supervisor in
            // One at a time, so the acceptance order is the sending order: tokens 1, 2, 1, 2, 1 with badges 1...5.
            for badge in 1...5 {
                let outcome = await supervisor.send(try Harness.notification(token: Harness.token(2 - badge % 2), badge: badge))
                #expect(outcome.classification == .delivered)
            }
            #expect(simulator.deliveryCount == 5)
            #expect(simulator.allDeliveries().map(\.badge) == [4, 5])
            #expect(simulator.allDeliveries().map(\.sequence) == [3, 4])
            #expect(simulator.deliveries(for: Harness.token(1)).map(\.badge) == [5])
            #expect(simulator.deliveries(for: Harness.token(2)).map(\.badge) == [4])
        }
        setup.simulator.deliveryHistory = 0
        try await Harness.run(setup) { simulator, supervisor in
            let outcome = await supervisor.send(try Harness.notification(token: Harness.token(1)))
            #expect(outcome.classification == .delivered)
            #expect(simulator.deliveryCount == 1)
            #expect(simulator.allDeliveries().isEmpty)
            #expect(simulator.deliveries(for: Harness.token(1)).isEmpty)
        }
    }

    @Test("the device log gets one JSON line per accepted notification")
    func deviceLog() async throws {
        let path = scratchPath("device-log") + ".jsonl"
        var setup = Harness.Setup()
        setup.simulator.deviceLogPath = path
        try await Harness.run(setup) { simulator, supervisor in
            for badge in 1...3 {
                _ = await supervisor.send(try Harness.notification(token: Harness.token(60), badge: badge))
            }
            #expect(simulator.deviceViewJSONLines().split(separator: "\n").count == 3)
        }
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 3)
        let first = try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any]
        #expect(first?["token"] as? String == Harness.token(60))
        #expect((first?["badge"] as? NSNumber)?.intValue == 1)
        try? FileManager.default.removeItem(atPath: path)
    }

    @Test("a device log line is one line of JSON with every field, whatever the strings and the payload's layout hold")
    func deviceLogLine() throws {
        let payload = Array("{\n  \"aps\" : {\"badge\": 7, \"alert\": \"a \\\"quote\\\"\\nand\"},\r\n  \"e\": \"s12\"\n}".utf8)
        var delivery = SimulatedDelivery(token: "ab01", apnsID: "id-1", collapseID: "c\"o\\l\u{1}", topic: "com.example.app", pushType: "alert",
                                         priority: 10, payload: payload, badge: 7, sequence: 4)
        delivery.receivedAt = 1_796_000_000_123
        delivery.uniqueID = "u-1"
        let line = delivery.jsonLine
        #expect(!line.contains("\n") && !line.contains("\r"))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["apns_id"] as? String == "id-1")
        #expect(object["collapse_id"] as? String == "c\"o\\l\u{1}")
        #expect((object["badge"] as? NSNumber)?.intValue == 7)
        #expect((object["priority"] as? NSNumber)?.intValue == 10)
        #expect((object["received_at"] as? NSNumber)?.int64Value == 1_796_000_000_123)
        #expect((object["seq"] as? NSNumber)?.intValue == 4)
        #expect(object["token"] as? String == "ab01" && object["topic"] as? String == "com.example.app")
        #expect(object["push_type"] as? String == "alert" && object["unique_id"] as? String == "u-1")
        let logged = try #require(object["payload"] as? [String: Any])
        #expect(logged["e"] as? String == "s12")
        #expect(((logged["aps"] as? [String: Any])?["alert"] as? String) == "a \"quote\"\nand")
        delivery.payload = Array("not json".utf8)
        let withoutPayload = try #require(try JSONSerialization.jsonObject(with: Data(delivery.jsonLine.utf8)) as? [String: Any])
        #expect(withoutPayload["payload"] == nil && withoutPayload["token"] as? String == "ab01")
    }
}
