import Foundation
import Kafka
import Logging
import Synchronization
import Testing
import TestSupport

/// Live Activity tokens the relay keeps (`push.devices`), through `apns-relay run`: a push-to-start token per user and
/// attributes type, an update token per activity; events address them with `live_activity`.
@Suite("apns-relay run: Live Activity tokens from push.devices", .serialized)
struct LiveActivityTokensProcessTests {
    static let pushToStart = String(repeating: "5a", count: 40)
    static let update = String(repeating: "5b", count: 40)
    static let device = String(repeating: "ab", count: 32)

    static func registration(_ extra: String) -> String {
        #"{"user":"u-1","topic":"com.example.app","environment":"production","registered_at":1\#(extra)}"#
    }

    static func event(_ id: String, seq: Int, target: String, aps: String) -> (key: String, value: String) {
        ("u-1", #"{"id":"\#(id)","user":"u-1","seq":\#(seq),"live_activity":\#(target),"apns":{"push_type":"liveactivity","priority":10,"payload":{"aps":{\#(aps)}}}}"#)
    }

    static let start = #""timestamp":1795000000,"event":"start","attributes-type":"MatchAttributes","attributes":{"home":"A","away":"B"},"content-state":{"score":"0-0"},"alert":{"title":"Kick-off","body":"A - B"},"input-push-token":1"#
    static func update(_ score: String, event: String = "update") -> String {
        #""timestamp":1795000060,"event":"\#(event)","content-state":{"score":"\#(score)"}"#
    }

    @Test("an activity started through the user's push-to-start token, updated and ended through its registered update token; an ended activity's 410 removes that token")
    func activityThroughRegisteredTokens() async throws {
        var logger = Logger(label: "live-activity-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(relayLines: "  shutdown_timeout_s: 10\n")
        try await fixture.produce([
            (Self.pushToStart, Self.registration(#","push_to_start":"MatchAttributes""#)),
            (Self.device, Self.registration("")),
            (String(repeating: "5c", count: 40), Self.registration(##","push_to_start":"""##)),
        ], topic: "push.devices", logger: logger)
        let logPath = "\(fixture.directory)/live-activity.log"
        let relay = try startRelay(["run", "--config", fixture.configPath], log: logPath)
        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: fixture.cluster.bootstrapServers), logger: logger)
        func records(_ topic: String) async throws -> [String: String] { try await lastValues(reader, topic: topic) }
        func results(_ count: Int) async throws -> [String: String] {
            var seen: [String: String] = [:]
            let doneBy = ContinuousClock.now.advanced(by: .seconds(60))
            while ContinuousClock.now < doneBy && relay.isRunning {
                seen = try await records("push.results")
                if seen.count >= count { break }
                try await Task.sleep(for: .milliseconds(200))
            }
            return seen
        }

        // Started through the user's push-to-start token for MatchAttributes (never the user's devices).
        try await fixture.produce([Self.event("start", seq: 1, target: #"{"push_to_start":"MatchAttributes"}"#, aps: Self.start)], logger: logger)
        _ = try await results(1)
        // The app sends the started activity's update token to its backend, which registers it.
        try await fixture.produce([(Self.update, Self.registration(#","activity_id":"match-7""#))], topic: "push.devices", logger: logger)
        try await Task.sleep(for: .seconds(1))
        try await fixture.produce([
            Self.event("goal", seq: 2, target: #"{"activity_id":"match-7"}"#, aps: Self.update("1-0")),
            Self.event("final", seq: 3, target: #"{"activity_id":"match-7"}"#, aps: Self.update("1-0", event: "end")),
        ], logger: logger)
        _ = try await results(3)
        // The activity ended on the device: APNs answers its token 410 from then on.
        fixture.simulator.markDead(Self.update, timestamp: 1_795_000_100_000)
        try await fixture.produce([Self.event("late", seq: 4, target: #"{"activity_id":"match-7"}"#, aps: Self.update("2-0"))], logger: logger)
        _ = try await results(4)
        try await fixture.produce([Self.event("later", seq: 5, target: #"{"activity_id":"match-7"}"#, aps: Self.update("3-0"))], logger: logger)
        let all = try await results(5)
        kill(relay.processIdentifier, SIGTERM)
        while relay.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        #expect(relay.terminationStatus == 0, "\(log.suffix(2_000))")

        func result(_ id: String) -> [String: Any] { RecordShape.object(all[id] ?? "{}") }
        #expect(all.count == 5, "\(all)\n\(log.suffix(3_000))")
        for id in ["start", "goal", "final"] { #expect(result(id)["status"] as? String == "delivered", "\(id): \(result(id))") }
        #expect(result("start")["token"] as? String == Self.pushToStart && result("goal")["token"] as? String == Self.update)
        let started = fixture.simulator.deliveries(for: Self.pushToStart)
        #expect(started.map(\.topic) == ["com.example.app.push-type.liveactivity"] && started.map(\.pushType) == ["liveactivity"])
        #expect(fixture.simulator.deliveries(for: Self.update).count == 2, "update and end")
        #expect(fixture.simulator.deliveries(for: Self.device).isEmpty, "a Live Activity goes to its tokens, not to the user's devices")
        // The ended activity's token: unregistered, published as failed, removed: the next update finds no token.
        #expect(result("late")["status"] as? String == "unregistered", "\(result("late"))")
        #expect(result("later")["status"] as? String == "no_devices", "\(result("later"))")
        #expect(result("later")["reason"] as? String == "no registered update tokens for activity match-7")
        let failed = try await records("push.failed-tokens")
        #expect(failed.keys.sorted() == [Self.update], "\(failed)")
        #expect(RecordShape.object(failed[Self.update] ?? "{}")["user"] as? String == "u-1")
        // A registration that breaks the shape is skipped, naming what is wrong.
        #expect(log.contains("unreadable device registration skipped") && log.contains("push_to_start must be a non-empty string"), "\(log.suffix(2_000))")
        await fixture.stop()
    }
}
