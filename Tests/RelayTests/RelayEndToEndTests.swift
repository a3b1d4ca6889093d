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
    var relayTransport: APNsTransport { self == .binary ? .binary(.framed) : .http2 }
}

/// A running APNs simulator, and supervisors (one per relay instance, as each process has its own)
/// that trust its CA and sign JWTs it verifies (HTTP/2) or present its client certificate (binary).
struct SimulatedAPNs {
    let simulator: APNsSimulator
    let key: P256.Signing.PrivateKey
    let transport: SimulatedTransport

    static func start(transport: SimulatedTransport = .http2, deadTokens: [String: Int64] = [:]) async throws -> SimulatedAPNs {
        let key = P256.Signing.PrivateKey()
        var options = SimulatorOptions()
        options.certDirectory = scratchPath("apns-sim")
        options.jwtPublicKeyPEM = key.publicKey.pemRepresentation
        options.jwtKeyID = "ABCDE12345"
        options.deadTokens = deadTokens
        if transport == .binary {
            options.binaryPort = 0
            options.feedbackPort = 0
        }
        return SimulatedAPNs(simulator: try await APNsSimulator.start(options), key: key, transport: transport)
    }

    private func clientCertificate() throws -> APNsClientCertificate {
        try APNsClientCertificate(certificatePEMFile: simulator.certificates.clientCertificatePath, privateKeyPEMFile: simulator.certificates.clientKeyPath)
    }

    /// `connectsOnDemand`: the pool opens no connection before the first notification (the relay's second environment).
    func makeSupervisor(connectsOnDemand: Bool = false, retry: APNsRetryPolicy = APNsRetryPolicy(maxAttempts: 5),
                        now: @escaping @Sendable () -> NIODeadline = { .now() }) throws -> APNsSupervisor {
        let factory: any APNsConnectionFactory
        switch transport {
        case .http2:
            factory = try APNsHTTP2ConnectionFactory(configuration: APNsHTTP2ConnectionConfiguration(
                endpoint: APNsEndpoint(host: "127.0.0.1", port: simulator.http2Port),
                credential: .token(APNsTokenProvider(signer: try APNsJWTSigner(key: key, keyID: "ABCDE12345", teamID: "TEAM123456"))),
                caFile: simulator.certificates.caPath))
        case .binary:
            factory = try APNsBinaryConnectionFactory(configuration: APNsBinaryConnectionConfiguration(
                endpoint: APNsEndpoint(host: "127.0.0.1", port: simulator.binaryGatewayPort ?? 0), certificate: try clientCertificate(),
                caFile: simulator.certificates.caPath, format: .framed,
                window: .init(capacity: 2_000, quietPeriod: .milliseconds(200), confirmAfterWrites: 500)))
        }
        return APNsSupervisor(
            configuration: APNsSupervisorConfiguration(pool: .init(connections: 2, maxQueued: 20_000, connectsOnDemand: connectsOnDemand),
                                                       retry: retry),
            factory: factory, logger: quietLogger("apns"), now: now)
    }

    /// Runs one relay on `configuration`, sending through a supervisor of this simulator, until `done` holds for its
    /// status (checked every 100 ms, at most 60 s), then stops it and its supervisor.
    func runRelay(_ configuration: RelayServiceConfiguration, until done: @escaping @Sendable (RelayStatus.Snapshot) -> Bool) async throws -> RelayService {
        let supervisor = try makeSupervisor()
        let relay = RelayService(configuration: configuration, sender: APNsSupervisorSender(supervisor: supervisor), logger: quietLogger("relay"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await supervisor.run() }
            group.addTask { try await relay.run() }
            let deadline = ContinuousClock.now.advanced(by: .seconds(60))
            while ContinuousClock.now < deadline && !done(relay.status.snapshot) {
                try await Task.sleep(for: .milliseconds(100))
            }
            relay.stop()
            await supervisor.shutdown(gracePeriod: .seconds(2))
            try await group.waitForAll()
        }
        return relay
    }

    /// The feedback service client (binary only).
    func makeFeedbackClient() throws -> APNsFeedbackClient? {
        guard transport == .binary else { return nil }
        return try APNsFeedbackClient(configuration: APNsFeedbackConfiguration(
            endpoint: APNsEndpoint(host: "127.0.0.1", port: simulator.feedbackServicePort ?? 0), certificate: try clientCertificate(),
            caFile: simulator.certificates.caPath))
    }
}

/// One end-to-end case: the transport, and what happens to the first relay instance.
struct EndToEndCase: Sendable, CustomTestStringConvertible {
    var transport: SimulatedTransport
    var interruption: Interruption
    var testDescription: String { "\(transport.rawValue), \(interruption.rawValue)" }
}

/// What happens to the first relay instance while the two work.
enum Interruption: String, CustomTestStringConvertible, Sendable {
    /// Both run to the end; the second joins while the first is working.
    case none
    /// The first stops gracefully mid-run (drains, commits, leaves the group).
    case gracefulStop
    /// The first is abandoned mid-run, as in a crash: no drain, no flush, no commit.
    case crash

    var testDescription: String { rawValue }
}

/// An embedded cluster with the relay's topics (6 event partitions), a producer, and the
/// configuration both relay tests use.
struct RelayTestCluster {
    let cluster: EmbeddedKafka
    let configuration: RelayServiceConfiguration
    let producer: KafkaProducer

    static func start(brokers: Int, transport: APNsTransport = .http2) async throws -> RelayTestCluster {
        let cluster = try EmbeddedKafka(brokers: brokers)
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers,
                                       properties: ["session.timeout.ms": "6000", "heartbeat.interval.ms": "500", "max.poll.interval.ms": "10000"])
        let admin = try KafkaAdmin(configuration: kafka, logger: quietLogger("admin"))
        try cluster.createTopic("push.events", partitions: 6)
        let configuration = RelayServiceConfiguration(kafka: kafka, engine: .init(reorderWindow: .seconds(30), transport: transport, defaultTopic: "com.example.app"),
                                                      commitInterval: .milliseconds(300))
        try await TopicSetup.ensure(configuration, creator: EmbeddedTopicCreator(cluster: cluster, admin: admin))
        return RelayTestCluster(cluster: cluster, configuration: configuration,
                                producer: try KafkaProducer(configuration: kafka, logger: quietLogger("test-producer")))
    }

    /// Registers two devices per user: tokens 2u+1 and 2u+2.
    func registerDevices(users: Int) async throws {
        for user in 0..<users {
            for device in 0..<2 {
                _ = try await producer.enqueue(KafkaRecord(topic: "push.devices", key: Array(token(user * 2 + device + 1).utf8),
                    value: Array("{\"user\":\"u-\(user)\",\"topic\":\"com.example.app\",\"environment\":\"production\",\"registered_at\":1}".utf8)))
            }
        }
    }

    /// Produces seqs `seqs` of every user, shuffled inside windows of `window` (out of order, but
    /// every seq arrives within the relay's reorder window).
    func produceEvents(users: Int, seqs: ClosedRange<Int>, window: Int, seed: UInt64) async throws {
        var generator = SeededGenerator(seed: seed)
        for user in 0..<users {
            var order = Array(seqs)
            for start in stride(from: 0, to: order.count, by: window) { order[start..<min(order.count, start + window)].shuffle(using: &generator) }
            for seq in order {
                _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8),
                                                           value: eventJSON(id: "u\(user)-e\(seq)", user: "u-\(user)", seq: seq)))
            }
        }
    }

    /// Every "event/token" pair that has a result in `push.results`.
    func resultPairs() async throws -> Set<String> {
        var pairs = Set<String>()
        for record in try await readAll(cluster, topic: "push.results", partitions: 6) {
            guard let object = try JSONSerialization.jsonObject(with: Data(record.value ?? [])) as? [String: Any],
                  let eventID = object["event_id"] as? String, let tokenValue = object["token"] as? String else { continue }
            pairs.insert("\(eventID)/\(tokenValue)")
        }
        return pairs
    }
}

@Suite("Relay end to end: embedded Kafka, two relays, the APNs simulator", .serialized)
struct RelayEndToEndTests {
    @Test("two instances, 6 partitions, devices from the registry, seqs shuffled in the window, a dead token",
          arguments: [EndToEndCase(transport: .http2, interruption: .none), EndToEndCase(transport: .http2, interruption: .gracefulStop),
                      EndToEndCase(transport: .http2, interruption: .crash), EndToEndCase(transport: .binary, interruption: .none)])
    func twoInstances(_ scenario: EndToEndCase) async throws {
        let (transport, interruption) = (scenario.transport, scenario.interruption)
        let users = 1_000
        let eventsPerUser = 20
        let deadToken = token(2)  // the second device of user 0
        let setup = try await RelayTestCluster.start(brokers: 1, transport: transport.relayTransport)
        let (cluster, configuration, producer) = (setup.cluster, setup.configuration, setup.producer)
        try await setup.registerDevices(users: users)
        try await setup.produceEvents(users: users, seqs: 1...eventsPerUser, window: 4, seed: 11)
        try await producer.flush()

        let apns = try await SimulatedAPNs.start(transport: transport, deadTokens: [deadToken: 1_700_000_000_000])
        let firstSupervisor = try apns.makeSupervisor()
        let secondSupervisor = try apns.makeSupervisor()
        let first = RelayService(configuration: configuration, sender: APNsSupervisorSender(supervisor: firstSupervisor), logger: quietLogger("relay-1"))
        let second = RelayService(configuration: configuration, sender: APNsSupervisorSender(supervisor: secondSupervisor), logger: quietLogger("relay-2"))
        let total = users * eventsPerUser
        let liveTokens = (0..<users * 2).map { token($0 + 1) }.filter { $0 != deadToken }
        /// Every live device has its user's final badge: all events were applied and sent.
        func devicesComplete() -> Bool {
            liveTokens.allSatisfy { apns.simulator.deliveries(for: $0).last?.badge == eventsPerUser }
        }
        var appliedByFirstAtInterruption = 0
        let firstFinished = LockedBox(false)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await firstSupervisor.run() }
            group.addTask { await secondSupervisor.run() }
            group.addTask {
                try await first.run()
                firstFinished.withLock { $0 = true }
                if interruption == .crash { await firstSupervisor.shutdown(gracePeriod: .zero) }
            }
            group.addTask {
                if interruption == .none {
                    try await Task.sleep(for: .seconds(Double(ProcessInfo.processInfo.environment["JOIN_DELAY"] ?? "2") ?? 2))  // joins while the first is working
                }
                try await second.run()
            }
            if let feedback = try apns.makeFeedbackClient() {
                // The legacy gateway accepts notifications for the uninstalled app; its feedback service tells.
                let poll = try await feedback.poll()
                first.reportDeadTokens(poll.tuples.map { DeadTokenReport(token: $0.tokenHex, since: $0.sinceMilliseconds) })
            }
            var interrupted = interruption == .none
            let deadline = ContinuousClock.now.advanced(by: .seconds(240))
            while ContinuousClock.now < deadline {
                let a = first.status.snapshot
                let b = second.status.snapshot
                // Mid-run, once the first has partitions and work of its own. A crash waits for a quarter of the
                // run, past the first rebalance (while it lasts the cluster refuses commits and the changelog
                // lags, so there may be nothing durable to send again), and for notifications in flight: their
                // badge changes are stored and their records unfinished, an uncommitted tail for the survivor to
                // send again. (Pending records alone may all be events held for an earlier seq, never applied.)
                let interruptAt = interruption == .crash ? total / 4 : total / 10
                if !interrupted && a.counters.eventsApplied >= interruptAt && (interruption != .crash || a.pendingNotifications > 0) {
                    interrupted = true
                    appliedByFirstAtInterruption = a.counters.eventsApplied
                    if interruption == .crash { first.abandon() } else { first.stop() }
                }
                // Applied counts may exceed the total only by re-deliveries after the rebalance,
                // which the changelog turns into duplicates, never into second applications.
                // (A crashed instance's status stays as it was when it died.)
                // A gracefully stopped instance may end with records it handed back (held in its sequencer for an
                // earlier seq, inside the 30 s reorder window): the survivor reads them again from the commit.
                let firstIdle = interruption == .crash || a.pendingRecords == 0 || firstFinished.withLock { $0 }
                if interrupted && a.counters.eventsApplied + b.counters.eventsApplied >= total && firstIdle && b.pendingRecords == 0
                    && (interruption != .crash || devicesComplete()) { break }
                if ProcessInfo.processInfo.environment["RELAY_TEST_TRACE"] != nil {
                    print("trace: applied \(a.counters.eventsApplied)+\(b.counters.eventsApplied) replayed \(a.counters.eventsReplayed)+\(b.counters.eventsReplayed) pending \(a.pendingRecords)+\(b.pendingRecords) statuses \(a.counters.notificationsByStatus) \(b.counters.notificationsByStatus) sim \(apns.simulator.deliveryCount)")
                }
                try await Task.sleep(for: .milliseconds(250))
            }
            try await Task.sleep(for: .milliseconds(700))
            first.stop()
            second.stop()
            // The supervisors outlive the relays' graceful stop, then drain.
            try await Task.sleep(for: .seconds(2))
            await firstSupervisor.shutdown(gracePeriod: .seconds(2))
            await secondSupervisor.shutdown(gracePeriod: .seconds(2))
            try await group.waitForAll()
        }
        await apns.simulator.shutdown()

        let applied = first.status.snapshot.counters.eventsApplied + second.status.snapshot.counters.eventsApplied
        if interruption == .crash {
            // Applications whose changelog append the crash lost are applied again by the survivor;
            // that they counted once is what the final badges below show.
            #expect(applied >= total, "every event applied (\(applied) of \(total))")
            #expect(second.status.snapshot.counters.eventsReplayed > 0, "the survivor sent the crashed instance's uncommitted tail again")
        } else {
            #expect(applied == total, "each event applied exactly once (\(applied) of \(total))")
        }
        if interruption != .none {
            #expect(appliedByFirstAtInterruption > 0 && second.status.snapshot.counters.eventsApplied > 0,
                    "both instances applied events: the survivor took the first's partitions over from the changelog")
        }

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
        let resultPairs = try await setup.resultPairs()
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
            // The binary window resent nothing already shown. A handover whose revoke commit the
            // coordinator refused (REBALANCE_IN_PROGRESS, under group churn) makes the next owner
            // replay that partition's uncommitted tail: those resends, at most two devices per
            // replayed event, are the relay's at-least-once and are not the window's.
            let replayed = first.status.snapshot.counters.eventsReplayed + second.status.snapshot.counters.eventsReplayed
            #expect(apns.simulator.binaryResendsSuppressed <= replayed * 2,
                    "\(apns.simulator.binaryResendsSuppressed) resends of shown notifications, \(replayed) events replayed")
        }

        // The changelog's last value per user is the final count with the last seq.
        let changelog = try await readAll(cluster, topic: "push.badge-state", partitions: 6)
        var lastState: [String: BadgeStateRecord] = [:]
        for record in changelog {
            guard let key = record.key, let value = record.value else { continue }
            guard !key.elementsEqual(ProgressMarker.key) else { continue }
            lastState[String(decoding: key, as: UTF8.self)] = try BadgeStateRecord.decode(value)
        }
        #expect(lastState.count == users)
        #expect(lastState.values.allSatisfy { $0.badge == Int64(eventsPerUser) && $0.seq == Int64(eventsPerUser) })
        await producer.close()
    }
}

@Suite("Relay under faults: a Kafka broker down, an APNs 503 burst", .serialized)
struct RelayFaultTests {
    @Test("a broker down for 10 s mid-run and a burst of 503s: no loss, no double count, recovery without a restart")
    func brokerDownAnd503Burst() async throws {
        let users = 200
        let eventsPerUser = 10
        let setup = try await RelayTestCluster.start(brokers: 3)
        let (cluster, configuration, producer) = (setup.cluster, setup.configuration, setup.producer)
        try await setup.registerDevices(users: users)
        try await setup.produceEvents(users: users, seqs: 1...eventsPerUser / 2, window: 3, seed: 3)
        try await producer.flush()

        let apns = try await SimulatedAPNs.start()
        // The first 150 requests answer 503 ServiceUnavailable: retried with backoff, then delivered.
        apns.simulator.addFault(.status(503, reason: "ServiceUnavailable"), count: 150)
        let supervisor = try apns.makeSupervisor()
        let relay = RelayService(configuration: configuration, sender: APNsSupervisorSender(supervisor: supervisor), logger: quietLogger("relay"))
        let liveTokens = (0..<users * 2).map { token($0 + 1) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await supervisor.run() }
            group.addTask { try await relay.run() }
            // Mid-run: broker 2 goes down for 10 s while the second half of the events is produced.
            while relay.status.snapshot.counters.eventsApplied < users * eventsPerUser / 4 {
                try await Task.sleep(for: .milliseconds(50))
            }
            try cluster.setBrokerDown(2)
            try await setup.produceEvents(users: users, seqs: eventsPerUser / 2 + 1...eventsPerUser, window: 3, seed: 4)
            try await Task.sleep(for: .seconds(10))
            try cluster.setBrokerUp(2)
            try await producer.flush()
            let deadline = ContinuousClock.now.advanced(by: .seconds(180))
            while ContinuousClock.now < deadline {
                let snapshot = relay.status.snapshot
                if snapshot.pendingRecords == 0 && liveTokens.allSatisfy({ apns.simulator.deliveries(for: $0).last?.badge == eventsPerUser }) { break }
                if ProcessInfo.processInfo.environment["RELAY_TEST_TRACE"] != nil {
                    print("trace: applied \(snapshot.counters.eventsApplied) pending \(snapshot.pendingRecords) statuses \(snapshot.counters.notificationsByStatus) sim \(apns.simulator.deliveryCount)")
                }
                try await Task.sleep(for: .milliseconds(250))
            }
            try await Task.sleep(for: .milliseconds(700))
            relay.stop()
            try await Task.sleep(for: .seconds(1))
            await supervisor.shutdown(gracePeriod: .seconds(2))
            try await group.waitForAll()
        }
        await apns.simulator.shutdown()

        let counters = relay.status.snapshot.counters
        #expect(counters.eventsApplied == users * eventsPerUser, "each event applied once, none lost")
        #expect(counters.notificationsByStatus[.failed] == nil, "the 503s were retried, not given up")
        for deviceToken in liveTokens {
            let badges = apns.simulator.deliveries(for: deviceToken).compactMap(\.badge)
            #expect(badges == badges.sorted() && badges.last == eventsPerUser, "\(deviceToken.prefix(8)): \(badges)")
        }
        let pairs = try await setup.resultPairs()
        let missing = (0..<users).flatMap { user in
            (1...eventsPerUser).flatMap { seq in (0..<2).map { "u\(user)-e\(seq)/\(token(user * 2 + $0 + 1))" } }
        }.filter { !pairs.contains($0) }
        #expect(missing.isEmpty, "\(missing.count) (event, device) pairs without a result, e.g. \(missing.prefix(3))")
        await producer.close()
    }
}
