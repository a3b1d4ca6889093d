import APNs
import APNsTestSupport
import NIOCore
import Synchronization
import Testing
import TestSupport

/// Answers the supervisor's sends when the test says so: no sockets, no clock.
final class ScriptedAPNs: Sendable {
    private struct State {
        var pending: [@Sendable (APNsAttemptResult) -> Void] = []
        /// Once set, every send (waiting or later) gets this answer at once.
        var standingAnswer: APNsAttemptResult?
    }

    private let state = Mutex(State())
    /// Sends the supervisor made.
    let sends = WaitableCount()

    /// Answers every send waiting now, and every later one, with `result`.
    func answerAll(_ result: APNsAttemptResult) {
        let pending = state.withLock { state -> [@Sendable (APNsAttemptResult) -> Void] in
            state.standingAnswer = result
            defer { state.pending = [] }
            return state.pending
        }
        for completion in pending { completion(result) }
    }

    /// Answers the sends waiting now with `result`; later ones wait again.
    func answerWaiting(_ result: APNsAttemptResult) {
        let pending = state.withLock { state -> [@Sendable (APNsAttemptResult) -> Void] in
            defer { state.pending = [] }
            return state.pending
        }
        for completion in pending { completion(result) }
    }

    fileprivate func send(_ completion: @escaping @Sendable (APNsAttemptResult) -> Void) {
        let answer = state.withLock { state -> APNsAttemptResult? in
            if state.standingAnswer == nil { state.pending.append(completion) }
            return state.standingAnswer
        }
        sends.increment()
        if let answer { completion(answer) }
    }
}

struct ScriptedFactory: APNsConnectionFactory {
    struct Connection: APNsConnection {
        let id: APNsConnectionID
        let script: ScriptedAPNs
        func send(_ notification: APNsNotification, deadline: NIODeadline, completion: @escaping @Sendable (APNsAttemptResult) -> Void) {
            script.send(completion)
        }
        func close(graceful: Bool) async {}
    }

    let script: ScriptedAPNs

    func makeConnection(id: APNsConnectionID, delegate: any APNsConnectionDelegate) async throws -> APNsEstablishedConnection {
        APNsEstablishedConnection(connection: Connection(id: id, script: script), maxConcurrentStreams: 10)
    }
}

@Suite("Supervisor cancellation (scripted connection)")
struct APNsSupervisorAttemptsTests {
    /// Runs a one-connection supervisor on `script` around `body`, then drains it.
    func supervise(_ script: ScriptedAPNs, retry: APNsRetryPolicy = APNsRetryPolicy(), _ body: (APNsSupervisor) async throws -> Void) async throws {
        let supervisor = APNsSupervisor(configuration: APNsSupervisorConfiguration(pool: .init(connections: 1), retry: retry),
                                        factory: ScriptedFactory(script: script))
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

    @Test("submitted with no stream free, a send waits in the queue with no task; cancelQueued takes it out unsent")
    func queuedWithoutATask() async throws {
        let script = ScriptedAPNs()
        // Not running: no connection will come.
        let supervisor = APNsSupervisor(configuration: APNsSupervisorConfiguration(pool: .init(connections: 1)), factory: ScriptedFactory(script: script))
        let (outcomes, answered) = AsyncStream.makeStream(of: APNsOutcome.self)
        let cancellation = APNsSendCancellation()
        supervisor.submit(try Self.notification(1), cancellation: cancellation) { answered.yield($0) }
        supervisor.submit(try Self.notification(2)) { answered.yield($0) }
        #expect(supervisor.queuedCount == 2)
        supervisor.cancelQueued(cancellation)
        var iterator = outcomes.makeAsyncIterator()
        let outcome = await iterator.next()
        #expect(outcome?.lastAttempt == .failure(.cancelled) && outcome?.attempts == 0)
        #expect(supervisor.queuedCount == 1, "only the sends given that cancellation leave")
        #expect(script.sends.value == 0)
    }

    @Test("submitted sends: written at once or when a stream frees; a 503 waits out its backoff on the supervisor's timer and is written again; cancelQueued ends a send in its backoff at once; a cancelled one is written no more")
    func submittedWithoutATask() async throws {
        let script = ScriptedAPNs()
        let unavailable = APNsAttemptResult.response(APNsResponse(status: 503, reason: .serviceUnavailable))
        try await supervise(script) { supervisor in
            while supervisor.readyConnectionCount == 0 { await Task.yield() }
            let (outcomes, answered) = AsyncStream.makeStream(of: (Int, APNsOutcome).self)
            var iterator = outcomes.makeAsyncIterator()
            let secondCancellation = APNsSendCancellation()

            supervisor.submit(try Self.notification(1)) { answered.yield((1, $0)) }
            supervisor.submit(try Self.notification(2), cancellation: secondCancellation) { answered.yield((2, $0)) }
            await script.sends.reached(2)
            script.answerWaiting(unavailable)
            _ = await waitUntil(timeout: .seconds(30)) { supervisor.retryingCount == 2 }
            #expect(supervisor.retryingCount == 2 && supervisor.inFlightCount == 0, "both wait out a backoff, their streams free again")

            // Ended in its backoff: at once, with its one attempt, and nothing more is written for it.
            supervisor.cancelQueued(secondCancellation)
            let cancelled = await iterator.next()
            #expect(cancelled?.0 == 2 && cancelled?.1.lastAttempt == .failure(.cancelled) && cancelled?.1.attempts == 1)

            // The first's backoff ends: written again, delivered, both attempts counted.
            script.answerAll(.response(APNsResponse(status: 200)))
            let retried = await iterator.next()
            #expect(retried?.0 == 1 && retried?.1.classification == .delivered && retried?.1.attempts == 2)
            #expect(script.sends.value == 3)

        }
    }

    @Test("a send queued behind busy streams whose cancellation is cancelled before a stream frees is dispatched but never written")
    func cancelledWhileQueued() async throws {
        let script = ScriptedAPNs()
        try await supervise(script) { supervisor in
            while supervisor.readyConnectionCount == 0 { await Task.yield() }
            let (outcomes, answered) = AsyncStream.makeStream(of: APNsOutcome.self)
            var iterator = outcomes.makeAsyncIterator()
            for index in 10..<20 { supervisor.submit(try Self.notification(index)) { answered.yield($0) } }
            await script.sends.reached(10)
            let cancellation = APNsSendCancellation()
            supervisor.submit(try Self.notification(20), cancellation: cancellation) { answered.yield($0) }
            supervisor.submit(try Self.notification(21)) { answered.yield($0) }
            #expect(supervisor.queuedCount == 2)
            cancellation.cancel()
            script.answerAll(.response(APNsResponse(status: 200)))
            let counts = await Self.finalOutcomes(12, from: &iterator)
            #expect(counts?.delivered == 11 && counts?.cancelled == 1)
            #expect(script.sends.value == 11, "the cancelled one was dispatched but not written")
        }
    }

    @Test("a batch submitted under one lock: written while streams are free, the rest queued, each answered once; a cancelled one is not written")
    func submittedInABatch() async throws {
        let script = ScriptedAPNs()
        try await supervise(script) { supervisor in
            while supervisor.readyConnectionCount == 0 { await Task.yield() }
            let (outcomes, answered) = AsyncStream.makeStream(of: APNsOutcome.self)
            var iterator = outcomes.makeAsyncIterator()
            let cancellation = APNsSendCancellation()
            let batch = try (0..<15).map { index in
                APNsSupervisor.Submission(try Self.notification(index), cancellation: index == 12 ? cancellation : nil) { answered.yield($0) }
            }
            supervisor.submit(batch)
            await script.sends.reached(10)
            #expect(supervisor.inFlightCount == 10 && supervisor.queuedCount == 5, "the connection's 10 streams taken, 5 wait")
            cancellation.cancel()
            script.answerAll(.response(APNsResponse(status: 200)))
            let counts = await Self.finalOutcomes(15, from: &iterator)
            #expect(counts?.delivered == 14 && counts?.cancelled == 1)
            #expect(script.sends.value == 14, "the cancelled one was dispatched but not written")
            #expect(supervisor.inFlightCount == 0 && supervisor.queuedCount == 0)
        }
    }

    @Test("a submitted send's cancellation and write permit hold for its retries too: stopped in its backoff after a 503, the retry writes nothing",
          arguments: [false, true])
    func retryKeepsItsCancellation(byPermit: Bool) async throws {
        let script = ScriptedAPNs()
        try await supervise(script) { supervisor in
            while supervisor.readyConnectionCount == 0 { await Task.yield() }
            let (outcomes, answered) = AsyncStream.makeStream(of: APNsOutcome.self)
            var iterator = outcomes.makeAsyncIterator()
            let cancellation = APNsSendCancellation()
            supervisor.submit(try Self.notification(1), cancellation: cancellation) { answered.yield($0) }
            await script.sends.reached(1)
            script.answerWaiting(.response(APNsResponse(status: 503, reason: .serviceUnavailable)))
            _ = await waitUntil(timeout: .seconds(30)) { supervisor.retryingCount == 1 }
            // The relay stops writing for the send's partition (a hand-over), or its ownership lease runs out; nobody
            // calls cancelQueued: the timer's turn finds the send stopped.
            if byPermit { cancellation.permitWrites(until: .now()) } else { cancellation.cancel() }
            script.answerAll(.response(APNsResponse(status: 200)))
            let outcome = await iterator.next()
            #expect(outcome?.lastAttempt == .failure(.cancelled), "\(String(describing: outcome))")
            #expect(outcome?.attempts == 1)
            #expect(script.sends.value == 1, "the retry was written after its send was stopped")
        }
    }

    @Test("the pool's end cuts a backoff short: the send completes cancelled, once, and is not written again")
    func shutdownEndsBackoffs() async throws {
        let script = ScriptedAPNs()
        let (outcomes, answered) = AsyncStream.makeStream(of: APNsOutcome.self)
        var retry = APNsRetryPolicy()
        retry.backoff = Backoff(base: .seconds(60), cap: .seconds(60))
        try await supervise(script, retry: retry) { supervisor in
            while supervisor.readyConnectionCount == 0 { await Task.yield() }
            supervisor.submit(try Self.notification(1)) { answered.yield($0) }
            await script.sends.reached(1)
            script.answerWaiting(.response(APNsResponse(status: 503, reason: .serviceUnavailable)))
            _ = await waitUntil(timeout: .seconds(30)) { supervisor.retryingCount == 1 }
        }
        answered.finish()
        var all: [APNsOutcome] = []
        for await outcome in outcomes { all.append(outcome) }
        #expect(all.count == 1 && all[0].lastAttempt == .failure(.cancelled) && all[0].attempts == 1, "\(all)")
        #expect(script.sends.value == 1)
    }

    /// Takes `count` outcomes from `iterator`: how many were delivered and how many cancelled; `nil` (and an issue
    /// recorded) when they ran out.
    static func finalOutcomes(_ count: Int, from iterator: inout AsyncStream<APNsOutcome>.Iterator) async -> (delivered: Int, cancelled: Int)? {
        var delivered = 0, cancelled = 0
        for _ in 0..<count {
            guard let outcome = await iterator.next() else {
                Issue.record("every send is answered")
                return nil
            }
            if outcome.classification == .delivered { delivered += 1 }
            if outcome.lastAttempt == .failure(.cancelled) { cancelled += 1 }
        }
        return (delivered, cancelled)
    }

    static func notification(_ index: Int) throws -> APNsNotification {
        try APNsNotification(token: try APNsDeviceToken(hex: String(format: "%064x", index)), topic: "com.example.app",
                             payload: Array(#"{"aps":{"badge":1}}"#.utf8))
    }
}
