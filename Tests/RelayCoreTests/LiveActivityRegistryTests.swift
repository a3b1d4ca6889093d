import APNsCore
import Testing

@testable import RelayCore

@Suite("Live Activity tokens in the device registry")
struct LiveActivityRegistryTests {
    static let pushToStart = String(repeating: "5a", count: 40)
    static let update = String(repeating: "5b", count: 40)
    static let device = String(repeating: "ab", count: 32)

    static func value(_ extra: String, user: String = "u-1", at: Int64 = 10) -> ArraySlice<UInt8> {
        ArraySlice(#"{"user":"\#(user)","topic":"com.example.app","environment":"sandbox","registered_at":\#(at)\#(extra)}"#.utf8)
    }

    @Test("push-to-start tokens by user and attributes type, update tokens by activity; never among the user's devices")
    func lookups() {
        var registry = DeviceRegistry()
        #expect(registry.apply(key: Self.pushToStart, value: Self.value(#","push_to_start":"MatchAttributes""#)) == nil)
        #expect(registry.apply(key: Self.update, value: Self.value(#","activity_id":"match-7""#)) == nil)
        #expect(registry.apply(key: Self.device, value: Self.value("")) == nil)
        #expect(registry.count == 3)
        #expect(registry.devices(of: "u-1").map(\.token) == [Self.device])
        #expect(registry.liveActivityTokens(of: .pushToStart(attributesType: "MatchAttributes"), user: "u-1").map(\.token) == [Self.pushToStart])
        #expect(registry.liveActivityTokens(of: .pushToStart(attributesType: "MatchAttributes"), user: "u-2").isEmpty)
        #expect(registry.liveActivityTokens(of: .pushToStart(attributesType: "OtherAttributes"), user: "u-1").isEmpty)
        #expect(registry.liveActivityTokens(of: .activity(id: "match-7"), user: nil).map(\.token) == [Self.update])
        #expect(registry.registration(for: Self.update)?.environment == .sandbox)
        #expect(registry.registration(for: Self.update)?.liveActivity == .activity(id: "match-7"))
    }

    @Test("a token is one registration: re-registered as another kind it moves; a tombstone removes either")
    func oneRegistrationPerToken() {
        var registry = DeviceRegistry()
        registry.apply(key: Self.update, value: Self.value(#","activity_id":"match-7""#))
        registry.apply(key: Self.update, value: Self.value(#","activity_id":"match-8""#))
        #expect(registry.liveActivityTokens(of: .activity(id: "match-7"), user: nil).isEmpty)
        #expect(registry.liveActivityTokens(of: .activity(id: "match-8"), user: nil).count == 1)
        registry.apply(key: Self.update, value: Self.value(""))
        #expect(registry.liveActivityTokens(of: .activity(id: "match-8"), user: nil).isEmpty && registry.devices(of: "u-1").count == 1)
        registry.apply(key: Self.update, value: Self.value(#","push_to_start":"MatchAttributes""#))
        #expect(registry.devices(of: "u-1").isEmpty && registry.count == 1)
        registry.apply(key: Self.update.uppercased(), value: nil)
        #expect(registry.count == 0 && registry.registration(for: Self.update) == nil)
    }

    @Test("an ended activity's 410 removes its update token, unless registered again since; bad shapes are refused naming the key")
    func deadAndBadShapes() {
        var registry = DeviceRegistry()
        registry.apply(key: Self.update, value: Self.value(#","activity_id":"match-7""#, at: 100))
        #expect(registry.reportDead(token: Self.update, since: 50) == .registeredAgain(registry.registration(for: Self.update)!))
        #expect(registry.reportDead(token: Self.update, since: 200).removed?.liveActivity == .activity(id: "match-7"))
        #expect(registry.liveActivityTokens(of: .activity(id: "match-7"), user: nil).isEmpty)
        #expect(registry.apply(key: Self.update, value: Self.value(#","activity_id":"a","push_to_start":"T""#))?.field == "activity_id")
        #expect(registry.apply(key: Self.update, value: Self.value(#","activity_id":7"#))?.reason == "activity_id must be a non-empty string of at most 256 bytes")
        #expect(registry.count == 0)
    }
}
