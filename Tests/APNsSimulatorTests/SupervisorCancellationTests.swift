import APNs
import NIOCore
import Synchronization
import Testing

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

    @Test("submitted with no stream free, a send waits in the queue with no task; cancelQueued takes it out unsent")
    func queuedWithoutATask() async throws {
        let script = ScriptedAPNs()
        // Not running: no connection will come.
        let supervisor = APNsSupervisor(configuration: APNsSupervisorConfiguration(pool: .init(connections: 1)), factory: ScriptedFactory(script: script))
        let (outcomes, answered) = AsyncStream.makeStream(of: APNsFirstAttempt.self)
        let cancellation = APNsSendCancellation()
        supervisor.submit(try Self.notification(1), cancellation: cancellation) { answered.yield($0) }
        supervisor.submit(try Self.notification(2)) { answered.yield($0) }
        #expect(supervisor.queuedCount == 2)
        supervisor.cancelQueued(cancellation)
        var iterator = outcomes.makeAsyncIterator()
        guard case .finished(let outcome) = await iterator.next() else { Issue.record("a cancelled queued send is over"); return }
        #expect(outcome.lastAttempt == .failure(.cancelled) && outcome.attempts == 0)
        #expect(supervisor.queuedCount == 1, "only the sends given that cancellation leave")
        #expect(script.sends.value == 0)
    }

    @Test("submitted sends: written at once or when a stream frees, with no task; a retry goes on from its progress; a cancelled one is written no more")
    func submittedWithoutATask() async throws {
        let script = ScriptedAPNs()
        let unavailable = APNsAttemptResult.response(APNsResponse(status: 503, reason: .serviceUnavailable))
        try await supervise(script) { supervisor in
            while supervisor.readyConnectionCount == 0 { await Task.yield() }
            let (firsts, answered) = AsyncStream.makeStream(of: APNsFirstAttempt.self)
            var iterator = firsts.makeAsyncIterator()
            let first = try Self.notification(1), second = try Self.notification(2)

            supervisor.submit(first) { answered.yield($0) }
            supervisor.submit(second) { answered.yield($0) }
            await script.sends.reached(2)
            script.answerWaiting(unavailable)
            var progress: [APNsSendProgress] = []
            for _ in 0..<2 {
                guard case .unfinished(let rest) = await iterator.next() else { Issue.record("a 503 is retried"); return }
                progress.append(rest)
            }
            #expect(supervisor.inFlightCount == 0, "both streams are free again")

            // Cancelled before it goes on: it ends cancelled, with its one attempt, and sends nothing.
            let secondProgress = progress[1]
            let cancelled = await withTaskGroup(of: APNsOutcome.self) { group in
                group.cancelAll()
                group.addTask { await supervisor.send(second, continuing: secondProgress) }
                return await group.next()!
            }
            #expect(cancelled.lastAttempt == .failure(.cancelled))
            #expect(cancelled.attempts == 1)
            #expect(script.sends.value == 2)

            // The connection's 10 streams taken, the 11th waits; its cancellation is cancelled before a stream frees.
            for index in 10..<20 { supervisor.submit(try Self.notification(index)) { answered.yield($0) } }
            await script.sends.reached(12)
            let cancellation = APNsSendCancellation()
            supervisor.submit(try Self.notification(20), cancellation: cancellation) { answered.yield($0) }
            supervisor.submit(try Self.notification(21)) { answered.yield($0) }
            #expect(supervisor.queuedCount == 2)
            cancellation.cancel()
            script.answerAll(.response(APNsResponse(status: 200)))
            let counts = await Self.finalOutcomes(12, from: &iterator)
            #expect(counts?.delivered == 11 && counts?.cancelled == 1)
            #expect(script.sends.value == 13, "the cancelled one was dispatched but not written")

            let retried = await supervisor.send(first, continuing: progress[0])
            #expect(retried.classification == .delivered)
            #expect(retried.attempts == 2, "the first attempt counts")
        }
    }

    @Test("a batch submitted under one lock: written while streams are free, the rest queued, each answered once; a cancelled one is not written")
    func submittedInABatch() async throws {
        let script = ScriptedAPNs()
        try await supervise(script) { supervisor in
            while supervisor.readyConnectionCount == 0 { await Task.yield() }
            let (firsts, answered) = AsyncStream.makeStream(of: APNsFirstAttempt.self)
            var iterator = firsts.makeAsyncIterator()
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

    @Test("a submitted send's cancellation and write permit hold for its retries too: stopped after a 503, the retry writes nothing",
          arguments: [false, true])
    func retryKeepsItsCancellation(byPermit: Bool) async throws {
        let script = ScriptedAPNs()
        try await supervise(script) { supervisor in
            while supervisor.readyConnectionCount == 0 { await Task.yield() }
            let (firsts, answered) = AsyncStream.makeStream(of: APNsFirstAttempt.self)
            var iterator = firsts.makeAsyncIterator()
            let notification = try Self.notification(1)
            let cancellation = APNsSendCancellation()
            supervisor.submit(notification, cancellation: cancellation) { answered.yield($0) }
            await script.sends.reached(1)
            script.answerWaiting(.response(APNsResponse(status: 503, reason: .serviceUnavailable)))
            guard case .unfinished(let progress) = await iterator.next() else { Issue.record("a 503 is retried"); return }
            // The relay stops writing for the send's partition (a hand-over), or its ownership lease runs out.
            if byPermit { cancellation.permitWrites(until: .now()) } else { cancellation.cancel() }
            script.answerAll(.response(APNsResponse(status: 200)))
            // The retry runs in a task nobody cancelled: the send's own cancellation is what stops it.
            let outcome = await supervisor.send(notification, continuing: progress)
            #expect(outcome.lastAttempt == .failure(.cancelled), "\(outcome)")
            #expect(outcome.attempts == 1)
            #expect(script.sends.value == 1, "the retry was written after its send was stopped")
        }
    }

    /// Takes `count` answers from `iterator`: how many were delivered and how many cancelled; `nil` (and an issue
    /// recorded) when one was not final.
    static func finalOutcomes(_ count: Int, from iterator: inout AsyncStream<APNsFirstAttempt>.Iterator) async -> (delivered: Int, cancelled: Int)? {
        var delivered = 0, cancelled = 0
        for _ in 0..<count {
            guard case .finished(let outcome) = await iterator.next() else {
                Issue.record("every answer is final")
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
