import APNs
import APNsSimulator
import APNsTestSupport
import Crypto
import Foundation
import NIOCore
import Testing
import TestSupport

/// Most cases run on both HTTP/2 clients: swift-nio-http2 and nghttp2 (the relay's default).
@Suite("Supervisor against the simulator (TLS, HTTP/2, port 0)", .serialized)
struct APNsSupervisorTests {
    @Test("delivered, recorded in the device view with badge, apns-id and collapse id; the answer's apns-id read back", arguments: Harness.HTTP2Client.allCases)
    func delivered(client: Harness.HTTP2Client) async throws {
        try await Harness.run(Harness.Setup(client: client)) { simulator, supervisor in
            let token = Harness.token(1)
            let notification = try Harness.notification(token: token, badge: 7)
            let outcome = await supervisor.send(notification)
            #expect(outcome.classification == .delivered)
            #expect(outcome.httpStatus == 200)
            #expect(outcome.attempts == 1)
            guard case .response(let response) = outcome.lastAttempt else {
                Issue.record("no response: \(outcome.lastAttempt)")
                return
            }
            #expect(response.apnsID == notification.apnsID, "the apns-id header of the answer, parsed")
            let shown = simulator.deliveries(for: token)
            #expect(shown.count == 1)
            #expect(shown.first?.badge == 7)
            #expect(shown.first?.apnsID == notification.apnsID.uuidString.lowercased())
            #expect(shown.first?.collapseID == "c-7")
        }
    }

    @Test("a host playing an environment: the sandbox answers with apns-unique-id (kept on the outcome), each refuses the other's tokens with BadDeviceToken",
          arguments: Harness.HTTP2Client.allCases, [APNsEnvironment.production, .sandbox])
    func environments(client: Harness.HTTP2Client, environment: APNsEnvironment) async throws {
        var setup = Harness.Setup(client: client)
        setup.simulator.environment = environment
        setup.simulator.tokenEnvironments = [Harness.token(1): .production, Harness.token(2): .sandbox]
        try await Harness.run(setup) { simulator, supervisor in
            let own = environment == .production ? Harness.token(1) : Harness.token(2)
            let other = environment == .production ? Harness.token(2) : Harness.token(1)
            let delivered = await supervisor.send(try Harness.notification(token: own))
            #expect(delivered.classification == .delivered)
            let refused = await supervisor.send(try Harness.notification(token: other))
            #expect(refused.classification == .tokenDead && refused.isBadDeviceToken)
            let unlisted = await supervisor.send(try Harness.notification(token: Harness.token(3)))
            #expect(unlisted.classification == .delivered, "a token no list names belongs to whichever host is asked")
            if environment == .sandbox {
                #expect(delivered.uniqueID != nil && delivered.uniqueID == simulator.deliveries(for: own).first?.uniqueID)
                #expect(refused.uniqueID != nil && refused.uniqueID != delivered.uniqueID, "every answer has its own")
            } else {
                #expect(delivered.uniqueID == nil && refused.uniqueID == nil && simulator.deliveries(for: own).first?.uniqueID == nil)
            }
        }
    }

    @Test("token-dead reasons: 410 Unregistered with timestamp, 400 BadDeviceToken, 400 DeviceTokenNotForTopic", arguments: Harness.HTTP2Client.allCases)
    func tokenDead(client: Harness.HTTP2Client) async throws {
        var setup = Harness.Setup(client: client)
        setup.simulator.deadTokens = [Harness.token(10): 1_700_000_000_123]
        setup.simulator.badTokens = [Harness.token(11)]
        try await Harness.run(setup) { simulator, supervisor in
            simulator.addFault(.status(400, reason: "DeviceTokenNotForTopic"), token: Harness.token(12))
            simulator.markDead(Harness.token(13), timestamp: 42)

            let dead = await supervisor.send(try Harness.notification(token: Harness.token(10)))
            #expect(dead.classification == .tokenDead)
            #expect(dead.httpStatus == 410)
            #expect(dead.reason == .unregistered)
            #expect(dead.timestamp == 1_700_000_000_123)
            #expect(dead.attempts == 1)

            let bad = await supervisor.send(try Harness.notification(token: Harness.token(11)))
            #expect(bad.classification == .tokenDead)
            #expect(bad.reason == .badDeviceToken)

            let notForTopic = await supervisor.send(try Harness.notification(token: Harness.token(12)))
            #expect(notForTopic.classification == .tokenDead)
            #expect(notForTopic.reason == .deviceTokenNotForTopic)

            let markedDead = await supervisor.send(try Harness.notification(token: Harness.token(13)))
            #expect(markedDead.reason == .unregistered)
            #expect(markedDead.timestamp == 42)
            #expect(simulator.deliveryCount == 0)
        }
    }

    @Test("429 and 503 are retried, then delivered", arguments: Harness.HTTP2Client.allCases)
    func retried(client: Harness.HTTP2Client) async throws {
        try await Harness.run(Harness.Setup(client: client)) { simulator, supervisor in
            let token = Harness.token(20)
            simulator.addFault(.status(429, reason: "TooManyRequests"), token: token)
            simulator.addFault(.status(503, reason: "ServiceUnavailable"), token: token)
            simulator.addFault(.status(500, reason: "InternalServerError"), token: token)
            let outcome = await supervisor.send(try Harness.notification(token: token))
            #expect(outcome.classification == .delivered)
            #expect(outcome.attempts == 4)
            #expect(simulator.deliveries(for: token).count == 1)
        }
    }

    @Test("a stream reset with an error is the request's own failure: retries stop at max attempts", arguments: Harness.HTTP2Client.allCases)
    func givesUp(client: Harness.HTTP2Client) async throws {
        var setup = Harness.Setup(client: client)
        setup.maxAttempts = 3
        try await Harness.run(setup) { simulator, supervisor in
            let token = Harness.token(21)
            simulator.addFault(.resetStream, token: token, count: nil)
            let outcome = await supervisor.send(try Harness.notification(token: token))
            #expect(outcome.classification == .retryable)
            #expect(outcome.attempts == 3)
            guard case .failure(.streamError) = outcome.lastAttempt else {
                Issue.record("the last attempt was \(outcome.lastAttempt), not a stream error")
                return
            }
            #expect(simulator.deliveryCount == 0)
        }
    }

    @Test("APNs unreachable for a while: the notification waits, spends no attempt, and goes out once it is reachable")
    func waitsWhileUnreachable() async throws {
        let gate = ReachabilityGate()
        try await Harness.run(Harness.Setup(connections: 1, gate: gate)) { simulator, supervisor in
            let token = Harness.token(22)
            let notification = try Harness.notification(token: token)
            async let sent = supervisor.send(notification)
            await gate.refused(atLeast: 4)
            gate.open()
            let outcome = await sent
            #expect(outcome.classification == .delivered)
            #expect(outcome.attempts == 1)
            #expect(simulator.deliveries(for: token).count == 1)
            #expect(simulator.requestCount == 1)
        }
    }

    @Test("APNs unreachable past max wait: failed with noConnection after no attempt")
    func unreachablePastMaxWait() async throws {
        let gate = ReachabilityGate()
        try await Harness.run(Harness.Setup(connections: 1, maxRetry: .milliseconds(300), gate: gate)) { simulator, supervisor in
            let outcome = await supervisor.send(try Harness.notification(token: Harness.token(23)))
            #expect(outcome.classification == .retryable)
            #expect(outcome.lastAttempt == .failure(.noConnection))
            #expect(outcome.attempts == 0)
            #expect(gate.refusedConnects >= 1)
            #expect(simulator.requestCount == 0)
        }
    }

    @Test("apns-expiration passing while APNs is unreachable: expired, never sent, no attempt")
    func expiresWhileUnreachable() async throws {
        let gate = ReachabilityGate()
        try await Harness.run(Harness.Setup(connections: 1, gate: gate)) { simulator, supervisor in
            // Within the next second: the wait is bounded by it, not by max wait (300 s here).
            let expiration = Int64(Date().timeIntervalSince1970) + 1
            let outcome = await supervisor.send(try Harness.notification(token: Harness.token(24), expiration: expiration))
            #expect(outcome.lastAttempt == .failure(.expired))
            #expect(outcome.attempts == 0)
            gate.open()
            #expect(await supervisor.send(try Harness.notification(token: Harness.token(25))).classification == .delivered)
            #expect(simulator.deliveries(for: Harness.token(24)).isEmpty)
            #expect(simulator.requestCount == 1)
        }
    }

    @Test("a notification whose apns-expiration has passed is not sent")
    func expiredNotSent() async throws {
        try await Harness.run(Harness.Setup()) { simulator, supervisor in
            let outcome = await supervisor.send(try Harness.notification(token: Harness.token(26), expiration: 1))
            #expect(outcome.lastAttempt == .failure(.expired))
            #expect(outcome.attempts == 0)
            // 0 means "deliver once, do not store", not a date long past.
            #expect(await supervisor.send(try Harness.notification(token: Harness.token(27), expiration: 0)).classification == .delivered)
            #expect(simulator.deliveries(for: Harness.token(26)).isEmpty)
            #expect(simulator.requestCount == 1)
        }
    }

    @Test("a send cancelled while it sleeps before a retry returns cancelled at once; nothing is sent after")
    func cancelledInBackoff() async throws {
        let (backoffs, backoffStarted) = AsyncStream.makeStream(of: TimeAmount.self)
        var setup = Harness.Setup()
        // A backoff (3.5 to 7 s with jitter) that no other wait here uses: reconnect timers are at most 500 ms, the
        // wait-deadline timer is max wait (300 s). So the sleep below can tell it apart.
        setup.retryBackoff = Backoff(base: .seconds(7), cap: .seconds(7))
        setup.sleep = { amount in
            if amount >= .seconds(1) && amount <= .seconds(7) { backoffStarted.yield(amount) }
            try? await Task.sleep(nanoseconds: UInt64(max(0, amount.nanoseconds)))
        }
        try await Harness.run(setup) { simulator, supervisor in
            let token = Harness.token(28)
            simulator.addFault(.status(503, reason: "ServiceUnavailable"), token: token, count: nil)
            let notification = try Harness.notification(token: token)
            let outcome = await withTaskGroup(of: APNsOutcome.self) { group in
                group.addTask { await supervisor.send(notification) }
                var started = backoffs.makeAsyncIterator()
                _ = await started.next()  // answered 503; now sleeping before the retry
                group.cancelAll()
                return await group.next()!
            }
            #expect(outcome.lastAttempt == .failure(.cancelled))
            #expect(outcome.attempts == 1)
            #expect(simulator.requestCount == 1)
        }
    }

    @Test("a send cancelled while it waits for a connection is never written")
    func cancelledWhileWaiting() async throws {
        let gate = ReachabilityGate()
        // On demand: the first connect is the waiting notification's own, so it is queued before the refusals.
        try await Harness.run(Harness.Setup(connections: 1, connectsOnDemand: true, gate: gate)) { simulator, supervisor in
            let waiting = try Harness.notification(token: Harness.token(29))
            let outcome = await withTaskGroup(of: APNsOutcome.self) { group in
                group.addTask { await supervisor.send(waiting) }
                await gate.refused(atLeast: 2)
                group.cancelAll()
                gate.open()
                return await group.next()!
            }
            #expect(outcome.lastAttempt == .failure(.cancelled))
            #expect(outcome.attempts == 0)
            // The connection that opens now carries the next notification only.
            #expect(await supervisor.send(try Harness.notification(token: Harness.token(30))).classification == .delivered)
            #expect(simulator.deliveries(for: Harness.token(29)).isEmpty)
            #expect(simulator.requestCount == 1)
        }
    }

    @Test("permanent rejections are not retried; JWT signed by another key is refused", arguments: Harness.HTTP2Client.allCases)
    func permanent(client: Harness.HTTP2Client) async throws {
        var setup = Harness.Setup(client: client)
        setup.simulator.allowedTopics = ["com.example.app"]
        try await Harness.run(setup) { simulator, supervisor in
            let wrongTopic = await supervisor.send(try Harness.notification(token: Harness.token(30), topic: "com.other.app"))
            #expect(wrongTopic.classification == .permanent)
            #expect(wrongTopic.reason == .topicDisallowed)
            #expect(wrongTopic.attempts == 1)
        }
        // The simulator verifies with a different public key than the one the relay signs with.
        var mismatched = Harness.Setup(client: client)
        mismatched.verifyJWT = false
        mismatched.simulator.jwtPublicKeyPEM = P256.Signing.PrivateKey().publicKey.pemRepresentation
        try await Harness.run(mismatched) { simulator, supervisor in
            let outcome = await supervisor.send(try Harness.notification(token: Harness.token(31)))
            #expect(outcome.classification == .permanent)
            #expect(outcome.httpStatus == 403)
            #expect(outcome.reason == .invalidProviderToken)
            #expect(simulator.deliveryCount == 0)
        }
    }

    @Test("GOAWAY with 1,000 in flight: none lost, none recorded twice", arguments: Harness.HTTP2Client.allCases)
    func goAwayMidStream(client: Harness.HTTP2Client) async throws {
        var setup = Harness.Setup(client: client)
        setup.connections = 2
        try await Harness.run(setup) { simulator, supervisor in
            simulator.addFault(.goAway, skip: 300, count: 1)
            let results = await withTaskGroup(of: (Int, APNsOutcome?).self) { group in
                for index in 0..<1000 {
                    let notification = try? Harness.notification(token: Harness.token(1000 + index))
                    group.addTask {
                        guard let notification else { return (index, nil) }
                        return (index, await supervisor.send(notification))
                    }
                }
                var all: [Int: APNsOutcome] = [:]
                for await (index, outcome) in group { all[index] = outcome }
                return all
            }
            #expect(results.count == 1000)
            #expect(results.values.allSatisfy { $0.classification == .delivered })
            #expect(simulator.deliveryCount == 1000)
            for index in 0..<1000 {
                let shown = simulator.deliveries(for: Harness.token(1000 + index))
                #expect(shown.count == 1, "token \(index): sequences \(shown.map(\.sequence)), outcome \(String(describing: results[index]))")
            }
            // The slot that got the GOAWAY connects again. The other connection may have carried the rest before
            // the new one is up (more likely as the client gets faster), so wait for it, within a bound.
            _ = await waitUntil(timeout: .seconds(10), every: .milliseconds(50)) { simulator.connectionsAccepted >= 3 }
            #expect(simulator.connectionsAccepted >= 3)
        }
    }

    @Test("flow control: 20 MB of payloads over one connection, more than every receive window, all delivered", arguments: Harness.HTTP2Client.allCases)
    func flowControl(client: Harness.HTTP2Client) async throws {
        var setup = Harness.Setup(client: client)
        setup.connections = 1
        // What this checks is credit, not time: a debug build on a loaded machine can take longer than the default
        // deadline or PING timeout to move 20 MB, and a retry then shows a notification twice.
        setup.requestTimeout = .seconds(120)
        setup.pingTimeout = .seconds(120)
        try await Harness.run(setup) { simulator, supervisor in
            // 5,000 x 4 KB: beyond the simulator's 16 MiB connection window and 16x its 1 MiB stream window, so
            // the frame-level server must hand credit back as it consumes DATA, or the client stalls.
            let filler = String(repeating: "x", count: 4_000)
            let delivered = await Harness.deliveredCount(through: supervisor, (0..<5_000).map { index in
                try? APNsNotification(
                    token: try APNsDeviceToken(hex: Harness.token(7_000 + index)), topic: Harness.topic,
                    payload: Array(#"{"aps":{"badge":1},"filler":"\#(filler)"}"#.utf8))
            })
            #expect(delivered == 5_000)
            #expect(simulator.deliveryCount == 5_000)
            #expect(simulator.connectionsAccepted == 1)
        }
    }

    @Test("SETTINGS_MAX_CONCURRENT_STREAMS dropping to 1 mid-connection", arguments: Harness.HTTP2Client.allCases)
    func settingsDropToOne(client: Harness.HTTP2Client) async throws {
        var setup = Harness.Setup(client: client)
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

    @Test("abrupt TCP close with streams in flight: everything is still delivered", arguments: Harness.HTTP2Client.allCases)
    func abruptClose(client: Harness.HTTP2Client) async throws {
        try await Harness.run(Harness.Setup(client: client)) { simulator, supervisor in
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

    @Test("a hung response hits the per-request deadline and is retried", arguments: Harness.HTTP2Client.allCases)
    func deadline(client: Harness.HTTP2Client) async throws {
        var setup = Harness.Setup(client: client)
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

    @Test("the server's SETTINGS_MAX_CONCURRENT_STREAMS is respected: 500 at once over one connection limited to 5, none refused", arguments: Harness.HTTP2Client.allCases)
    func concurrencyLimit(client: Harness.HTTP2Client) async throws {
        var setup = Harness.Setup(client: client)
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

    @Test("PING timeout declares the connection dead; the notification goes out on a new one", arguments: Harness.HTTP2Client.allCases)
    func pingTimeout(client: Harness.HTTP2Client) async throws {
        var setup = Harness.Setup(client: client)
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

    // 4,000 senders at once keep every connection's stream limit full; the volume is the benchmark's
    // (apns-bench), since a debug build sends a few hundred notifications a second.
    @Test("20,000 notifications from 4,000 concurrent senders over 4 connections to 4,000 tokens: all delivered, per-token order kept", arguments: Harness.HTTP2Client.allCases)
    func manySendersOverFewConnections(client: Harness.HTTP2Client) async throws {
        var setup = Harness.Setup(client: client)
        setup.connections = 4
        setup.maxQueued = 25_000
        setup.requestTimeout = .seconds(60)
        setup.simulator.threads = 2
        try await Harness.run(setup) { simulator, supervisor in
            let tokens = 4_000
            let perToken = 5
            let workers = 4_000
            let failures = await withTaskGroup(of: Int.self) { group in
                // Each worker owns tokens worker, worker + workers, ...; a token's notifications go one at a time.
                for worker in 0..<workers {
                    group.addTask {
                        var failed = 0
                        for index in stride(from: worker, to: tokens, by: workers) {
                            let token = Harness.token(100_000 + index)
                            for badge in 1...perToken {
                                guard let notification = try? Harness.notification(token: token, badge: badge) else {
                                    failed += 1
                                    continue
                                }
                                if await supervisor.send(notification).classification != .delivered { failed += 1 }
                            }
                        }
                        return failed
                    }
                }
                var total = 0
                for await failed in group { total += failed }
                return total
            }
            #expect(failures == 0)
            // At-least-once: a resend after a lost response may repeat the latest notification, never an older one.
            #expect(simulator.deliveryCount >= tokens * perToken)
            var outOfOrder = 0
            for index in 0..<tokens {
                var badges = simulator.deliveries(for: Harness.token(100_000 + index)).compactMap(\.badge)
                badges = badges.enumerated().filter { $0.offset == 0 || badges[$0.offset - 1] != $0.element }.map(\.element)
                if badges != Array(1...perToken) { outOfOrder += 1 }
            }
            #expect(outOfOrder == 0)
        }
    }
}
