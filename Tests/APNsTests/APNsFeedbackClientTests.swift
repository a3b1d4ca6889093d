import APNs
import APNsSimulator
import APNsTestSupport
import Foundation
import Testing
import TestSupport

/// The legacy feedback service: the client against the simulator's, and the poller that runs it.
@Suite("Feedback client and poller", .serialized)
struct APNsFeedbackClientTests {
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
