import APNs
import APNsSimulator
import Crypto
import Foundation
import Kafka
import Logging
import NIOCore
import Testing

@testable import Relay

/// The APNs interface an end-to-end test runs against.
enum SimulatedTransport: String, Sendable, CaseIterable, CustomTestStringConvertible {
    /// The HTTP/2 provider API with token auth.
    case http2
    /// The legacy binary interface (format 2) with the client certificate, and its feedback service.
    case binary

    var testDescription: String { rawValue }

    /// What the event decoder checks payload sizes against.
    var relayTransport: APNsTransport { self == .binary ? .binary(format: 2) : .http2 }
}

/// A running APNs simulator with a supervisor that trusts its CA and signs JWTs it verifies (HTTP/2) or presents
/// the simulator's client certificate (binary).
struct SimulatedAPNs {
    let simulator: APNsSimulator
    let supervisor: APNsSupervisor
    /// The feedback service client (binary only).
    let feedback: APNsFeedbackClient?

    static func start(transport: SimulatedTransport = .http2, deadTokens: [String: Int64] = [:]) async throws -> SimulatedAPNs {
        let key = P256.Signing.PrivateKey()
        var options = SimulatorOptions()
        options.certDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-sim-\(UUID().uuidString)").path
        options.jwtPublicKeyPEM = key.publicKey.pemRepresentation
        options.jwtKeyID = "ABCDE12345"
        options.deadTokens = deadTokens
        if transport == .binary {
            options.binaryPort = 0
            options.feedbackPort = 0
        }
        let simulator = try await APNsSimulator.start(options)
        let factory: any APNsConnectionFactory
        var feedback: APNsFeedbackClient?
        switch transport {
        case .http2:
            factory = try APNsHTTP2ConnectionFactory(configuration: APNsHTTP2ConnectionConfiguration(
                endpoint: APNsEndpoint(host: "127.0.0.1", port: simulator.http2Port),
                credential: .token(APNsTokenProvider(signer: try APNsJWTSigner(key: key, keyID: "ABCDE12345", teamID: "TEAM123456"))),
                caFile: simulator.certificates.caPath))
        case .binary:
            let certificate = try APNsClientCertificate(certificatePEMFile: simulator.certificates.clientCertificatePath,
                                                        privateKeyPEMFile: simulator.certificates.clientKeyPath)
            factory = try APNsBinaryConnectionFactory(configuration: APNsBinaryConnectionConfiguration(
                endpoint: APNsEndpoint(host: "127.0.0.1", port: simulator.binaryGatewayPort ?? 0), certificate: certificate,
                caFile: simulator.certificates.caPath, format: .framed,
                window: .init(capacity: 2_000, quietPeriod: .milliseconds(200), confirmAfterWrites: 500)))
            feedback = try APNsFeedbackClient(configuration: APNsFeedbackConfiguration(
                endpoint: APNsEndpoint(host: "127.0.0.1", port: simulator.feedbackServicePort ?? 0), certificate: certificate,
                caFile: simulator.certificates.caPath))
        }
        let supervisor = APNsSupervisor(
            configuration: APNsSupervisorConfiguration(pool: .init(connections: 2, maxQueued: 20_000), retry: APNsRetryPolicy(maxAttempts: 5)),
            factory: factory, logger: quietLogger("apns"))
        return SimulatedAPNs(simulator: simulator, supervisor: supervisor, feedback: feedback)
    }
}

@Suite("Relay end to end: embedded Kafka, two relays, the APNs simulator", .serialized)
struct RelayEndToEndTests {
    @Test("two instances, 6 partitions, devices from the registry, seqs shuffled in the window, a dead token", arguments: SimulatedTransport.allCases)
    func twoInstances(transport: SimulatedTransport) async throws {
        let users = 1_000
        let eventsPerUser = 20
        let deadToken = token(2)  // the second device of user 0
        let cluster = try EmbeddedKafka(brokers: 1)
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers,
                                       properties: ["session.timeout.ms": "6000", "heartbeat.interval.ms": "500", "max.poll.interval.ms": "10000"])
        let admin = try KafkaAdmin(configuration: kafka, logger: quietLogger("admin"))
        try cluster.createTopic("push.events", partitions: 6)
        let configuration = RelayServiceConfiguration(kafka: kafka, engine: .init(reorderWindowMilliseconds: 30_000, transport: transport.relayTransport, defaultTopic: "com.example.app"),
                                                      commitInterval: .milliseconds(300))
        try await TopicSetup.ensure(configuration, creator: EmbeddedTopicCreator(cluster: cluster, admin: admin))

        let producer = try KafkaProducer(configuration: kafka, logger: quietLogger("test-producer"))
        for user in 0..<users {
            for device in 0..<2 {
                let deviceToken = token(user * 2 + device + 1)
                _ = try await producer.enqueue(KafkaRecord(topic: "push.devices", key: Array(deviceToken.utf8),
                    value: Array("{\"user\":\"u-\(user)\",\"topic\":\"com.example.app\",\"environment\":\"production\",\"registered_at\":1}".utf8)))
            }
        }
        var generator = SeededGenerator(seed: 11)
        for user in 0..<users {
            var seqs = Array(1...eventsPerUser)
            for start in stride(from: 0, to: seqs.count, by: 4) {
                seqs[start..<min(seqs.count, start + 4)].shuffle(using: &generator)
            }
            for seq in seqs {
                _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8),
                                                           value: eventJSON(id: "u\(user)-e\(seq)", user: "u-\(user)", seq: seq)))
            }
        }
        try await producer.flush()

        let apns = try await SimulatedAPNs.start(transport: transport, deadTokens: [deadToken: 1_700_000_000_000])
        let first = RelayService(configuration: configuration, sender: APNsSupervisorSender(supervisor: apns.supervisor), logger: quietLogger("relay-1"))
        let second = RelayService(configuration: configuration, sender: APNsSupervisorSender(supervisor: apns.supervisor), logger: quietLogger("relay-2"))
        let total = users * eventsPerUser
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await apns.supervisor.run() }
            group.addTask { try await first.run() }
            group.addTask {
                try await Task.sleep(for: .seconds(Double(ProcessInfo.processInfo.environment["JOIN_DELAY"] ?? "2") ?? 2))  // joins while the first is working
                try await second.run()
            }
            if let feedback = apns.feedback {
                // The legacy gateway accepts notifications for the uninstalled app; its feedback service tells.
                let poll = try await feedback.poll()
                first.reportDeadTokens(poll.tuples.map { DeadTokenReport(token: $0.tokenHex, since: $0.sinceMilliseconds) })
            }
            let deadline = ContinuousClock.now.advanced(by: .seconds(240))
            while ContinuousClock.now < deadline {
                let a = first.status.snapshot
                let b = second.status.snapshot
                // Applied counts may exceed the total only by re-deliveries after the rebalance,
                // which the changelog turns into duplicates, never into second applications.
                if a.counters.eventsApplied + b.counters.eventsApplied >= total && a.pendingRecords == 0 && b.pendingRecords == 0 { break }
                if ProcessInfo.processInfo.environment["RELAY_TEST_TRACE"] != nil {
                    print("trace: applied \(a.counters.eventsApplied)+\(b.counters.eventsApplied) pending \(a.pendingRecords)+\(b.pendingRecords) statuses \(a.counters.notificationsByStatus) \(b.counters.notificationsByStatus) sim \(apns.simulator.deliveryCount) ready \(apns.supervisor.readyConnectionCount) inflight \(apns.supervisor.inFlightCount) queued \(apns.supervisor.queuedCount) limits \(apns.supervisor.streamLimits)")
                }
                try await Task.sleep(for: .milliseconds(250))
            }
            try await Task.sleep(for: .milliseconds(700))
            first.stop()
            second.stop()
            // The supervisor outlives the relays' graceful stop, then drains.
            try await Task.sleep(for: .seconds(2))
            await apns.supervisor.shutdown(gracePeriod: .seconds(2))
            try await group.waitForAll()
        }
        await apns.simulator.shutdown()

        let applied = first.status.snapshot.counters.eventsApplied + second.status.snapshot.counters.eventsApplied
        #expect(applied == total, "each event applied exactly once (\(applied) of \(total))")

        // Every device's badges never go down, and the last one is the user's final count.
        for user in 0..<users {
            for device in 0..<2 {
                let deviceToken = token(user * 2 + device + 1)
                let badges = apns.simulator.deliveries(for: deviceToken).compactMap(\.badge)
                if deviceToken == deadToken {
                    #expect(badges.isEmpty)
                    continue
                }
                #expect(badges == badges.sorted(), "u-\(user) device \(device): \(badges)")
                #expect(badges.last == eventsPerUser, "u-\(user) device \(device) ends at \(eventsPerUser)")
            }
        }

        // Every (event, device) has a result.
        let results = try await readAll(cluster, topic: "push.results", partitions: 6)
        var resultPairs = Set<String>()
        for record in results {
            guard let object = try JSONSerialization.jsonObject(with: Data(record.value ?? [])) as? [String: Any],
                  let eventID = object["event_id"] as? String, let tokenValue = object["token"] as? String else { continue }
            resultPairs.insert("\(eventID)/\(tokenValue)")
        }
        var missing = 0
        for user in 0..<users {
            for seq in 1...eventsPerUser {
                for device in 0..<2 {
                    let deviceToken = token(user * 2 + device + 1)
                    // After the 410 the dead token is no longer a target of u-0's later events.
                    if deviceToken == deadToken { continue }
                    if !resultPairs.contains("u\(user)-e\(seq)/\(deviceToken)") { missing += 1 }
                }
            }
        }
        #expect(missing == 0, "\(missing) (event, device) pairs without a result")

        // The 410 (HTTP/2) or the feedback service (binary) produced a failed-token record with APNs' timestamp.
        let failed = try await readAll(cluster, topic: "push.failed-tokens", partitions: 6)
        let failedObjects = failed.compactMap { try? JSONSerialization.jsonObject(with: Data($0.value ?? [])) as? [String: Any] }
        let expectedReason = transport == .binary ? "Feedback" : "Unregistered"
        #expect(failedObjects.contains { ($0["token"] as? String) == deadToken && ($0["reason"] as? String) == expectedReason && ($0["since"] as? Int64) == 1_700_000_000_000 })
        if transport == .binary {
            // Nothing already shown was sent again.
            #expect(apns.simulator.binaryResendsSuppressed == 0)
        }

        // The changelog's last value per user is the final count with the last seq.
        let changelog = try await readAll(cluster, topic: "push.badge-state", partitions: 6)
        var lastState: [String: BadgeStateRecord] = [:]
        for record in changelog {
            guard let key = record.key, let value = record.value else { continue }
            lastState[String(decoding: key, as: UTF8.self)] = try BadgeStateRecord.decode(value)
        }
        #expect(lastState.count == users)
        #expect(lastState.values.allSatisfy { $0.badge == Int64(eventsPerUser) && $0.seq == Int64(eventsPerUser) })
        await producer.close()
    }
}
