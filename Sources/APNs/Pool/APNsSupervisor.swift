public import NIOCore
public import Logging
import Foundation
import Metrics
import Synchronization

/// The connection supervisor: a pool of connections to one endpoint with one credential, and the retries.
///
/// Use it with structured concurrency: run ``run()`` in a task group (or as a service), hand it notifications with
/// ``submit(_:)`` from any thread, and end with ``shutdown(gracePeriod:)``; `run()` returns once every connection is
/// closed. The transport is whatever the ``APNsConnectionFactory`` makes. ``send(_:cancellation:handedOver:)`` awaits
/// one submitted send.
///
/// `submit` is the one way in: a send is written at once on a ready connection with a stream free, else queued in the
/// pool; its answer is settled on the connection's thread, and a retry waits out its backoff on a timer of the
/// supervisor's (``run()``), then is submitted again. Retries follow ``APNsRetryStateMachine`` (the table is
/// ``APNsRetryTable``): the supervisor carries out its decisions, renewing the factory's
/// ``APNsConnectionFactory/tokenProvider`` when it says so and taking a connection out of rotation when it asks for
/// another. A send's completion is called once, with the final outcome.
///
/// Metrics: `apns_notifications_total{outcome}` (`delivered`, `permanent`, `token_dead`, `failed`, `expired`,
/// `cancelled`),
/// `apns_attempts_total`, `apns_retries_total{cause}` (``APNsRetryCause``: `goaway`, `refused`, `5xx`, `429`,
/// `connection`, `expired_provider_token`, `stream`),
/// `apns_connections_opened_total`, `apns_connect_failures_total`, `apns_connections_closed_total`,
/// `apns_send_duration` (timer).
public final class APNsSupervisor: Sendable, APNsConnectionDelegate {
    enum Work: Sendable {
        case connect(slot: Int, id: APNsConnectionID)
        /// Tell the state machine at `at` that its time came.
        case timer(at: NIODeadline, Alarm)
        case close(any APNsConnection, graceful: Bool)
        case finish
    }

    enum Alarm: Sendable {
        case slot(Int)
        case drainDeadline
        case waitDeadline
        /// A send's backoff is over: submit it again (``APNsSupervisor/State/retrying``).
        case retry(APNsRequestID)
    }

    /// A submitted send, for its whole life (waits, attempts, retries).
    ///
    /// An immutable object: it goes from the batch to the queue or the write, into the write's completion and back
    /// on the connection's thread, and each copy of a struct this wide retained every field. Where it stands between
    /// attempts (``APNsSendProgress``) travels beside it.
    final class SubmittedSend: Sendable {
        let notification: APNsNotification
        let completion: @Sendable (APNsOutcome) -> Void

        init(notification: APNsNotification, completion: @escaping @Sendable (APNsOutcome) -> Void) {
            self.notification = notification
            self.completion = completion
        }
    }

    /// A send waiting: for a stream in the pool's queue, or for its backoff to end.
    struct WaitingSend {
        var send: SubmittedSend
        /// Its retries and deadline, and the cancellation that stops its writes.
        var progress: APNsSendProgress

        /// Whether it was given `cancellation`, or one made from it.
        func stems(from cancellation: APNsSendCancellation) -> Bool { progress.cancellation?.stems(from: cancellation) == true }
    }

    struct State {
        var machine: APNsPoolStateMachine
        var nextRequestID: UInt64 = 0
        /// Sends queued in the pool for a stream, by their request.
        var queued: [APNsRequestID: WaitingSend] = [:]
        /// Sends waiting out a backoff, each until its ``Alarm/retry(_:)``.
        var retrying: [APNsRequestID: WaitingSend] = [:]
        var connections = ConnectionTable<any APNsConnection>()
        var shutdownWaiters: [CheckedContinuation<Void, Never>] = []
        var finished = false
        /// The connection-state counts last exported, to record gauges only on change.
        var exportedConnectionStates: APNsConnectionStateCounts?
        /// The machine's ``APNsPoolStateMachine/connectionStatesVersion`` when the counts were last looked at.
        var exportedConnectionStatesVersion: UInt64?

        mutating func takeRequestID() -> APNsRequestID {
            defer { nextRequestID &+= 1 }
            return APNsRequestID(nextRequestID)
        }
    }

    private struct Effects {
        var writes: [(WaitingSend, any APNsConnection)] = []
        var waitsEnded: [(WaitingSend, APNsTransportFailure)] = []
        var work: [Work] = []
        var shutdownWaiters: [CheckedContinuation<Void, Never>] = []
        var connectionStates: APNsConnectionStateCounts?
    }

    let configuration: APNsSupervisorConfiguration
    let factory: any APNsConnectionFactory
    let state: Mutex<State>
    private let workStream: AsyncStream<Work>
    let workContinuation: AsyncStream<Work>.Continuation
    let now: @Sendable () -> NIODeadline
    let wallClock: @Sendable () -> Int64
    let random: @Sendable () -> Double
    private let sleep: @Sendable (TimeAmount) async throws -> Void
    let logger: Logger
    let metrics: APNsSupervisorMetrics
    /// Whether APNs accepts this pool's credential, from its answers (readiness reads it).
    public let credentialStanding = APNsCredentialStanding()

    /// Creates a supervisor.
    ///
    /// - Parameters:
    ///   - now: the monotonic clock (inject for tests).
    ///   - wallClock: UNIX epoch milliseconds, to read `apns-expiration` against (inject for tests).
    ///   - random: values in `[0, 1)` for jitter (inject for tests).
    ///   - sleep: how the timers wait (reconnects, deadlines, retries' backoffs; inject for tests). It must end early,
    ///     throwing or returning, when its task is cancelled.
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
                        self.fire(alarm)
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
        let (waiters, retrying) = state.withLock { state -> ([CheckedContinuation<Void, Never>], [WaitingSend]) in
            state.finished = true
            defer { (state.shutdownWaiters, state.retrying) = ([], [:]) }
            return (state.shutdownWaiters, Array(state.retrying.values))
        }
        // Backoffs the pool's end cut short: nothing more is written for them.
        for waiting in retrying { waiting.send.completion(finish(.failure(.cancelled), waiting.progress, waiting.send.notification)) }
        for waiter in waiters { waiter.resume() }
    }

    /// A timer's time came: the pool's machine is told, or a retry's backoff is over.
    private func fire(_ alarm: Alarm) {
        switch alarm {
        case .slot(let slot): apply { $0.machine.timerFired(slot: slot, now: now()) }
        case .drainDeadline: apply { $0.machine.drainDeadlinePassed() }
        case .waitDeadline: apply { $0.machine.waitDeadlinePassed(now: now()) }
        case .retry(let id): retryDue(id)
        }
    }

    /// The supervisor's monotonic clock now: what a ``Submission/handedOver`` is read on.
    public var currentTime: NIODeadline { now() }

    /// A send for ``submit(_:)``.
    public struct Submission: Sendable {
        public var notification: APNsNotification
        /// Once cancelled (or its write permit ran out), nothing more of the send is written, no retry either.
        public var cancellation: APNsSendCancellation?
        /// When the notification was handed over for sending, if before this submission (a send another supervisor
        /// answered first, such as the other environment's resend): `maxRetryDuration` counts from then, read on
        /// ``currentTime``'s clock. `nil` is now.
        public var handedOver: NIODeadline?
        /// Called once, from any thread (a connection's event loop, a timer's task, or the caller's), with the final
        /// outcome. It must be quick.
        public var completion: @Sendable (APNsOutcome) -> Void

        /// Creates the submission.
        public init(_ notification: APNsNotification, cancellation: APNsSendCancellation? = nil, handedOver: NIODeadline? = nil,
                    completion: @escaping @Sendable (APNsOutcome) -> Void) {
            self.notification = notification
            self.cancellation = cancellation
            self.handedOver = handedOver
            self.completion = completion
        }
    }

    /// Sends each of `submissions`, in order, under one lock: written at once when a ready connection has a stream
    /// free, else queued in the pool until one has. The pool's state is taken once per batch rather than twice per
    /// notification.
    ///
    /// Each send has a deadline: `maxRetryDuration` after it was handed over, or its `apns-expiration` when sooner.
    /// Until then a spell (5xx, 429, an expired provider token, lost connections) is retried with growing, jittered
    /// backoff (never before a `Retry-After`), streams APNs never processed at once; only failures of the request
    /// itself are bounded by `maxAttempts`. Attempts count written requests that APNs may have processed. While no
    /// connection can be had (APNs unreachable) the send waits, spending no attempt, until the deadline: then the
    /// outcome is `.failure(.expired)` (its `apns-expiration`) or `.failure(.noConnection)`. A notification whose
    /// `apns-expiration` has passed is not sent. `apns-expiration: 0` ("deliver once, do not store") is no deadline.
    ///
    /// Once a send's ``Submission/cancellation`` is cancelled it is written no more (checked as each attempt is about
    /// to be written): a retry ends `.failure(.cancelled)` (classified `.retryable`), and an answer on the wire is
    /// waited for (at most `requestTimeout`), a final one kept as it is. ``cancelQueued(_:)`` ends those still
    /// waiting at once.
    public func submit(_ submissions: [Submission]) {
        guard !submissions.isEmpty else { return }
        let now = now()
        var sends: [WaitingSend] = []
        sends.reserveCapacity(submissions.count)
        for submission in submissions {
            let progress = progress(of: submission.notification, started: min(submission.handedOver ?? now, now), now: now,
                                    cancellation: submission.cancellation)
            sends.append(WaitingSend(send: SubmittedSend(notification: submission.notification, completion: submission.completion),
                                     progress: progress))
        }
        enqueue(sends, now: now)
    }

    /// Submits one send (``submit(_:)``).
    public func submit(_ notification: APNsNotification, cancellation: APNsSendCancellation? = nil, handedOver: NIODeadline? = nil,
                       completion: @escaping @Sendable (APNsOutcome) -> Void) {
        submit([Submission(notification, cancellation: cancellation, handedOver: handedOver, completion: completion)])
    }

    /// Ends the sends given `cancellation` (or one made from it) that still wait, for a stream or for their backoff:
    /// each completes with `.failure(.cancelled)`, unsent. Sends on the wire are not affected.
    public func cancelQueued(_ cancellation: APNsSendCancellation) {
        let retrying = state.withLock { state -> [WaitingSend] in
            let ids = state.retrying.compactMap { $0.value.stems(from: cancellation) ? $0.key : nil }
            return ids.compactMap { state.retrying.removeValue(forKey: $0) }
        }
        for waiting in retrying { waiting.send.completion(finish(.failure(.cancelled), waiting.progress, waiting.send.notification)) }
        apply { state in
            var actions = APNsPoolStateMachine.Actions()
            for (id, waiting) in state.queued where waiting.stems(from: cancellation) {
                actions.merge(state.machine.cancel(id))
            }
            return actions
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

    /// Sends waiting out a retry's backoff.
    public var retryingCount: Int { state.withLock { $0.retrying.count } }

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
    func apply(_ event: (inout State) -> APNsPoolStateMachine.Actions) {
        perform(state.withLock { state -> Effects in
            var effects = Effects()
            collect(event(&state), into: &effects, state: &state)
            return effects
        })
    }

    /// Runs events through the state machine under one lock, then executes their actions outside it, in order.
    /// Their actions are taken one by one, not merged: ``APNsPoolStateMachine/Actions/merge(_:)`` keeps one wait
    /// timer of several, and the machine counts each it hands out as armed.
    func applyEach(_ events: (inout State) -> [APNsPoolStateMachine.Actions]) {
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
        for (waiting, connection) in effects.writes { write(waiting, on: connection) }
        for (waiting, reason) in effects.waitsEnded { waitEnded(waiting, reason) }
    }

    /// What the machine's `actions` ask for, under the lock: queued sends to write or whose wait ended, work for
    /// ``run()``, and the connection-state counts when they changed.
    private func collect(_ actions: APNsPoolStateMachine.Actions, into effects: inout Effects, state: inout State) {
        for dispatch in actions.dispatch {
            guard let waiting = state.queued.removeValue(forKey: dispatch.request) else { continue }
            if let connection = state.connections[dispatch.connection] {
                effects.writes.append((waiting, connection))
            } else {
                // The connection closed before the request was written on it: never processed.
                effects.waitsEnded.append((waiting, .refused))
            }
        }
        for failure in actions.fail {
            if let waiting = state.queued.removeValue(forKey: failure.request) { effects.waitsEnded.append((waiting, failure.reason)) }
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
