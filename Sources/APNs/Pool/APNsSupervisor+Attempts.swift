// A submitted send's life in the supervisor: queued or written, settled on the connection's thread, retried after a
// backoff on the supervisor's timer, finished once.

import Logging
import NIOCore

extension APNsSupervisor {
    /// Hands each send a stream now (a ready connection with room takes it, as the pool's `dispatchImmediately`
    /// says), else queues it in the pool until one has (or its wait deadline passes). A send whose write was
    /// cancelled outright ends at once, unsent.
    func enqueue(_ sends: [WaitingSend], now: NIODeadline) {
        var writes: [(WaitingSend, any APNsConnection)] = []
        var ended: [(WaitingSend, APNsOutcome)] = []
        applyEach { state in
            var steps: [APNsPoolStateMachine.Actions] = []
            for waiting in sends {
                if let expiry = waiting.progress.expiry, now >= expiry {
                    ended.append((waiting, finish(.failure(.expired), waiting.progress, waiting.send.notification)))
                    continue
                }
                if waiting.progress.cancellation?.isCancelledOutright == true {
                    ended.append((waiting, finish(.failure(.cancelled), waiting.progress, waiting.send.notification)))
                    continue
                }
                let hash = waiting.send.notification.recipient.stableHash
                if let id = state.machine.dispatchImmediately(hash: hash) {
                    if let connection = state.connections[id] {
                        writes.append((waiting, connection))
                        continue
                    }
                    // Counted by the pool but closed meanwhile: the stream goes back, nothing was written on it.
                    steps.append(state.machine.requestFinished(connection: id, delivered: false))
                }
                let id = state.takeRequestID()
                state.queued[id] = waiting
                steps.append(state.machine.enqueue(id, hash: hash, waitingUntil: waiting.progress.retry.deadline, now: now))
            }
            return steps
        }
        for (waiting, connection) in writes { write(waiting, on: connection) }
        for (waiting, outcome) in ended { waiting.send.completion(outcome) }
    }

    /// Writes a send's next attempt on `connection` (whose stream it holds); its answer is settled on the
    /// connection's thread.
    func write(_ waiting: WaitingSend, on connection: any APNsConnection) {
        let send = waiting.send
        if waiting.progress.isStopped {
            apply { $0.machine.requestFinished(connection: connection.id, delivered: false) }
            send.completion(finish(.failure(.cancelled), waiting.progress, send.notification))
            return
        }
        metrics.attempts.increment()
        let id = connection.id
        let tokenGeneration = factory.tokenProvider?.generation
        connection.send(send.notification, deadline: now() + TimeAmount(configuration.requestTimeout)) { result in
            var progress = waiting.progress
            if let outcome = self.settle(result, on: id, tokenGeneration: tokenGeneration, of: send.notification, progress: &progress) {
                send.completion(outcome)
            } else {
                self.goOn(WaitingSend(send: send, progress: progress))
            }
        }
    }

    /// A queued send's wait for a stream ended without one: given up (its wait deadline, cancelled, shutting down), or
    /// handed a connection that closed meanwhile (nothing was written, so it goes on as a refusal, not an attempt).
    func waitEnded(_ waiting: WaitingSend, _ reason: APNsTransportFailure) {
        var progress = waiting.progress
        let decision = progress.retry.waitEnded(reason, now: now(), jitter: random(), shuttingDown: isShuttingDown)
        guard decision == .final else {
            carryOut(decision, tokenGeneration: nil, progress: &progress)
            goOn(WaitingSend(send: waiting.send, progress: progress))
            return
        }
        // The deadline passed without a connection: the notification expired when its expiry was the deadline, else
        // `maxRetryDuration` ran out.
        let failure: APNsTransportFailure = reason == .noConnection
            ? (progress.expiry == progress.retry.deadline ? .expired : .noConnection) : reason
        waiting.send.completion(finish(.failure(failure), progress, waiting.send.notification))
    }

    /// Books an attempt's result: frees its stream, asks the retry state machine, and returns the final outcome, or
    /// `nil` when another attempt follows (after ``APNsSendProgress/backoff``, if any). `tokenGeneration` names the
    /// provider token the request carried.
    func settle(_ result: APNsAttemptResult, on connection: APNsConnectionID, tokenGeneration: UInt64?, of notification: APNsNotification,
                progress: inout APNsSendProgress) -> APNsOutcome? {
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
        // Stopped while the request was on the wire: an answer asking for a retry ends it, unretried.
        if progress.isStopped { return finish(.failure(.cancelled), progress, notification) }
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

    /// A send that goes on: submitted again now, or once its backoff is over (a timer of ``run()``).
    func goOn(_ waiting: WaitingSend) {
        guard let backoff = waiting.progress.backoff, backoff > .zero else { return resume(waiting) }
        var waiting = waiting
        waiting.progress.backoff = nil
        let id = state.withLock { state -> APNsRequestID? in
            guard !state.finished else { return nil }
            let id = state.takeRequestID()
            state.retrying[id] = waiting
            return id
        }
        guard let id else { return waiting.send.completion(finish(.failure(.cancelled), waiting.progress, waiting.send.notification)) }
        workContinuation.yield(.timer(at: now() + backoff, .retry(id)))
    }

    /// The backoff of retry `id` is over (its timer fired): the send is submitted again. Nothing when it already
    /// ended (``cancelQueued(_:)``).
    func retryDue(_ id: APNsRequestID) {
        guard let waiting = state.withLock({ $0.retrying.removeValue(forKey: id) }) else { return }
        resume(waiting)
    }

    /// A retry's turn: stopped or past its expiry it ends, else it is submitted again.
    private func resume(_ waiting: WaitingSend) {
        if waiting.progress.isStopped {
            return waiting.send.completion(finish(.failure(.cancelled), waiting.progress, waiting.send.notification))
        }
        enqueue([waiting], now: now())
    }

    /// Counts and returns a send's final outcome; a refusal of the pool's credential is recorded (readiness names it).
    func finish(_ last: APNsAttemptResult, _ progress: APNsSendProgress, _ notification: APNsNotification) -> APNsOutcome {
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
    func progress(of notification: APNsNotification, started: NIODeadline, now: NIODeadline, cancellation: APNsSendCancellation?) -> APNsSendProgress {
        APNsSendProgress(policy: configuration.retry, started: started, expiry: expiryDeadline(of: notification, now: now), cancellation: cancellation)
    }
}
