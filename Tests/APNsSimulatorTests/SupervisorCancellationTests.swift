import APNs
import NIOCore
import Synchronization
import Testing

/// Answers the supervisor's sends when the test says so: no sockets, no clock.
final class ScriptedAPNs: Sendable {
    private struct State {
        var pending: [CheckedContinuation<APNsAttemptResult, Never>] = []
        /// Once set, every send (waiting or later) gets this answer at once.
        var standingAnswer: APNsAttemptResult?
    }

    private let state = Mutex(State())
    /// Sends the supervisor made.
    let sends = WaitableCount()

    /// Answers every send waiting now, and every later one, with `result`.
    func answerAll(_ result: APNsAttemptResult) {
        let pending = state.withLock { state -> [CheckedContinuation<APNsAttemptResult, Never>] in
            state.standingAnswer = result
            defer { state.pending = [] }
            return state.pending
        }
        for continuation in pending { continuation.resume(returning: result) }
    }

    fileprivate func send() async -> APNsAttemptResult {
        await withCheckedContinuation { (continuation: CheckedContinuation<APNsAttemptResult, Never>) in
            let answer = state.withLock { state -> APNsAttemptResult? in
                if state.standingAnswer == nil { state.pending.append(continuation) }
                return state.standingAnswer
            }
            sends.increment()
            if let answer { continuation.resume(returning: answer) }
        }
    }
}

struct ScriptedFactory: APNsConnectionFactory {
    struct Connection: APNsConnection {
        let id: APNsConnectionID
        let script: ScriptedAPNs
        func send(_ notification: APNsNotification, deadline: NIODeadline) async -> APNsAttemptResult { await script.send() }
        func close(graceful: Bool) async {}
    }

    let script: ScriptedAPNs

    func makeConnection(id: APNsConnectionID, delegate: any APNsConnectionDelegate) async throws -> APNsEstablishedConnection {
        APNsEstablishedConnection(connection: Connection(id: id, script: script), maxConcurrentStreams: 10)
    }
}

@Suite("Supervisor cancellation (scripted connection)")
struct SupervisorCancellationTests {
    /// Runs a one-connection supervisor on `script` around `body`, then drains it.
    func supervise(_ script: ScriptedAPNs, _ body: (APNsSupervisor) async throws -> Void) async throws {
        let supervisor = APNsSupervisor(configuration: APNsSupervisorConfiguration(pool: .init(connections: 1)), factory: ScriptedFactory(script: script))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await supervisor.run() }
            try await body(supervisor)
            await supervisor.shutdown(gracePeriod: .seconds(1))
            try await group.waitForAll()
        }
    }

    /// Sends one notification, cancels the send once its request is written, then lets `answer` arrive.
    func cancelOnTheWire(answer: APNsAttemptResult) async throws -> (APNsOutcome, sends: Int) {
        let script = ScriptedAPNs()
        let notification = try APNsNotification(token: try APNsDeviceToken(hex: String(repeating: "ab", count: 32)), topic: "com.example.app",
                                                payload: Array(#"{"aps":{"badge":1}}"#.utf8))
        var result: (APNsOutcome, Int)?
        try await supervise(script) { supervisor in
            let outcome = await withTaskGroup(of: APNsOutcome.self) { group in
                group.addTask { await supervisor.send(notification) }
                await script.sends.reached(1)
                group.cancelAll()
                script.answerAll(answer)
                return await group.next()!
            }
            result = (outcome, script.sends.value)
        }
        return try #require(result)
    }

    @Test("cancelled with its request on the wire: the answer is waited for and never retried")
    func onTheWire() async throws {
        let (retryable, retryableSends) = try await cancelOnTheWire(answer: .response(APNsResponse(status: 503, reason: .serviceUnavailable)))
        #expect(retryable.lastAttempt == .failure(.cancelled))
        #expect(retryable.attempts == 1)
        #expect(retryableSends == 1)
        // A final answer is what happened to the notification, cancelled or not.
        let (delivered, deliveredSends) = try await cancelOnTheWire(answer: .response(APNsResponse(status: 200)))
        #expect(delivered.classification == .delivered)
        #expect(deliveredSends == 1)
    }
}
