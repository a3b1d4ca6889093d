import APNs
import APNsSimulator
import Foundation
import NIOCore
import Testing

/// The nghttp2 prototype (`APNsNGHTTP2ConnectionFactory`) driven by the supervisor against the in-process simulator:
/// the same answers, faults and limits as the swift-nio-http2 client meets in `SupervisorSimulatorTests`.
@Suite("Supervisor on the nghttp2 client against the simulator", .serialized)
struct NGHTTP2SupervisorTests {
    static func setup() -> Harness.Setup {
        var setup = Harness.Setup()
        setup.client = .nghttp2
        return setup
    }

    @Test("delivered, recorded in the device view with badge, apns-id and collapse id")
    func delivered() async throws {
        try await Harness.run(Self.setup()) { simulator, supervisor in
            let token = Harness.token(1)
            let notification = try Harness.notification(token: token, badge: 7, pushType: .background, expiration: 0)
            let outcome = await supervisor.send(notification)
            #expect(outcome.classification == .delivered)
            #expect(outcome.httpStatus == 200)
            #expect(outcome.attempts == 1)
            if case .response(let response) = outcome.lastAttempt { #expect(response.apnsID == notification.apnsID) }
            let shown = simulator.deliveries(for: token)
            #expect(shown.count == 1)
            #expect(shown.first?.badge == 7)
            #expect(shown.first?.apnsID == notification.apnsID.uuidString.lowercased())
            #expect(shown.first?.collapseID == "c-7")
            #expect(shown.first?.pushType == "background")
            #expect(shown.first?.priority == 5)
            #expect(shown.first?.payload == notification.payload)
        }
    }

    @Test("400 and 410 answers with their reasons: Unregistered with timestamp, BadDeviceToken, TopicDisallowed")
    func rejected() async throws {
        var setup = Self.setup()
        setup.simulator.deadTokens = [Harness.token(10): 1_700_000_000_123]
        setup.simulator.badTokens = [Harness.token(11)]
        setup.simulator.allowedTopics = [Harness.topic]
        try await Harness.run(setup) { simulator, supervisor in
            let dead = await supervisor.send(try Harness.notification(token: Harness.token(10)))
            #expect(dead.classification == .tokenDead)
            #expect(dead.httpStatus == 410)
            #expect(dead.reason == .unregistered)
            #expect(dead.timestamp == 1_700_000_000_123)
            #expect(dead.attempts == 1)

            let bad = await supervisor.send(try Harness.notification(token: Harness.token(11)))
            #expect(bad.classification == .tokenDead)
            #expect(bad.httpStatus == 400)
            #expect(bad.reason == .badDeviceToken)

            let wrongTopic = await supervisor.send(try Harness.notification(token: Harness.token(12), topic: "com.other.app"))
            #expect(wrongTopic.classification == .permanent)
            #expect(wrongTopic.httpStatus == 400)
            #expect(wrongTopic.reason == .topicDisallowed)
            #expect(wrongTopic.attempts == 1)
            #expect(simulator.deliveryCount == 0)
        }
    }

    @Test("429 and 503 are retried, then delivered")
    func retried() async throws {
        try await Harness.run(Self.setup()) { simulator, supervisor in
            let token = Harness.token(20)
            simulator.addFault(.status(429, reason: "TooManyRequests"), token: token)
            simulator.addFault(.status(503, reason: "ServiceUnavailable"), token: token)
            let outcome = await supervisor.send(try Harness.notification(token: token))
            #expect(outcome.classification == .delivered)
            #expect(outcome.attempts == 3)
            #expect(simulator.deliveries(for: token).count == 1)
        }
    }

    @Test("GOAWAY with 1,000 in flight: none lost, none recorded twice")
    func goAwayMidStream() async throws {
        try await Harness.run(Self.setup()) { simulator, supervisor in
            simulator.addFault(.goAway, skip: 300, count: 1)
            let outcomes = await withTaskGroup(of: APNsOutcome?.self) { group in
                for index in 0..<1000 {
                    let notification = try? Harness.notification(token: Harness.token(1000 + index))
                    group.addTask { if let notification { await supervisor.send(notification) } else { nil } }
                }
                var all: [APNsOutcome?] = []
                for await outcome in group { all.append(outcome) }
                return all
            }
            #expect(outcomes.count == 1000)
            #expect(outcomes.allSatisfy { $0?.classification == .delivered })
            #expect(simulator.deliveryCount == 1000)
            for index in 0..<1000 {
                #expect(simulator.deliveries(for: Harness.token(1000 + index)).count == 1, "token \(index)")
            }
            #expect(simulator.connectionsAccepted >= 3)
        }
    }

    @Test("abrupt TCP close with streams in flight: retried, none lost")
    func abruptClose() async throws {
        try await Harness.run(Self.setup()) { simulator, supervisor in
            simulator.addFault(.closeConnection, skip: 100, count: 1)
            let delivered = await Harness.deliveredCount(through: supervisor, (0..<500).map { index in
                try? Harness.notification(token: Harness.token(5000 + index))
            })
            #expect(delivered == 500)
            for index in 0..<500 {
                #expect(simulator.deliveries(for: Harness.token(5000 + index)).count >= 1)
            }
            #expect(simulator.connectionsAccepted >= 3)
        }
    }

    @Test("the server's SETTINGS_MAX_CONCURRENT_STREAMS is respected: 500 over one connection limited to 5, none refused")
    func concurrencyLimit() async throws {
        var setup = Self.setup()
        setup.connections = 1
        setup.simulator.maxConcurrentStreams = 5
        try await Harness.run(setup) { simulator, supervisor in
            let outcomes = await withTaskGroup(of: APNsOutcome?.self) { group in
                for index in 0..<500 {
                    let notification = try? Harness.notification(token: Harness.token(2000 + index))
                    group.addTask { if let notification { await supervisor.send(notification) } else { nil } }
                }
                var all: [APNsOutcome?] = []
                for await outcome in group { all.append(outcome) }
                return all
            }
            // A stream over the limit would have been refused (and retried) or cost the connection.
            #expect(outcomes.allSatisfy { $0?.classification == .delivered && $0?.attempts == 1 })
            #expect(simulator.requestCount == 500)
            #expect(simulator.connectionsAccepted == 1)
        }
    }

    @Test("SETTINGS_MAX_CONCURRENT_STREAMS dropping to 1 mid-connection reaches the supervisor")
    func settingsDropToOne() async throws {
        var setup = Self.setup()
        setup.connections = 1
        try await Harness.run(setup) { simulator, supervisor in
            simulator.addFault(.setMaxConcurrentStreams(1), skip: 50, count: 1)
            let delivered = await Harness.deliveredCount(through: supervisor, (0..<300).map { index in
                try? Harness.notification(token: Harness.token(3000 + index))
            })
            #expect(delivered == 300)
            #expect(simulator.deliveryCount == 300)
            #expect(supervisor.streamLimits == [1])
        }
    }

    @Test("a hung response hits the per-request deadline and is retried")
    func deadline() async throws {
        var setup = Self.setup()
        setup.requestTimeout = .milliseconds(300)
        try await Harness.run(setup) { simulator, supervisor in
            let token = Harness.token(40)
            simulator.addFault(.delay(.seconds(5)), token: token)
            let outcome = await supervisor.send(try Harness.notification(token: token))
            #expect(outcome.classification == .delivered)
            #expect(outcome.attempts == 2)
            #expect(simulator.deliveries(for: token).count == 1)
        }
    }

    @Test("PING timeout declares the connection dead; the notification goes out on a new one")
    func pingTimeout() async throws {
        var setup = Self.setup()
        setup.connections = 1
        setup.pingInterval = .milliseconds(100)
        setup.pingTimeout = .milliseconds(200)
        setup.requestTimeout = .seconds(60)
        try await Harness.run(setup) { simulator, supervisor in
            let token = Harness.token(50)
            simulator.addFault(.freeze, token: token)
            let outcome = await supervisor.send(try Harness.notification(token: token))
            #expect(outcome.classification == .delivered)
            #expect(outcome.attempts == 2)
            #expect(simulator.connectionsAccepted >= 2)
            #expect(simulator.deliveries(for: token).count == 1)
        }
    }

    @Test("4 MB of payloads over one connection (past the stream and connection windows): all delivered")
    func flowControl() async throws {
        var setup = Self.setup()
        setup.connections = 1
        setup.requestTimeout = .seconds(120)
        setup.pingTimeout = .seconds(120)
        try await Harness.run(setup) { simulator, supervisor in
            let filler = String(repeating: "x", count: 4_000)
            let delivered = await Harness.deliveredCount(through: supervisor, (0..<1_000).map { index in
                try? APNsNotification(
                    token: try APNsDeviceToken(hex: Harness.token(7_000 + index)), topic: Harness.topic,
                    payload: Array(#"{"aps":{"badge":1},"filler":"\#(filler)"}"#.utf8))
            })
            #expect(delivered == 1_000)
            #expect(simulator.deliveryCount == 1_000)
            #expect(simulator.connectionsAccepted == 1)
        }
    }

    @Test("20,000 notifications over 4 connections to 2,000 tokens: all delivered, per-token order kept")
    func manyInOrder() async throws {
        var setup = Self.setup()
        setup.connections = 4
        setup.requestTimeout = .seconds(60)
        try await Harness.run(setup) { simulator, supervisor in
            let tokens = 2_000
            let perToken = 10
            let failures = await withTaskGroup(of: Int.self) { group in
                for index in 0..<tokens {
                    group.addTask {
                        var failed = 0
                        let token = Harness.token(100_000 + index)
                        for badge in 1...perToken {
                            guard let notification = try? Harness.notification(token: token, badge: badge) else {
                                failed += 1
                                continue
                            }
                            if await supervisor.send(notification).classification != .delivered { failed += 1 }
                        }
                        return failed
                    }
                }
                var total = 0
                for await failed in group { total += failed }
                return total
            }
            #expect(failures == 0)
            var outOfOrder = 0
            for index in 0..<tokens {
                let badges = simulator.deliveries(for: Harness.token(100_000 + index)).compactMap(\.badge)
                if badges != Array(1...perToken) { outOfOrder += 1 }
            }
            #expect(outOfOrder == 0)
        }
    }
}
