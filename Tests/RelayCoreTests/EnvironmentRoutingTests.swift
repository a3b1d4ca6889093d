import APNsCore
import KafkaCore
import Testing

@testable import RelayCore

private func registration(user: String, environment: APNsEnvironment) -> [UInt8] {
    Array("{\"user\":\"\(user)\",\"topic\":\"com.example.app\",\"environment\":\"\(environment.rawValue)\",\"registered_at\":1}".utf8)
}

/// An alert event for `user`'s devices, or for `tokens`, with `apns.environment` when given.
private func alertJSON(id: String, user: String? = nil, tokens: [String]? = nil, environment: String? = nil) -> [UInt8] {
    var fields = ["\"id\":\"\(id)\""]
    if let user { fields.append("\"user\":\"\(user)\"") }
    if let tokens { fields.append("\"tokens\":[\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]") }
    let environmentField = environment.map { "\"environment\":\"\($0)\"," } ?? ""
    fields.append("\"apns\":{\(environmentField)\"payload\":{\"aps\":{\"alert\":\"hi\"}}}")
    return Array("{\(fields.joined(separator: ","))}".utf8)
}

@Suite("APNs environment routing in the relay engine")
struct EnvironmentRoutingTests {
    let events = TopicPartition("push.events", 0)

    /// Runs `values` through a harness with these registrations; returns it settled.
    private func run(_ values: [[UInt8]], registrations: [(token: String, user: String, environment: APNsEnvironment)] = [],
                     defaultEnvironment: APNsEnvironment = .production, deadTokens: Set<String> = []) -> EngineHarness {
        var harness = EngineHarness(configuration: .init(defaultEnvironment: defaultEnvironment), seed: 11)
        harness.deadTokens = deadTokens
        for device in registrations {
            _ = harness.engine.deviceRecord(key: slice(Array(device.token.utf8)), value: slice(registration(user: device.user, environment: device.environment)))
        }
        harness.run(harness.engine.assigned([events]))
        for (offset, value) in values.enumerated() {
            harness.run(harness.engine.consumed(KafkaMessage(topic: events.topic, partition: 0, offset: Int64(offset), key: nil, value: value), now: harness.now))
            harness.settle()
        }
        return harness
    }

    private func environments(_ harness: EngineHarness) -> [String: APNsEnvironment] {
        Dictionary(harness.sent.map { ($0.token, $0.environment) }, uniquingKeysWith: { first, _ in first })
    }

    @Test("a user's production and sandbox devices each get the notification in their registration's environment")
    func registeredDevices() {
        let harness = run([alertJSON(id: "a", user: "u-1")],
                          registrations: [(token(1), "u-1", .production), (token(2), "u-1", .sandbox)])
        #expect(harness.sent.count == 2)
        #expect(environments(harness) == [token(1): .production, token(2): .sandbox])
        #expect(harness.results.map(\.status) == [.delivered, .delivered])
    }

    @Test("explicit tokens go to the event's apns.environment, else to the configured default")
    func explicitTokens() {
        let harness = run([
            alertJSON(id: "s", tokens: [token(3)], environment: "sandbox"),
            alertJSON(id: "p", tokens: [token(4)], environment: "production"),
            alertJSON(id: "d", tokens: [token(5)]),
        ], defaultEnvironment: .sandbox)
        #expect(environments(harness) == [token(3): .sandbox, token(4): .production, token(5): .sandbox])
        let productionDefault = run([alertJSON(id: "d", tokens: [token(5)])])
        #expect(environments(productionDefault) == [token(5): .production])
    }

    @Test("a registration's environment wins over the event's apns.environment")
    func registrationWins() {
        let harness = run([
            alertJSON(id: "u", user: "u-1", environment: "production"),
            alertJSON(id: "t", tokens: [token(2)], environment: "production"),
        ], registrations: [(token(2), "u-1", .sandbox)])
        #expect(harness.sent.map(\.environment) == [.sandbox, .sandbox])
    }

    @Test("a sandbox token reported dead keeps environment sandbox in its failed-token record")
    func failedTokenKeepsEnvironment() {
        let harness = run([
            alertJSON(id: "r", user: "u-1"),
            alertJSON(id: "t", tokens: [token(9)], environment: "sandbox"),
        ], registrations: [(token(8), "u-1", .sandbox)], deadTokens: [token(8), token(9)])
        #expect(harness.failedTokens.map(\.token) == [token(8), token(9)])
        #expect(harness.failedTokens.map(\.environment) == [.sandbox, .sandbox])
    }

    @Test("an unknown apns.environment is a dead letter naming the field, with an invalid result")
    func invalidEnvironment() {
        let harness = run([alertJSON(id: "x", tokens: [token(1)], environment: "staging")])
        #expect(harness.sent.isEmpty)
        #expect(harness.deadLetters == ["apns.environment must be \"production\" or \"sandbox\""])
        #expect(harness.results.map(\.status) == [.invalid])
        #expect(harness.committed[events] == 1)
    }
}
