import APNsCore
import Testing
@testable import RelayCore

// The registry's compact layout (token keys, slab, slot indexes, topic table) and, as the model it
// must agree with, a dictionary-based reference registry.

private func registration(_ token: String, user: String, topic: String = "com.example.app", environment: APNsEnvironment = .production,
                          at registeredAt: Int64 = 1) -> DeviceRegistration {
    DeviceRegistration(token: token, user: user, topic: topic, environment: environment, registeredAt: registeredAt)
}

@Suite struct CompactRegistryTests {
    @Test func anEntryStaysSmall() {
        // The memory target (docs/BENCHMARKS.md): this and the two indexes, under 100 bytes a device.
        #expect(DeviceRegistry.entryStride <= 72)
    }

    @Test func aUsersDevicesComeOrderedByTokenWhateverTheOrderTheyRegisteredIn() {
        var random = SeededGenerator(seed: 7)
        let tokens = (0..<6).map { _ in randomHex(bytes: 32, using: &random) } + [randomHex(bytes: 40, using: &random)]
        var registry = DeviceRegistry()
        for (index, token) in tokens.shuffled(using: &random).enumerated() {
            registry.register(registration(token, user: "u-1", at: Int64(index)))
            registry.register(registration(randomHex(bytes: 32, using: &random), user: "u-\(index + 2)"))
        }
        #expect(registry.devices(of: "u-1").map(\.token) == tokens.sorted())
        #expect(registry.devices(of: "u-1").allSatisfy { $0.user == "u-1" })
        #expect(registry.devices(of: "u-99").isEmpty)
        #expect(registry.count == 14)
    }

    @Test func aTokenMovesToAnotherUserFromAnyPlaceInItsList() {
        let tokens = [token(1), token(2), token(3)]
        for moved in tokens {
            var registry = DeviceRegistry()
            for token in tokens { registry.register(registration(token, user: "u-1", topic: "com.example.one")) }
            registry.register(registration(token(9), user: "u-2"))
            registry.register(registration(moved, user: "u-2", topic: "com.example.two", environment: .sandbox, at: 5))
            #expect(registry.devices(of: "u-1").map(\.token) == tokens.filter { $0 != moved })
            #expect(registry.devices(of: "u-2").map(\.token) == [moved, token(9)].sorted())
            #expect(registry.registration(for: moved) == registration(moved, user: "u-2", topic: "com.example.two", environment: .sandbox, at: 5))
            #expect(registry.count == 4)
            #expect(registry.topicCount == 3)
        }
    }

    @Test func removedEntriesAreReusedAndTheirTopicsDropped() {
        var registry = DeviceRegistry()
        for index in 0..<100 { registry.register(registration(token(index), user: "u-\(index % 10)", topic: "t-\(index % 3)")) }
        #expect(registry.slotCount == 100)
        for index in stride(from: 0, to: 100, by: 3) { #expect(registry.remove(token: token(index))?.topic == "t-0") }
        #expect(registry.count == 66)
        #expect(registry.topicCount == 2)
        #expect(registry.devices(of: "u-0").map(\.token) == [token(10), token(20), token(40), token(50), token(70), token(80)])
        for index in 100..<134 { registry.register(registration(token(index), user: "u-new", topic: "t-new")) }
        #expect(registry.slotCount == 100)
        #expect(registry.topicCount == 3)
        #expect(registry.devices(of: "u-new").count == 34)
        registry.register(registration(token(500), user: "u-new"))
        #expect(registry.slotCount == 101)
        // Removing everything empties the indexes and the topic table.
        for index in 0..<134 { registry.remove(token: token(index)) }
        registry.remove(token: token(500))
        #expect(registry.count == 0)
        #expect(registry.topicCount == 0)
        #expect(registry.devices(of: "u-new").isEmpty)
        #expect(registry == DeviceRegistry())
    }

    @Test func equalityIsAboutTheRegistrationsNotTheirOrderOrSlots() {
        var random = SeededGenerator(seed: 11)
        let registrations = (0..<200).map { (index: Int) -> DeviceRegistration in
            let environment: APNsEnvironment = index % 2 == 0 ? .production : .sandbox
            return registration(randomHex(bytes: index % 7 == 0 ? 48 : 32, using: &random), user: "u-\(index % 17)", topic: "t-\(index % 4)",
                                environment: environment, at: Int64(index))
        }
        var first = DeviceRegistry()
        for registration in registrations { first.register(registration) }
        var second = DeviceRegistry()
        // Other slots and topic ids: churn first, then the same registrations in another order.
        for index in 0..<50 { second.register(registration(token(index), user: "churn", topic: "t-\(50 - index)")) }
        for registration in registrations.shuffled(using: &random) { second.register(registration) }
        for index in 0..<50 { second.remove(token: token(index)) }
        #expect(first == second)
        #expect(second == first)

        var changed = registrations[3]
        for change in 0..<5 {
            var other = second
            switch change {
            case 0: changed.registeredAt += 1
            case 1: changed.topic = "t-other"
            case 2: changed.environment = changed.environment == APNsEnvironment.production ? .sandbox : .production
            case 3: changed.user = "u-other"
            default: other.remove(token: changed.token)
            }
            if change < 4 { other.register(changed) }
            #expect(first != other, "change \(change)")
            changed = registrations[3]
        }
        // Users compare as bytes: "café" composed and decomposed are two users.
        var composed = DeviceRegistry()
        composed.register(registration(token(1), user: "caf\u{E9}"))
        var decomposed = DeviceRegistry()
        decomposed.register(registration(token(1), user: "cafe\u{301}"))
        #expect(composed != decomposed)
        #expect(composed.devices(of: "cafe\u{301}").isEmpty)
    }
}

/// The dictionary-based registry the compact one replaced, kept as the model: the same operations
/// must give the same answers.
private struct ReferenceRegistry {
    var byToken: [String: DeviceRegistration] = [:]
    var tokensByUser: [UserKey: Set<String>] = [:]

    var count: Int { byToken.count }

    mutating func apply(key token: String, value: ArraySlice<UInt8>?) -> EventRejection? {
        guard let value else {
            remove(token: token.lowercased())
            return nil
        }
        switch Result(catching: { () throws(EventRejection) in try DeviceRegistration.decode(token: token, value: value) }) {
        case .success(let registration): register(registration); return nil
        case .failure(let rejection): return rejection
        }
    }

    mutating func register(_ registration: DeviceRegistration) {
        remove(token: registration.token)
        byToken[registration.token] = registration
        tokensByUser[UserKey(registration.user), default: []].insert(registration.token)
    }

    @discardableResult
    mutating func remove(token: String) -> DeviceRegistration? {
        guard let old = byToken.removeValue(forKey: token) else { return nil }
        let user = UserKey(old.user)
        tokensByUser[user]?.remove(token)
        if tokensByUser[user]?.isEmpty == true { tokensByUser[user] = nil }
        return old
    }

    func registration(for token: String) -> DeviceRegistration? { byToken[token.lowercased()] }

    func devices(of user: String) -> [DeviceRegistration] {
        guard let tokens = tokensByUser[UserKey(user)] else { return [] }
        return tokens.sorted().compactMap { byToken[$0] }
    }

    mutating func reportDead(token: String, since: Int64) -> DeadTokenVerdict {
        let key = token.lowercased()
        guard let registration = byToken[key] else { return .unregistered }
        guard registration.registeredAt < since else { return .registeredAgain(registration) }
        return remove(token: key).map(DeadTokenVerdict.removed) ?? .unregistered
    }
}

/// The same verdict about the same registration, compared as bytes.
private func sameBytes(_ lhs: DeadTokenVerdict, _ rhs: DeadTokenVerdict) -> Bool {
    switch (lhs, rhs) {
    case (.unregistered, .unregistered): true
    case (.removed(let left), .removed(let right)), (.registeredAgain(let left), .registeredAgain(let right)): sameBytes(left, right)
    default: false
    }
}

/// Field by field, strings as bytes: `DeviceRegistration`'s own `==` would call "é" and "e\u{301}" equal.
private func sameBytes(_ lhs: DeviceRegistration?, _ rhs: DeviceRegistration?) -> Bool {
    guard let lhs, let rhs else { return lhs == nil && rhs == nil }
    return lhs.token.utf8.elementsEqual(rhs.token.utf8) && lhs.user.utf8.elementsEqual(rhs.user.utf8)
        && lhs.topic.utf8.elementsEqual(rhs.topic.utf8) && lhs.environment == rhs.environment && lhs.registeredAt == rhs.registeredAt
}

@Suite struct CompactRegistryDifferentialTests {
    @Test(arguments: 0..<6)
    func agreesWithTheDictionaryRegistry(seed: Int) {
        var random = SeededGenerator(seed: UInt64(seed) &+ 9_001)
        // Few tokens and users, so tokens move, users gain and lose devices, slots are reused.
        let hexTokens = (0..<24).map { index in randomHex(bytes: index % 6 == 5 ? 33 + index : 32, using: &random) }
        // Directly registered strings are keys as written: upper case, not hex, canonically equal.
        let odd = ["caf\u{E9}", "cafe\u{301}", "not-a-token", String(repeating: "G", count: 64)]
        let users = (0..<6).map { "u-\($0)" } + ["caf\u{E9}", "cafe\u{301}", "a-user-id-longer-than-fifteen-bytes", ""]
        let topics = ["com.example.app", "com.example.other", "t\u{E9}", "te\u{301}"]
        func anyToken() -> String {
            if Int.random(in: 0..<10, using: &random) == 0 { return odd.randomElement(using: &random)! }
            let token = hexTokens.randomElement(using: &random)!
            return Int.random(in: 0..<4, using: &random) == 0 ? token.uppercased() : token
        }
        func anyRegistration() -> DeviceRegistration {
            registration(anyToken(), user: users.randomElement(using: &random)!, topic: topics.randomElement(using: &random)!,
                         environment: Bool.random(using: &random) ? .production : .sandbox, at: Int64.random(in: 0..<50, using: &random))
        }

        var registry = DeviceRegistry()
        var model = ReferenceRegistry()
        var peak = 0
        for step in 0..<3_000 {
            let context: Comment = "seed \(seed), step \(step)"
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<3:
                let registration = anyRegistration()
                registry.register(registration)
                model.register(registration)
            case 3..<5:
                let key = anyToken()
                let value: [UInt8]
                if Int.random(in: 0..<8, using: &random) == 0 {
                    value = Array(#"{"user":"u","topic":"t","environment":"staging","registered_at":1}"#.utf8)
                } else {
                    let made = anyRegistration()
                    value = Array(#"{"user":"\#(made.user)","topic":"\#(made.topic)","environment":"\#(made.environment.rawValue)","registered_at":\#(made.registeredAt)}"#.utf8)
                }
                #expect(registry.apply(key: key, value: slice(value)) == model.apply(key: key, value: slice(value)), context)
            case 5:
                let key = anyToken()
                #expect(registry.apply(key: key, value: nil) == model.apply(key: key, value: nil), context)
            case 6..<8:
                let key = anyToken()
                #expect(sameBytes(registry.remove(token: key), model.remove(token: key)), context)
            default:
                let key = anyToken()
                let since = Int64.random(in: 0..<60, using: &random)
                #expect(sameBytes(registry.reportDead(token: key, since: since), model.reportDead(token: key, since: since)), context)
            }
            peak = max(peak, model.count)

            #expect(registry.count == model.count, context)
            for token in hexTokens + hexTokens.map({ $0.uppercased() }) + odd {
                #expect(sameBytes(registry.registration(for: token), model.registration(for: token)), context)
            }
            for user in users {
                let got = registry.devices(of: user)
                let expected = model.devices(of: user)
                #expect(got.count == expected.count && zip(got, expected).allSatisfy { sameBytes($0, $1) }, context)
            }
            if step % 300 == 299 {
                var rebuilt = DeviceRegistry()
                for registration in model.byToken.values.shuffled(using: &random) { rebuilt.register(registration) }
                #expect(rebuilt == registry, context)
                if let some = model.byToken.values.first {
                    var changed = some
                    changed.registeredAt += 100
                    rebuilt.register(changed)
                    #expect(rebuilt != registry, context)
                }
            }
        }
        // Removed entries are reused before the slab grows; topics no one uses are dropped.
        #expect(registry.slotCount == peak)
        #expect(registry.topicCount == Set(model.byToken.values.map { UserKey($0.topic) }).count)
    }
}

private func registrationJSON(user: String, at: Int64, environment: String = "production") -> [UInt8] {
    Array("{\"user\":\"\(user)\",\"topic\":\"com.example.app\",\"environment\":\"\(environment)\",\"registered_at\":\(at)}".utf8)
}

@Suite("The device registry: push.devices records applied")
struct DeviceRegistryRecordTests {
    @Test func registersMovesAndRemoves() {
        var registry = DeviceRegistry()
        #expect(registry.apply(key: token(1).uppercased(), value: slice(registrationJSON(user: "u-42", at: 100))) == nil)
        #expect(registry.apply(key: token(2), value: slice(registrationJSON(user: "u-42", at: 100, environment: "sandbox"))) == nil)
        #expect(registry.devices(of: "u-42").map(\.token) == [token(1), token(2)])
        #expect(registry.registration(for: token(2))?.environment == .sandbox)
        registry.apply(key: token(1), value: slice(registrationJSON(user: "u-7", at: 200)))  // the device changed hands
        #expect(registry.devices(of: "u-42").map(\.token) == [token(2)])
        #expect(registry.devices(of: "u-7").map(\.user) == ["u-7"])
        registry.apply(key: token(2), value: nil)
        #expect(registry.devices(of: "u-42").isEmpty)
        #expect(registry.count == 1)
    }

    @Test func unreadableRegistrationsAreRefusedByName() {
        var registry = DeviceRegistry()
        #expect(registry.apply(key: "xyz", value: slice(registrationJSON(user: "u", at: 1)))?.reason == "key must be 64 to 200 hex characters, got 3")
        #expect(registry.apply(key: token(1), value: slice(registrationJSON(user: "u", at: 1, environment: "prod")))?.reason
            == "environment must be \"production\" or \"sandbox\"")
        #expect(registry.apply(key: token(1), value: slice(Array(#"{"user":"u","topic":"t","environment":"sandbox","registered_at":"1"}"#.utf8)))?.reason
            == "registered_at must be an integer >= 0 (epoch milliseconds)")
        #expect(registry.apply(key: token(1), value: slice(Array(#"{"topic":"t","environment":"sandbox","registered_at":1}"#.utf8)))?.reason
            == "user must be a non-empty string")
        #expect(registry.count == 0)
    }

    /// A dead-token report removes a registration only if it was made before the report's `since`; a token
    /// registered again at or after it is alive.
    @Test func deadTokenRespectsSince() {
        var registry = DeviceRegistry()
        registry.apply(key: token(1), value: slice(registrationJSON(user: "u", at: 1_000)))
        let registered = registry.registration(for: token(1))!
        #expect(registry.reportDead(token: token(1), since: 1_000) == .registeredAgain(registered))  // re-registered at that moment: stays
        #expect(registry.reportDead(token: token(1), since: 999) == .registeredAgain(registered))
        #expect(registry.devices(of: "u").count == 1)
        #expect(registry.reportDead(token: token(1), since: 1_001) == .removed(registered))
        #expect(registry.devices(of: "u").isEmpty)
        #expect(registry.reportDead(token: token(3), since: 5) == .unregistered)  // unknown token
        #expect(!DeadTokenVerdict.registeredAgain(registered).isDead && DeadTokenVerdict.unregistered.isDead)
    }
}
