import KafkaCore
import Testing

@testable import RelayCore

/// A token is dead only if it was not registered again after the moment APNs (or the feedback service) gives for it;
/// a token listed twice in one event is one device.
@Suite("Dead tokens and repeated tokens")
struct RelayEngineDevicesTests {
    let events = TopicPartition("push.events", 0)
    static let unregisteredAt: Int64 = 1_795_000_000_000

    private func harness(registeredAt: Int64, seed: UInt64 = 7) -> (EngineHarness, String) {
        var harness = EngineHarness(seed: seed)
        let device = token(11)
        _ = harness.engine.deviceRecord(key: slice(Array(device.utf8)), value: slice(registrationValue(user: "u-1", at: registeredAt)))
        harness.deadTokens = [device]
        harness.deadTokenTimestamp = Self.unregisteredAt
        harness.run(harness.engine.assigned([events]))
        return (harness, device)
    }

    private func consume(_ harness: inout EngineHarness, offset: Int64, _ value: [UInt8]) {
        harness.run(harness.engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: offset, key: nil, value: value), now: harness.now))
        harness.settle()
    }

    @Test("a 410 older than the token's registration (the app registered it again 59 minutes later): no failed token, the registration stays, the result says so")
    func registeredAgainAfterThe410() {
        var (harness, device) = harness(registeredAt: Self.unregisteredAt + 59 * 60_000)
        consume(&harness, offset: 0, eventJSON(id: "e1", user: "u-1", seq: 1))
        #expect(harness.failedTokens.isEmpty, "a working token on push.failed-tokens would be deleted by every consumer: \(harness.failedTokens)")
        let result = harness.results.first { $0.token == device }
        #expect(result?.status == .unregistered)
        #expect(result?.unregisteredSince == Self.unregisteredAt)
        #expect(result?.registeredAgain == true)
        #expect(harness.engine.counters.deadReportsOfTokensRegisteredAgain[.apns] == 1)
        // Still the user's device: the next event goes to it.
        harness.deadTokens = []
        consume(&harness, offset: 1, eventJSON(id: "e2", user: "u-1", seq: 2))
        #expect(harness.results.filter { $0.eventID == "e2" }.map(\.status) == [.delivered])
        #expect(String(decoding: result.map { $0.encoded() } ?? [], as: UTF8.self).hasSuffix(#","unregistered_since":1795000000000,"registered_again":true}"#))
    }

    @Test("a 410 newer than the registration: the token is dead (failed-token record, registration removed)")
    func deadAfterItsRegistration() {
        var (harness, device) = harness(registeredAt: Self.unregisteredAt - 1)
        consume(&harness, offset: 0, eventJSON(id: "e1", user: "u-1", seq: 1))
        #expect(harness.failedTokens.map(\.token) == [device])
        #expect(harness.failedTokens.first?.since == Self.unregisteredAt)
        let result = harness.results.first { $0.token == device }
        #expect(result?.status == .unregistered && result?.unregisteredSince == Self.unregisteredAt && result?.registeredAgain == false)
        consume(&harness, offset: 1, eventJSON(id: "e2", user: "u-1", seq: 2))
        #expect(harness.results.filter { $0.eventID == "e2" }.map(\.status) == [.noDevices])
    }

    @Test("a feedback tuple older than the registration leaves the token alive; a newer one reports it dead")
    func feedbackTuples() {
        var harness = EngineHarness(seed: 3)
        let alive = token(21)
        let dead = token(22)
        _ = harness.engine.deviceRecord(key: slice(Array(alive.utf8)), value: slice(registrationValue(user: "u-1", at: 5_000)))
        _ = harness.engine.deviceRecord(key: slice(Array(dead.utf8)), value: slice(registrationValue(user: "u-1", at: 1_000)))
        harness.run(harness.engine.tokensReportedDead([DeadTokenReport(token: alive, since: 4_000), DeadTokenReport(token: dead, since: 4_000)],
                                                      reason: "Feedback"))
        #expect(harness.failedTokens.map(\.token) == [dead])
        #expect(harness.engine.registry.registration(for: alive) != nil)
        #expect(harness.engine.registry.registration(for: dead) == nil)
        #expect(harness.engine.counters.deadReportsOfTokensRegisteredAgain[.feedback] == 1)
    }

    @Test("a token listed twice in one event (in either case) is sent once and gets one result")
    func repeatedTokenInOneEvent() {
        var harness = EngineHarness(seed: 5)
        harness.run(harness.engine.assigned([events]))
        let device = token(31)
        let other = token(32)
        consume(&harness, offset: 0, eventJSON(id: "e1", user: "u-1", seq: 1, tokens: [device, other, device.uppercased(), device]))
        #expect(harness.sent.map(\.token).sorted() == [device, other].sorted())
        #expect(harness.results.map(\.token).compactMap { $0 }.sorted() == [device, other].sorted())
        #expect(harness.committed[events] == 1)
    }

    @Test("a repeated token across a graceful hand-over: the next owner publishes the rest, nothing twice, nothing missing", arguments: 0..<6)
    func repeatedTokenAcrossAHandOver(seed: Int) {
        var world = CrashWorld(seed: UInt64(seed))
        let slow = token(41)
        let quick = token(42)
        world.slowTokens = [slow]
        world.produce(Array(#"{"id":"e1","user":"u-1","seq":1,"tokens":["\#(quick)","\#(slow)","\#(quick)","\#(slow)"],"badge":{"increment":1},"apns":{"payload":{"aps":{"alert":"hi"}}}}"#.utf8))
        world.processWithoutTime()
        world.gracefulHandOver()
        world.slowTokens = []
        world.processAll()
        let results = world.results.compactMap(\.token)
        #expect(results.sorted() == [quick, slow].sorted(), "one result per device: \(results)")
        #expect(world.republishedResults.isEmpty)
    }
}
