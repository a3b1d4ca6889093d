public import NIOCore
public import Logging
import Foundation
import Metrics
import Synchronization

/// The connection supervisor: a pool of connections to one endpoint with one credential, and the retry loop.
///
/// Use it with structured concurrency: run ``run()`` in a task group (or as a service), call ``send(_:)``
/// from any number of tasks, and end with ``shutdown(gracePeriod:)``; `run()` returns once every connection is
/// closed. The transport is whatever the ``APNsConnectionFactory`` makes.
///
/// Retries follow ``APNsRetryStateMachine`` (the table is ``APNsRetryTable``):
/// the supervisor carries out its decisions, renewing the factory's ``APNsConnectionFactory/tokenProvider`` when
/// it says so and taking a connection out of rotation when it asks for another.
///
/// Metrics: `apns_notifications_total{outcome}` (`delivered`, `permanent`, `token_dead`, `failed`, `expired`,
/// `cancelled`),
/// `apns_attempts_total`, `apns_retries_total{cause}` (``APNsRetryCause``: `goaway`, `refused`, `5xx`, `429`,
/// `connection`, `expired_provider_token`, `stream`),
/// `apns_connections_opened_total`, `apns_connect_failures_total`, `apns_connections_closed_total`,
/// `apns_send_duration` (timer).
public final class APNsSupervisor: Sendable, APNsConnectionDelegate {
    private enum Work: Sendable {
        case connect(slot: Int, id: APNsConnectionID)
        /// Tell the state machine at `at` that its time came.
        case timer(at: NIODeadline, Alarm)
        case close(any APNsConnection, graceful: Bool)
        case finish
    }

    private enum Alarm: Sendable {
        case slot(Int)
        case drainDeadline
        case waitDeadline
    }

    private enum Acquired: Sendable {
        case connection(any APNsConnection)
        case failed(APNsTransportFailure)
    }

    /// A send with no task of its own (``submit(_:cancellation:completion:)``): written at once, or from ``apply(_:)``
    /// when the pool hands its queued request a stream.
    ///
    /// An immutable object: it goes from the batch to the queue or the write, into the write's completion and back
    /// on the connection's thread, and each copy of a struct this wide retained every field.
    private final class SubmittedSend: Sendable {
        let notification: APNsNotification
        /// Carries the send's cancellation, for this attempt and its retries.
        let progress: APNsSendProgress
        let completion: @Sendable (APNsFirstAttempt) -> Void

        init(notification: APNsNotification, progress: APNsSendProgress, completion: @escaping @Sendable (APNsFirstAttempt) -> Void) {
            self.notification = notification
            self.progress = progress
            self.completion = completion
        }
    }

    /// Who waits for a queued request's stream: a task (``send(_:)``) or a queued send (``submit(_:cancellation:completion:)``).
    private enum Waiter {
        case task(CheckedContinuation<Acquired, Never>)
        case queued(SubmittedSend)
    }

    private struct State {
        var machine: APNsPoolStateMachine
        var nextRequestID: UInt64 = 0
        var waiters: [APNsRequestID: Waiter] = [:]
        var connections = ConnectionTable<any APNsConnection>()
        var shutdownWaiters: [CheckedContinuation<Void, Never>] = []
        var finished = false
        /// The connection-state counts last exported, to record gauges only on change.
        var exportedConnectionStates: APNsConnectionStateCounts?
        /// The machine's ``APNsPoolStateMachine/connectionStatesVersion`` when the counts were last looked at.
        var exportedConnectionStatesVersion: UInt64?
    }

    private struct Effects {
        var resumes: [(CheckedContinuation<Acquired, Never>, Acquired)] = []
        var queuedDispatches: [(SubmittedSend, any APNsConnection)] = []
        var queuedFailures: [(SubmittedSend, APNsTransportFailure)] = []
        var work: [Work] = []
        var shutdownWaiters: [CheckedContinuation<Void, Never>] = []
        var connectionStates: APNsConnectionStateCounts?
    }

    private let configuration: APNsSupervisorConfiguration
    private let factory: any APNsConnectionFactory
    private let state: Mutex<State>
    private let workStream: AsyncStream<Work>
    private let workContinuation: AsyncStream<Work>.Continuation
    private let now: @Sendable () -> NIODeadline
    private let wallClock: @Sendable () -> Int64
    private let random: @Sendable () -> Double
    private let sleep: @Sendable (TimeAmount) async throws -> Void
    private let logger: Logger
    private let metrics: APNsSupervisorMetrics
    /// Whether APNs accepts this pool's credential, from its answers (readiness reads it).
    public let credentialStanding = APNsCredentialStanding()

    /// Creates a supervisor.
    ///
    /// - Parameters:
    ///   - now: the monotonic clock (inject for tests).
    ///   - wallClock: UNIX epoch milliseconds, to read `apns-expiration` against (inject for tests).
    ///   - random: values in `[0, 1)` for jitter (inject for tests).
    ///   - sleep: how the retry loop and timers wait (inject for tests). It must end early, throwing or returning,
    ///     when its task is cancelled: a cancelled `send` stops sleeping before a retry and returns.
    public init(
        configuration: APNsSupervisorConfiguration,
        factory: any APNsConnectionFactory,
        logger: Logger = Logger(label: "apns.supervisor"),
        now: @escaping @Sendable () -> NIODeadline = { .now() },
        wallClock: @escaping @Sendable () -> Int64 = APNsSupervisor.systemWallClock,
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
        sleep: @escaping @Sendable (TimeAmount) async throws -> Void = { amount in
            try await Task.sleep(nanoseconds: UInt64(max(0, amount.nanoseconds)))
        }
    ) {
        self.configuration = configuration
        self.metrics = APNsSupervisorMetrics(poolDimensions: configuration.connectionGaugeDimensions)
        self.factory = factory
        self.logger = logger
        self.now = now
        self.wallClock = wallClock
        self.random = random
        self.sleep = sleep
        self.state = Mutex(State(machine: APNsPoolStateMachine(configuration: configuration.pool)))
        (self.workStream, self.workContinuation) = AsyncStream.makeStream(of: Work.self)
    }

    /// UNIX epoch milliseconds from the system clock: the default `wallClock`.
    public static let systemWallClock: @Sendable () -> Int64 = { Int64((Date().timeIntervalSince1970 * 1_000).rounded(.down)) }

    // MARK: public API

    /// Runs the pool: opens connections, reconnects, runs timers. Returns after ``shutdown(gracePeriod:)``
    /// has closed every connection (or when the surrounding task is cancelled).
    public func run() async {
        apply { $0.machine.start(now: now()) }
        await withTaskGroup(of: Void.self) { group in
            for await work in workStream {
                switch work {
                case .connect(let slot, let id):
                    group.addTask { await self.connect(slot: slot, id: id) }
                case .timer(let at, let alarm):
                    group.addTask {
                        // Cancelled timers (the pool is done) end their sleep early and fire nothing.
                        do { try await self.sleep(at - self.now()) } catch { return }
                        if Task.isCancelled { return }
                        self.apply { state in
                            switch alarm {
                            case .slot(let slot): state.machine.timerFired(slot: slot, now: self.now())
                            case .drainDeadline: state.machine.drainDeadlinePassed()
                            case .waitDeadline: state.machine.waitDeadlinePassed(now: self.now())
                            }
                        }
                    }
                case .close(let connection, let graceful):
                    group.addTask { await connection.close(graceful: graceful) }
                case .finish:
                    workContinuation.finish()
                }
            }
            // Remaining timers are moot; close tasks finish regardless of cancellation.
            group.cancelAll()
        }
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.finished = true
            let waiters = state.shutdownWaiters
            state.shutdownWaiters = []
            return waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Sends one notification: waits for a stream, retries as ``APNsRetryStateMachine`` decides, and returns the
    /// final outcome. Never throws.
    ///
    /// The send has a deadline: `maxRetryDuration` after the call, or the notification's `apns-expiration` when sooner. Until it
    /// a spell (5xx, 429, an expired provider token, lost connections) is retried with growing, jittered backoff
    /// (never before a `Retry-After`), streams APNs never processed at once; only failures of the request itself are
    /// bounded by `maxAttempts`. Attempts count written requests that APNs may have processed. While no connection
    /// can be had (APNs unreachable) the notification waits, spending no attempt, until the deadline: then the
    /// outcome is `.failure(.expired)` (its `apns-expiration`) or `.failure(.noConnection)`. A notification whose
    /// `apns-expiration` has passed is not sent. `apns-expiration: 0` ("deliver once, do not store") is no deadline.
    ///
    /// Cancelling the calling task ends the send promptly with `.failure(.cancelled)` (classified `.retryable`): a
    /// notification still waiting for a stream leaves the queue and is never written; one sleeping before a retry
    /// stops sleeping and is not retried. A request already written is waited for (at most `requestTimeout`; the
    /// connection cannot take it back): a final answer (delivered, rejected, token dead) is returned as it is, a
    /// retryable one becomes `.failure(.cancelled)`. Nothing is sent after cancellation, of the task or of
    /// `cancellation` (checked before each attempt is written, as for a submitted send).
    ///
    /// - Parameter handedOver: when the notification was handed over for sending, if before this call (a send
    ///   another supervisor answered first, such as the other environment's resend): `maxRetryDuration` counts from
    ///   then, read on ``currentTime``'s clock. `nil` is now.
    public func send(_ notification: APNsNotification, cancellation: APNsSendCancellation? = nil,
                     handedOver: NIODeadline? = nil) async -> APNsOutcome {
        let now = now()
        return await send(notification, continuing: progress(of: notification, started: min(handedOver ?? now, now), now: now, cancellation: cancellation))
    }

    /// The supervisor's monotonic clock now: what a later ``send(_:cancellation:handedOver:)`` counts from.
    public var currentTime: NIODeadline { now() }

    /// Sends `notification` with no task or continuation of its own: at once when a ready connection has a stream
    /// free, else queued in the pool until one has (or its wait deadline passes, as for ``send(_:)``).
    ///
    /// `completion` is called once, from any thread (a connection's event loop, or the caller's), with
    /// ``APNsFirstAttempt/finished(_:)`` when the outcome is final, or with ``APNsFirstAttempt/unfinished(_:)`` when
    /// the send goes on (a retry after its backoff): pass that progress to ``send(_:continuing:)`` in a task, whose
    /// cancellation then ends it as ``send(_:)``'s would. A send still queued when ``cancelQueued(_:)`` is called with
    /// its `cancellation` leaves the queue unsent (`.failure(.cancelled)`); one dispatched after `cancellation` was
    /// cancelled (or its write permit ran out) is not written either, nor is any retry of it.
    public func submit(_ notification: APNsNotification, cancellation: APNsSendCancellation? = nil,
                       completion: @escaping @Sendable (APNsFirstAttempt) -> Void) {
        submit([Submission(notification, cancellation: cancellation, completion: completion)])
    }

    /// A send for ``submit(_:)``: what ``submit(_:cancellation:completion:)`` takes.
    public struct Submission: Sendable {
        public var notification: APNsNotification
        public var cancellation: APNsSendCancellation?
        public var completion: @Sendable (APNsFirstAttempt) -> Void

        /// Creates the submission.
        public init(_ notification: APNsNotification, cancellation: APNsSendCancellation?,
                    completion: @escaping @Sendable (APNsFirstAttempt) -> Void) {
            self.notification = notification
            self.cancellation = cancellation
            self.completion = completion
        }
    }

    /// Submits every send of `submissions` as ``submit(_:cancellation:completion:)`` would, in order, under one
    /// lock: the pool's state is taken once per batch rather than twice per notification.
    public func submit(_ submissions: [Submission]) {
        guard !submissions.isEmpty else { return }
        let started = now()
        var expired: [(SubmittedSend, APNsOutcome)] = []
        var writes: [(SubmittedSend, any APNsConnection)] = []
        var sends: [(SubmittedSend, hash: UInt64)] = []
        sends.reserveCapacity(submissions.count)
        for submission in submissions {
            let progress = progress(of: submission.notification, started: started, cancellation: submission.cancellation)
            let send = SubmittedSend(notification: submission.notification, progress: progress, completion: submission.completion)
            if let expiry = progress.expiry, started >= expiry {
                expired.append((send, finish(.failure(.expired), progress, submission.notification)))
            } else {
                sends.append((send, submission.notification.recipient.stableHash))
            }
        }
        applyEach { state in
            var steps: [APNsPoolStateMachine.Actions] = []
            for (send, hash) in sends {
                // A ready connection with room takes it at once, as `takeStreamNow` would.
                if let id = state.machine.dispatchImmediately(hash: hash) {
                    if let connection = state.connections[id] {
                        writes.append((send, connection))
                        continue
                    }
                    steps.append(state.machine.requestFinished(connection: id, delivered: false))
                }
                let id = APNsRequestID(state.nextRequestID)
                state.nextRequestID &+= 1
                state.waiters[id] = .queued(send)
                steps.append(state.machine.enqueue(id, hash: hash, waitingUntil: send.progress.retry.deadline, now: started))
            }
            return steps
        }
        for (send, connection) in writes { write(send, on: connection) }
        for (send, outcome) in expired { send.completion(.finished(outcome)) }
    }

    /// Takes the sends submitted with `cancellation` that still wait for a stream out of the queue: each completes
    /// with `.failure(.cancelled)`, unsent. Sends already written are not affected.
    public func cancelQueued(_ cancellation: APNsSendCancellation) {
        apply { state in
            var actions = APNsPoolStateMachine.Actions()
            for (id, waiter) in state.waiters {
                guard case .queued(let send) = waiter, send.progress.cancellation === cancellation else { continue }
                actions.merge(state.machine.cancel(id))
            }
            return actions
        }
    }

    /// Writes a queued send's next attempt on `connection` (whose stream it holds); its answer is settled on the
    /// connection's thread.
    private func write(_ send: SubmittedSend, on connection: any APNsConnection) {
        if send.progress.isStopped {
            send.completion(.finished(cancelledBeforeWriting(on: connection, send.progress, send.notification)))
            return
        }
        metrics.attempts.increment()
        let id = connection.id
        let tokenGeneration = factory.tokenProvider?.generation
        connection.send(send.notification, deadline: now() + TimeAmount(configuration.requestTimeout)) { result in
            var progress = send.progress
            if let outcome = self.settle(result, on: id, tokenGeneration: tokenGeneration, of: send.notification, progress: &progress, cancelled: false) {
                send.completion(.finished(outcome))
            } else {
                send.completion(.unfinished(progress))
            }
        }
    }

    /// A queued send that will not be written: given up (its wait deadline, cancelled, shutting down), or handed a
    /// connection that closed meanwhile (then it goes on as a refusal, in a task).
    private func fail(_ send: SubmittedSend, _ reason: APNsTransportFailure) {
        var progress = send.progress
        if let outcome = waitEnded(reason, progress: &progress, of: send.notification) {
            send.completion(.finished(outcome))
        } else {
            send.completion(.unfinished(progress))
        }
    }

    /// A wait for a stream that ended without one: the final outcome, or `nil` when the send goes on (handed a
    /// connection that closed meanwhile: nothing was written, so it is retried as a refusal, not an attempt). One
    /// rule for sends waiting in a task and sends queued without one.
    private func waitEnded(_ reason: APNsTransportFailure, progress: inout APNsSendProgress, of notification: APNsNotification) -> APNsOutcome? {
        let decision = progress.retry.waitEnded(reason, now: now(), jitter: random(), shuttingDown: isShuttingDown)
        guard decision == .final else {
            carryOut(decision, tokenGeneration: nil, progress: &progress)
            return nil
        }
        // The deadline passed without a connection: the notification expired when its expiry was the deadline, else
        // `maxRetryDuration` ran out.
        if reason == .noConnection {
            return finish(.failure(progress.expiry == progress.retry.deadline ? .expired : .noConnection), progress, notification)
        }
        return finish(.failure(reason), progress, notification)
    }

    /// A send handed a stream but cancelled before it was written: the stream goes back unused.
    private func cancelledBeforeWriting(on connection: any APNsConnection, _ progress: APNsSendProgress,
                                        _ notification: APNsNotification) -> APNsOutcome {
        apply { $0.machine.requestFinished(connection: connection.id, delivered: false) }
        return finish(.failure(.cancelled), progress, notification)
    }

    /// Goes on with a send that ``submit(_:cancellation:completion:)`` began (or, with a fresh progress, starts one):
    /// the backoff it owes, then attempts as ``send(_:)`` makes them, each written only while neither the task nor the
    /// send's ``APNsSendCancellation`` (carried in `begun`) is cancelled.
    public func send(_ notification: APNsNotification, continuing begun: APNsSendProgress) async -> APNsOutcome {
        var progress = begun
        while true {
            if let backoff = progress.backoff {
                progress.backoff = nil
                do {
                    try await sleep(backoff)
                } catch {
                    return finish(.failure(.cancelled), progress, notification)
                }
            }
            // The task's cancellation, or the send's own (a submitted send's retry: its partition was handed over, its lease ran out).
            if Task.isCancelled || progress.isStopped { return finish(.failure(.cancelled), progress, notification) }
            if let expiry = progress.expiry, now() >= expiry { return finish(.failure(.expired), progress, notification) }
            switch await acquire(hash: notification.recipient.stableHash, until: progress.retry.deadline) {
            case .failed(let reason):
                if let outcome = waitEnded(reason, progress: &progress, of: notification) { return outcome }
            case .connection(let connection):
                if Task.isCancelled || progress.isStopped { return cancelledBeforeWriting(on: connection, progress, notification) }
                metrics.attempts.increment()
                let tokenGeneration = factory.tokenProvider?.generation
                let result = await connection.send(notification, deadline: now() + TimeAmount(configuration.requestTimeout))
                if let outcome = settle(result, on: connection.id, tokenGeneration: tokenGeneration, of: notification, progress: &progress,
                                        cancelled: Task.isCancelled) {
                    return outcome
                }
            }
        }
    }

    /// Books an attempt's result: frees its stream, asks the retry state machine, and returns the final outcome, or
    /// `nil` when another attempt follows (after ``APNsSendProgress/backoff``, if any). `tokenGeneration` names the
    /// provider token the request carried.
    private func settle(_ result: APNsAttemptResult, on connection: APNsConnectionID, tokenGeneration: UInt64?, of notification: APNsNotification,
                        progress: inout APNsSendProgress, cancelled: Bool) -> APNsOutcome? {
        if case .failure(let failure) = result {
            logger.debug("APNs attempt failed", metadata: ["connection": "\(connection)", "failure": "\(failure)", "token": "\(notification.recipient.shortDescription)"])
        }
        let decision = progress.retry.attemptEnded(result, now: now(), jitter: random(), shuttingDown: isShuttingDown)
        let delivered = result.classification == .delivered
        apply { state in
            // Out of rotation first, so that the freed stream takes no queued request on the way.
            var actions = APNsPoolStateMachine.Actions()
            if case .retryOnAnotherConnection = decision { actions.merge(state.machine.connectionGoingAway(connection, now: now())) }
            actions.merge(state.machine.requestFinished(connection: connection, delivered: delivered))
            return actions
        }
        guard decision != .final else { return finish(result, progress, notification) }
        // Cancelled while the request was on the wire: an answer asking for a retry ends it, unretried.
        if cancelled { return finish(.failure(.cancelled), progress, notification) }
        carryOut(decision, tokenGeneration: tokenGeneration, progress: &progress)
        return nil
    }

    /// Carries out a decision to retry: counts it by cause, renews the provider token when asked, and sets the pause
    /// owed before the next attempt.
    private func carryOut(_ decision: APNsRetryDecision, tokenGeneration: UInt64?, progress: inout APNsSendProgress) {
        if let cause = decision.cause { metrics.retried(cause) }
        switch decision {
        case .final, .retryNow, .retryOnAnotherConnection:
            progress.backoff = nil
        case .retryAfter(let delay, _):
            progress.backoff = delay
        case .renewCredentialThenRetry(let ifNotRenewed):
            switch tokenGeneration.flatMap({ factory.tokenProvider?.renewAfterExpiredProviderToken(generation: $0) }) {
            case .renewed?, .alreadyRenewed?: progress.backoff = nil
            case .deferred?, nil: progress.backoff = ifNotRenewed
            }
        }
    }

    /// Graceful drain: stop accepting, let queued and in-flight work finish within `gracePeriod`, then close
    /// every connection with GOAWAY. Returns when the pool is shut down (requires ``run()`` to be running).
    public func shutdown(gracePeriod: TimeAmount) async {
        let deadline = now() + gracePeriod
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let alreadyDone = state.withLock { state -> Bool in
                if state.finished { return true }
                state.shutdownWaiters.append(continuation)
                return false
            }
            if alreadyDone {
                continuation.resume()
                return
            }
            workContinuation.yield(.timer(at: deadline, .drainDeadline))
            apply { $0.machine.drain() }
        }
    }

    /// Connections that are ready to carry work.
    public var readyConnectionCount: Int { state.withLock { $0.machine.readyConnections.count } }

    /// The peer's stream limit of each ready connection.
    public var streamLimits: [Int] {
        state.withLock { state in state.machine.readyConnections.compactMap { state.machine.maxStreams(of: $0) } }
    }

    /// Requests waiting for a stream.
    public var queuedCount: Int { state.withLock { $0.machine.queuedCount } }

    /// Requests in flight on connections.
    public var inFlightCount: Int { state.withLock { $0.machine.inFlightCount } }

    /// The notifications the pool's usable connections can have on the wire at once (the sum of their peers'
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`); `0` while none is usable. Sends beyond it wait in the pool's queue.
    /// Unlike ``streamLimits``, a connection going away (GOAWAY) does not count: it takes no new request.
    public var streamCapacity: Int {
        state.withLock { $0.machine.streamCapacity }
    }

    /// Whether the pool is draining or shut down.
    public var isShuttingDown: Bool {
        state.withLock { $0.machine.lifecycle == .draining || $0.machine.lifecycle == .shutDown }
    }

    /// Replaces every open connection gracefully (a renewed client certificate): each takes no new request, finishes
    /// those in flight and closes, while its slot connects again at once with what the factory makes now. Requests
    /// waiting for a stream move to the new connections; none fails for the replacement.
    public func replaceConnections() {
        logger.info("replacing the APNs connections (renewed credential)")
        let now = now()
        applyEach { state in state.machine.readyConnections.map { state.machine.connectionGoingAway($0, now: now) } }
    }

    // MARK: APNsConnectionDelegate

    public func connection(_ id: APNsConnectionID, maxConcurrentStreamsChanged limit: Int) {
        apply { $0.machine.maxStreamsChanged(connection: id, limit: limit) }
    }

    public func connectionGoingAway(_ id: APNsConnectionID) {
        logger.info("APNs connection going away", metadata: ["connection": "\(id)"])
        apply { $0.machine.connectionGoingAway(id, now: now()) }
    }

    public func connectionClosed(_ id: APNsConnectionID) {
        metrics.connectionsClosed.increment()
        let jitter = random()
        apply { state in
            state.connections[id] = nil
            return state.machine.connectionClosed(id, now: now(), jitter: jitter)
        }
    }

    // MARK: internals

    private func finish(_ last: APNsAttemptResult, _ progress: APNsSendProgress, _ notification: APNsNotification) -> APNsOutcome {
        let outcome = APNsOutcome(classification: last.classification, lastAttempt: last, attempts: progress.retry.attempts, apnsID: notification.apnsID)
        metrics.finished(outcome, last: last, nanoseconds: (now() - progress.started).nanoseconds)
        if case .response(let response) = last, response.status == 403 || credentialStanding.current != nil,
           let refusal = credentialStanding.observe(response) {
            metrics.credentialRefused(refusal.reason)
            // The first of a run, then one line per thousand: every notification of the pool gets the same answer.
            if refusal.count % 1_000 == 1 {
                logger.error("APNs refused the pool's credential: a configuration error (the key's environment or topics, or the key itself); notifications through this pool are rejected until it is fixed",
                             metadata: ["reason": "\(refusal.reason)", "refusals": "\(refusal.count)"])
            }
        }
        return outcome
    }

    /// The monotonic time of the notification's `apns-expiration`; `nil` without one or for 0 (not a date).
    private func expiryDeadline(of notification: APNsNotification, now: NIODeadline) -> NIODeadline? {
        guard let expiration = notification.expiration, expiration > 0 else { return nil }
        let (milliseconds, overflow) = expiration.multipliedReportingOverflow(by: 1_000)
        // NIODeadline arithmetic saturates: a date beyond what it holds is the distant future, a past one `now`.
        return overflow ? .distantFuture : now + .milliseconds(max(0, milliseconds - wallClock()))
    }

    /// A send's progress at its start: its retries and deadline (`maxRetryDuration` after `started`, or its expiry).
    private func progress(of notification: APNsNotification, started: NIODeadline, now: NIODeadline? = nil,
                          cancellation: APNsSendCancellation?) -> APNsSendProgress {
        APNsSendProgress(policy: configuration.retry, started: started, expiry: expiryDeadline(of: notification, now: now ?? started),
                         cancellation: cancellation)
    }

    /// A stream on a ready connection with room, taken now; `nil` when none has one. A connection the pool still
    /// counts but that left the table (closed meanwhile) gives the stream back: nothing was written on it.
    private func takeStreamNow(hash: UInt64) -> (any APNsConnection)? {
        let taken = state.withLock { state -> (APNsConnectionID, (any APNsConnection)?)? in
            guard let id = state.machine.dispatchImmediately(hash: hash) else { return nil }
            return (id, state.connections[id])
        }
        guard let (id, connection) = taken else { return nil }
        if connection == nil { apply { $0.machine.requestFinished(connection: id, delivered: false) } }
        return connection
    }

    /// A stream for a token's hash, waiting for one at most until `deadline` (then `.failed(.noConnection)`), or
    /// until the task is cancelled (then `.failed(.cancelled)`, and the request has left the queue).
    private func acquire(hash: UInt64, until deadline: NIODeadline) async -> Acquired {
        // A ready connection with room takes the request at once: no suspension, no waiter to register.
        if let connection = takeStreamNow(hash: hash) { return .connection(connection) }
        let id = state.withLock { state in
            defer { state.nextRequestID &+= 1 }
            return APNsRequestID(state.nextRequestID)
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Acquired, Never>) in
                apply { state in
                    state.waiters[id] = .task(continuation)
                    // The handler may have run before the request was queued (it then found nothing to cancel).
                    // Both run under the lock, so one of the two always sees the other.
                    guard !Task.isCancelled else {
                        var actions = APNsPoolStateMachine.Actions()
                        actions.fail.append(.init(request: id, reason: .cancelled))
                        return actions
                    }
                    return state.machine.enqueue(id, hash: hash, waitingUntil: deadline, now: now())
                }
            }
        } onCancel: {
            apply { $0.machine.cancel(id) }
        }
    }

    private func connect(slot: Int, id: APNsConnectionID) async {
        do {
            let established = try await factory.makeConnection(id: id, delegate: self)
            metrics.connectionsOpened.increment()
            apply { state in
                state.connections[id] = established.connection
                return state.machine.connectionEstablished(slot: slot, id: id, maxStreams: established.maxConcurrentStreams, now: now())
            }
        } catch {
            metrics.connectFailures.increment()
            logger.warning("APNs connect failed", metadata: ["connection": "\(id)", "error": "\(error)"])
            let jitter = random()
            apply { $0.machine.connectFailed(slot: slot, id: id, now: now(), jitter: jitter) }
        }
    }

    /// Runs an event through the state machine under the lock, then executes its actions outside the lock.
    private func apply(_ event: (inout State) -> APNsPoolStateMachine.Actions) {
        perform(state.withLock { state -> Effects in
            var effects = Effects()
            collect(event(&state), into: &effects, state: &state)
            return effects
        })
    }

    /// Runs events through the state machine under one lock, then executes their actions outside it, in order.
    /// Their actions are taken one by one, not merged: ``APNsPoolStateMachine/Actions/merge(_:)`` keeps one wait
    /// timer of several, and the machine counts each it hands out as armed.
    private func applyEach(_ events: (inout State) -> [APNsPoolStateMachine.Actions]) {
        let effects = state.withLock { state -> Effects in
            var effects = Effects()
            for actions in events(&state) { collect(actions, into: &effects, state: &state) }
            return effects
        }
        perform(effects)
    }

    /// Executes what ``collect(_:into:state:)`` gathered, outside the lock.
    private func perform(_ effects: Effects) {
        if let counts = effects.connectionStates {
            for (name, count) in counts.byState {
                Gauge(label: "apns_connections", dimensions: [("state", name)] + configuration.connectionGaugeDimensions).record(count)
            }
        }
        for work in effects.work { workContinuation.yield(work) }
        for (waiter, value) in effects.resumes { waiter.resume(returning: value) }
        for (send, connection) in effects.queuedDispatches { write(send, on: connection) }
        for (send, reason) in effects.queuedFailures { fail(send, reason) }
    }

    /// What the machine's `actions` ask for, under the lock: waiters to resume, sends to write or fail, work for
    /// ``run()``, and the connection-state counts when they changed.
    private func collect(_ actions: APNsPoolStateMachine.Actions, into effects: inout Effects, state: inout State) {
        for dispatch in actions.dispatch {
            guard let waiter = state.waiters.removeValue(forKey: dispatch.request) else { continue }
            switch (waiter, state.connections[dispatch.connection]) {
            case (.task(let continuation), let connection?): effects.resumes.append((continuation, .connection(connection)))
            // The connection closed before the request was written on it: never processed.
            case (.task(let continuation), nil): effects.resumes.append((continuation, .failed(.refused)))
            case (.queued(let send), let connection?): effects.queuedDispatches.append((send, connection))
            case (.queued(let send), nil): effects.queuedFailures.append((send, .refused))
            }
        }
        for failure in actions.fail {
            switch state.waiters.removeValue(forKey: failure.request) {
            case .task(let continuation): effects.resumes.append((continuation, .failed(failure.reason)))
            case .queued(let send): effects.queuedFailures.append((send, failure.reason))
            case nil: break
            }
        }
        for connect in actions.connect { effects.work.append(.connect(slot: connect.slot, id: connect.id)) }
        for timer in actions.timers { effects.work.append(.timer(at: timer.at, .slot(timer.slot))) }
        if let at = actions.waitTimer { effects.work.append(.timer(at: at, .waitDeadline)) }
        for close in actions.close {
            if let connection = state.connections[close.connection] {
                effects.work.append(.close(connection, graceful: close.graceful))
            }
        }
        if actions.shutdownComplete {
            state.connections.removeAll()
            effects.work.append(.finish)
        }
        if state.machine.connectionStatesVersion != state.exportedConnectionStatesVersion {
            state.exportedConnectionStatesVersion = state.machine.connectionStatesVersion
            let counts = state.machine.connectionStateCounts
            if counts != state.exportedConnectionStates {
                state.exportedConnectionStates = counts
                effects.connectionStates = counts
            }
        }
    }
}
