import APNs
import APNsSimulator
import Foundation
import Kafka
import NIOCore
import Testing

@testable import Relay

/// Two simulators stand for Apple's production and sandbox hosts. Like Apple, each refuses the other
/// environment's device tokens with 400 BadDeviceToken, so only correct routing delivers.
private struct TwoEnvironments {
    let production: SimulatedAPNs
    let sandbox: SimulatedAPNs
    let sender: APNsSupervisorSender

    /// `sandboxClockAhead` sets the sandbox supervisor's monotonic clock that far ahead of the production one's: a
    /// send handed over to production and resent in the sandbox then arrives there that much later, without a wait.
    static func start(productionTokens: [String], sandboxTokens: [String], retry: APNsRetryPolicy = APNsRetryPolicy(maxAttempts: 5),
                      sandboxClockAhead: TimeAmount = .zero) async throws -> TwoEnvironments {
        let production = try await SimulatedAPNs.start()
        let sandbox = try await SimulatedAPNs.start()
        for token in sandboxTokens { production.simulator.markBad(token) }
        for token in productionTokens { sandbox.simulator.markBad(token) }
        // As `apns-relay run` does for the environment that is not the configured default: no connection until needed.
        let sender = APNsSupervisorSender(
            production: try production.makeSupervisor(retry: retry),
            sandbox: try sandbox.makeSupervisor(connectsOnDemand: true, retry: retry, now: { .now() + sandboxClockAhead }))
        return TwoEnvironments(production: production, sandbox: sandbox, sender: sender)
    }

    /// Runs both supervisors around `body`, then drains them and stops the simulators.
    func run(_ body: () async throws -> Void) async throws {
        let (production, sandbox) = (sender.pools[0].production!, sender.pools[0].sandbox!)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await production.run() }
            group.addTask { await sandbox.run() }
            do {
                try await body()
            } catch {
                await shutdown()
                throw error
            }
            await shutdown()
            try await group.waitForAll()
        }
        await self.production.simulator.shutdown()
        await self.sandbox.simulator.shutdown()
    }

    private func shutdown() async {
        await sender.pools[0].production?.shutdown(gracePeriod: .seconds(2))
        await sender.pools[0].sandbox?.shutdown(gracePeriod: .seconds(2))
    }
}

private func pending(_ token: String, eventID: String, environment: APNsEnvironment) throws -> PendingNotification {
    let event = try PushEventDecoder().decode(Array("{\"id\":\"\(eventID)\",\"tokens\":[\"\(token)\"],\"apns\":{\"payload\":{\"aps\":{\"alert\":\"hi\"}}}}".utf8))
    let notification = try event.render(for: token, badge: nil, defaultTopic: "com.example.app")
    return PendingNotification(record: RecordReference(TopicPartition("push.events", 0), 0), eventID: eventID, user: nil, seq: nil,
                               badge: nil, token: token, notification: notification, environment: environment, consumedAt: 0)
}

@Suite("APNs environments end to end: two simulators as production and sandbox hosts", .serialized)
struct EnvironmentEndToEndTests {
    @Test("the sender sends each notification to its environment's host; the sandbox pool connects only when first needed")
    func senderRoutes() async throws {
        let (productionToken, sandboxToken) = (token(1), token(2))
        let apns = try await TwoEnvironments.start(productionTokens: [productionToken], sandboxTokens: [sandboxToken])
        try await apns.run {
            let first = await sendThroughInbox(apns.sender, try pending(productionToken, eventID: "p", environment: .production))
            #expect(first.deliveryStatus == .delivered)
            #expect(apns.sandbox.simulator.connectionsAccepted == 0, "no sandbox connection before a sandbox notification")
            let second = await sendThroughInbox(apns.sender, try pending(sandboxToken, eventID: "s", environment: .sandbox))
            #expect(second.deliveryStatus == .delivered, "\(second)")
            #expect(second.tokenDeadSince(now: 0) == nil)
            #expect(apns.sandbox.simulator.connectionsAccepted > 0)
        }
        #expect(apns.production.simulator.deliveries(for: productionToken).count == 1)
        #expect(apns.sandbox.simulator.deliveries(for: sandboxToken).count == 1)
        #expect(apns.production.simulator.deliveries(for: sandboxToken).isEmpty)
    }

    @Test("the other-environment resend keeps the first send's retry deadline: relay.max_retry_s counts from the hand-over")
    func otherEnvironmentResendKeepsTheDeadline() async throws {
        let sandboxToken = token(2)
        // The resend reaches the sandbox host 10 s after the notification was handed over (its clock is ahead), and
        // the sandbox answers 503 to everything: past max_retry_s (3 s), its first 503 is final.
        let apns = try await TwoEnvironments.start(productionTokens: [], sandboxTokens: [sandboxToken],
                                                   retry: APNsRetryPolicy(maxAttempts: 5, maxRetryDuration: .seconds(3)),
                                                   sandboxClockAhead: .seconds(10))
        apns.sandbox.simulator.addFault(.status(503, reason: "ServiceUnavailable"), count: nil)
        try await apns.run {
            let outcome = await sendThroughInbox(apns.sender, try pending(sandboxToken, eventID: "t", environment: .production))
            #expect(outcome.deliveryStatus == .failed, "\(outcome)")
            #expect(outcome.attempts <= 2, "the resend started a retry clock of its own: \(outcome)")
        }
        #expect(apns.sandbox.simulator.requestCount <= 2, "one 503 each past the deadline")
    }

    @Test("the sender's stream capacity is its usable connections' streams together, both environments' pools, as they connect")
    func streamCapacity() async throws {
        let (productionToken, sandboxToken) = (token(1), token(2))
        let apns = try await TwoEnvironments.start(productionTokens: [productionToken], sandboxTokens: [sandboxToken])
        /// Waits (at most 10 s) until the capacity is `expected`; returns what it last was.
        func capacity(reaching expected: Int?) async throws -> Int? {
            var waited = 0
            while apns.sender.streamCapacity != expected, waited < 100 {
                try await Task.sleep(for: .milliseconds(100))
                waited += 1
            }
            return apns.sender.streamCapacity
        }
        try await apns.run {
            let production = await sendThroughInbox(apns.sender, try pending(productionToken, eventID: "p", environment: .production))
            #expect(production.deliveryStatus == .delivered)
            // Production's two connections of the simulator's 1,000 streams; the sandbox's pool has none yet.
            let productionStreams = try await capacity(reaching: 2_000)
            #expect(productionStreams == 2_000)
            let sandbox = await sendThroughInbox(apns.sender, try pending(sandboxToken, eventID: "s", environment: .sandbox))
            #expect(sandbox.deliveryStatus == .delivered)
            let bothStreams = try await capacity(reaching: 4_000)
            #expect(bothStreams == 4_000)
        }
        // Shut down: no usable connection, so the capacity is unknown (the relay's window falls back to its limit).
        #expect(apns.sender.streamCapacity == nil)
    }

    @Test("through Kafka: a user's sandbox device is delivered on the sandbox host, not reported dead, and stays registered")
    func relayRoutes() async throws {
        let setup = try await RelayTestCluster.start(brokers: 1)
        let (cluster, configuration, producer) = (setup.cluster, setup.configuration, setup.producer)
        let (productionDevice, sandboxDevice, explicitToken) = (token(1), token(2), token(3))
        for (device, environment) in [(productionDevice, "production"), (sandboxDevice, "sandbox")] {
            _ = try await producer.enqueue(KafkaRecord(topic: "push.devices", key: Array(device.utf8),
                value: Array("{\"user\":\"u-0\",\"topic\":\"com.example.app\",\"environment\":\"\(environment)\",\"registered_at\":1}".utf8)))
        }
        // Two events of the user (the second reaches the sandbox device only if the first did not get it
        // removed as dead), and explicit tokens with apns.environment sandbox.
        for seq in 1...2 {
            _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-0".utf8), value: eventJSON(id: "e\(seq)", user: "u-0", seq: seq)))
        }
        _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("x".utf8),
            value: Array("{\"id\":\"x\",\"tokens\":[\"\(explicitToken)\"],\"apns\":{\"environment\":\"sandbox\",\"payload\":{\"aps\":{\"alert\":\"hi\"}}}}".utf8)))
        try await producer.flush()

        let apns = try await TwoEnvironments.start(productionTokens: [productionDevice], sandboxTokens: [sandboxDevice, explicitToken])
        let relay = RelayService(configuration: configuration, sender: apns.sender, logger: quietLogger("relay"))
        try await apns.run {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await relay.run() }
                let deadline = ContinuousClock.now.advanced(by: .seconds(60))
                while ContinuousClock.now < deadline {
                    let snapshot = relay.status.snapshot
                    if snapshot.counters.notificationsByStatus.values.reduce(0, +) >= 5 && snapshot.pendingRecords == 0 { break }
                    try await Task.sleep(for: .milliseconds(100))
                }
                relay.stop()
                try await group.waitForAll()
            }
        }

        #expect(apns.sandbox.simulator.deliveries(for: sandboxDevice).compactMap(\.badge) == [1, 2])
        #expect(apns.production.simulator.deliveries(for: productionDevice).compactMap(\.badge) == [1, 2])
        #expect(apns.sandbox.simulator.deliveries(for: explicitToken).count == 1)
        #expect(apns.production.simulator.deliveries(for: sandboxDevice).isEmpty && apns.production.simulator.deliveries(for: explicitToken).isEmpty)

        let results = try await readAll(cluster, topic: "push.results", partitions: 6)
            .compactMap { try JSONSerialization.jsonObject(with: Data($0.value ?? [])) as? [String: Any] }
        #expect(results.count == 5)
        #expect(results.allSatisfy { ($0["status"] as? String) == "delivered" }, "\(results)")
        #expect(try await readAll(cluster, topic: "push.failed-tokens", partitions: 6).isEmpty, "no token reported dead")
        await producer.close()
    }
}
