import APNs
import APNsTestSupport
import APNsSimulator
import Foundation
import NIOCore
import Testing
import TestSupport

@Suite("Binary connections against the simulator's legacy gateway, driven by the supervisor", .serialized)
struct APNsBinaryConnectionTests {
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
}
