import APNs
import APNsSimulator
import Foundation
import NIOCore
import Testing
import TestSupport

/// Starts a simulator with the binary gateway and feedback service, and a supervisor on binary connections.
enum BinaryHarness {
    struct Setup {
        var simulator = SimulatorOptions()
        var connections = 1
        var format = APNsBinaryFormat.framed
        var window = APNsBinaryWindowConfiguration(capacity: 1_000, quietPeriod: .milliseconds(300), confirmAfterWrites: 1_000)
        var maxAttempts = 5
        /// The host the client connects to; the simulator listens on 127.0.0.1.
        var endpointHost = "127.0.0.1"
        /// The HTTP proxy connections are tunnelled through, if any.
        var proxy: APNsProxy?
    }

    static func clientCertificate(_ simulator: APNsSimulator) throws -> APNsClientCertificate {
        try APNsClientCertificate(certificatePEMFile: simulator.certificates.clientCertificatePath, privateKeyPEMFile: simulator.certificates.clientKeyPath)
    }

    static func run(_ setup: Setup, _ body: (APNsSimulator, APNsSupervisor) async throws -> Void) async throws {
        var options = setup.simulator
        options.binaryPort = 0
        options.feedbackPort = 0
        let simulator = try await APNsSimulator.start(options)
        let factory: APNsBinaryConnectionFactory
        do {
            factory = try APNsBinaryConnectionFactory(configuration: APNsBinaryConnectionConfiguration(
                endpoint: APNsEndpoint(host: setup.endpointHost, port: try #require(simulator.binaryGatewayPort)),
                certificate: try clientCertificate(simulator), caFile: simulator.certificates.caPath,
                format: setup.format, window: setup.window, proxy: setup.proxy))
        } catch {
            await simulator.shutdown()
            throw error
        }
        var supervision = Harness.Setup()
        supervision.connections = setup.connections
        supervision.maxAttempts = setup.maxAttempts
        try await Harness.supervise(simulator: simulator, factory: factory, supervision, body)
    }

    /// Sends notifications for tokens 1...count at once and returns the outcomes by token.
    static func sendBatch(_ supervisor: APNsSupervisor, count: Int) async throws -> [String: APNsOutcome] {
        let notifications = try (1...count).map { try Harness.notification(token: Harness.token($0), badge: $0) }
        return await withTaskGroup(of: (String, APNsOutcome).self) { group in
            for notification in notifications {
                group.addTask { (notification.token?.hex ?? "", await supervisor.send(notification)) }
            }
            var outcomes: [String: APNsOutcome] = [:]
            for await (token, outcome) in group { outcomes[token] = outcome }
            return outcomes
        }
    }
}

@Suite("Binary gateway and feedback service of the simulator, driven by the supervisor", .serialized)
struct BinarySimulatorTests {
    @Test("every format is delivered once, with its badge", arguments: APNsBinaryFormat.allCases)
    func formats(format: APNsBinaryFormat) async throws {
        var setup = BinaryHarness.Setup()
        setup.format = format
        try await BinaryHarness.run(setup) { simulator, supervisor in
            let outcomes = try await BinaryHarness.sendBatch(supervisor, count: 20)
            #expect(outcomes.values.allSatisfy { $0.classification == .delivered && $0.httpStatus == nil })
            for index in 1...20 {
                let shown = simulator.deliveries(for: Harness.token(index))
                #expect(shown.map(\.badge) == [index])
            }
        }
    }

    @Test("100 in one batch, #37's token is invalid: #37 gets status 8 (token dead), the 99 others are shown exactly once")
    func invalidTokenInBatch() async throws {
        try await BinaryHarness.run(BinaryHarness.Setup()) { simulator, supervisor in
            simulator.markBad(Harness.token(37))
            let outcomes = try await BinaryHarness.sendBatch(supervisor, count: 100)
            let bad = try #require(outcomes[Harness.token(37)])
            #expect(bad.classification == .tokenDead)
            #expect(bad.legacyStatus == .invalidToken)
            #expect(bad.reason?.rawValue == "InvalidToken")
            #expect(bad.attempts == 1)
            for index in 1...100 where index != 37 {
                #expect(outcomes[Harness.token(index)]?.classification == .delivered, "#\(index)")
                #expect(simulator.deliveries(for: Harness.token(index)).count == 1, "#\(index)")
            }
            #expect(simulator.deliveries(for: Harness.token(37)).isEmpty)
            #expect(simulator.deliveryCount == 99)
            // Nothing already shown was sent again: only what APNs dropped after #37 went out a second time.
            #expect(simulator.binaryResendsSuppressed == 0)
        }
    }

    @Test("shutdown (10) mid-batch: the named one and those before it count, the rest is resent; nothing lost or shown twice")
    func shutdownMidBatch() async throws {
        try await BinaryHarness.run(BinaryHarness.Setup()) { simulator, supervisor in
            simulator.addFault(.shutdown, token: Harness.token(50))
            let outcomes = try await BinaryHarness.sendBatch(supervisor, count: 100)
            #expect(outcomes.values.allSatisfy { $0.classification == .delivered })
            for index in 1...100 {
                #expect(simulator.deliveries(for: Harness.token(index)).count == 1, "#\(index)")
            }
            #expect(simulator.binaryResendsSuppressed == 0)
            #expect(simulator.connectionsAccepted >= 2)
        }
    }

    @Test("abrupt close mid-batch: the unconfirmed window is resent; nothing lost, nothing shown twice")
    func abruptCloseMidBatch() async throws {
        try await BinaryHarness.run(BinaryHarness.Setup()) { simulator, supervisor in
            simulator.addFault(.closeConnection, token: Harness.token(50))
            let outcomes = try await BinaryHarness.sendBatch(supervisor, count: 100)
            #expect(outcomes.values.allSatisfy { $0.classification == .delivered })
            for index in 1...100 {
                #expect(simulator.deliveries(for: Harness.token(index)).count == 1, "#\(index)")
            }
            #expect(simulator.deliveryCount == 100)
            #expect(simulator.connectionsAccepted >= 2)
        }
    }

    @Test("an oversized payload and a token of the wrong length are refused before any byte is written")
    func refusedBeforeWriting() async throws {
        var setup = BinaryHarness.Setup()
        setup.format = .enhanced
        try await BinaryHarness.run(setup) { simulator, supervisor in
            let alert = String(repeating: "x", count: 300)
            let large = try APNsNotification(token: try APNsDeviceToken(hex: Harness.token(1)), topic: Harness.topic,
                                             payload: Array(#"{"aps":{"alert":"\#(alert)"}}"#.utf8))
            let oversized = await supervisor.send(large)
            #expect(oversized.classification == .permanent)
            #expect(oversized.legacyStatus == .invalidPayloadSize)
            let longToken = try APNsNotification(token: try APNsDeviceToken(bytes: [UInt8](repeating: 7, count: 33)), topic: Harness.topic,
                                                 payload: Array(#"{"aps":{"badge":1}}"#.utf8))
            let wrongLength = await supervisor.send(longToken)
            #expect(wrongLength.classification == .permanent)
            #expect(wrongLength.legacyStatus == .invalidTokenSize)
            #expect(simulator.requestCount == 0)
            #expect(simulator.deliveryCount == 0)
        }
    }

    @Test("other statuses reject the notification for good; the ones after it are resent")
    func otherStatus() async throws {
        try await BinaryHarness.run(BinaryHarness.Setup()) { simulator, supervisor in
            simulator.addFault(.binaryStatus(7), token: Harness.token(5))
            let outcomes = try await BinaryHarness.sendBatch(supervisor, count: 10)
            #expect(outcomes[Harness.token(5)]?.classification == .permanent)
            #expect(outcomes[Harness.token(5)]?.legacyStatus == .invalidPayloadSize)
            #expect(simulator.deliveryCount == 9)
        }
    }

    @Test("feedback: dead tokens are reported once with their time, then forgotten; an uninstalled device shows nothing")
    func feedback() async throws {
        var setup = BinaryHarness.Setup()
        setup.simulator.deadTokens = [Harness.token(1): 1_700_000_000_000, Harness.token(2): 1_700_000_123_000]
        try await BinaryHarness.run(setup) { simulator, supervisor in
            let client = try APNsFeedbackClient(configuration: APNsFeedbackConfiguration(
                endpoint: APNsEndpoint(host: "127.0.0.1", port: try #require(simulator.feedbackServicePort)),
                certificate: try BinaryHarness.clientCertificate(simulator), caFile: simulator.certificates.caPath))
            let dead = await supervisor.send(try Harness.notification(token: Harness.token(1)))
            #expect(dead.classification == .delivered)  // the legacy gateway accepts it; only feedback tells
            #expect(simulator.deliveries(for: Harness.token(1)).isEmpty)

            let first = try await client.poll()
            #expect(first.truncatedBytes == 0)
            #expect(Dictionary(uniqueKeysWithValues: first.tuples.map { ($0.tokenHex, $0.sinceMilliseconds) })
                    == [Harness.token(1): 1_700_000_000_000, Harness.token(2): 1_700_000_123_000])
            #expect(try await client.poll().tuples.isEmpty)

            simulator.markDead(Harness.token(3), timestamp: 1_800_000_000_000)
            #expect(try await client.poll().tuples.map(\.tokenHex) == [Harness.token(3)])
        }
    }

    @Test("the feedback poller hands each poll's tuples on and keeps going after a failed poll")
    func poller() async throws {
        let polls = PollScript()
        let handled = PollScript()
        let poller = APNsFeedbackPoller(
            interval: .seconds(12 * 3_600),
            sleep: { _ in if await polls.count >= 3 { throw CancellationError() } },
            poll: {
                let number = await polls.next()
                if number == 1 { throw APNsFeedbackError.timedOut }
                return APNsFeedbackPoll(tuples: [APNsFeedbackTuple(timestamp: UInt32(number), token: [UInt8](repeating: 1, count: 32))])
            },
            handle: { tuples in await handled.add(tuples.count) })
        await poller.run()
        #expect(await polls.count == 3)
        #expect(await handled.count == 2)
    }

    @Test("the legacy ports refuse a client certificate from another CA")
    func foreignCertificate() async throws {
        try await BinaryHarness.run(BinaryHarness.Setup()) { simulator, _ in
            let foreign = try SimulatorCertificates.generate(in: scratchPath("foreign"))
            let client = try APNsFeedbackClient(configuration: APNsFeedbackConfiguration(
                endpoint: APNsEndpoint(host: "127.0.0.1", port: try #require(simulator.feedbackServicePort)),
                certificate: try APNsClientCertificate(certificatePEMFile: foreign.clientCertificatePath, privateKeyPEMFile: foreign.clientKeyPath),
                caFile: simulator.certificates.caPath))
            simulator.markDead(Harness.token(9), timestamp: 1)
            await #expect(throws: (any Error).self) { try await client.poll() }
            #expect(simulator.feedbackPending.keys.contains(Harness.token(9)))
        }
    }
}

/// Counts calls across tasks.
actor PollScript {
    private(set) var count = 0
    func next() -> Int {
        count += 1
        return count
    }
    func add(_ amount: Int) { count += amount }
}
