public import NIOCore

/// Retry settings: `relay.max_attempts`, `relay.max_retry_s` and the backoff of a spell.
///
/// Two bounds, for two kinds of trouble. A spell of APNs being unusable (5xx, 429, an expired provider token, lost
/// connections, unanswered requests) is bounded by time: the notification is sent again with growing, jittered
/// backoff until `maxRetryDuration` after it was handed over (or its `apns-expiration`, if sooner), however many
/// sends that takes. A retryable failure of the request itself (its stream reset with an error, an answer without a
/// status) is bounded by `maxAttempts` as well. A stream APNs never processed (refused, above a GOAWAY's
/// last-stream-id) is no attempt at all. The table is ``APNsRetryTable``.
public struct APNsRetryPolicy: Sendable, Hashable {
    /// Sends of one notification whose failure was about that request itself before it is `failed`
    /// (`relay.max_attempts`). Spells do not count.
    public var maxAttempts: Int
    /// The pause between sends in a spell: doubling from `base` to `cap`, each jittered to between half and all of it.
    public var backoff: Backoff
    /// How long after it was handed over a notification is retried, and waits for a connection, before it is
    /// `failed` (`relay.max_retry_s`).
    public var maxRetryDuration: Duration
    /// Retries at once (unprocessed streams, another connection, a renewed token) in a row before the next one waits
    /// the backoff, so that a peer refusing every stream is not spun against.
    public var maxImmediateRetries: Int

    /// Creates a policy.
    public init(maxAttempts: Int = 5, backoff: Backoff = Backoff(base: .milliseconds(200), cap: .seconds(30)),
                maxRetryDuration: Duration = .seconds(300), maxImmediateRetries: Int = 10) {
        self.maxAttempts = max(1, maxAttempts)
        self.backoff = backoff
        self.maxRetryDuration = maxRetryDuration
        self.maxImmediateRetries = max(0, maxImmediateRetries)
    }
}

/// What to do after an attempt, or after a wait for a stream that ended without one.
public enum APNsRetryDecision: Sendable, Hashable {
    /// The outcome is final.
    case final
    /// Send again at once (not an attempt: APNs never processed it).
    case retryNow(APNsRetryCause)
    /// Send again after this pause.
    case retryAfter(TimeAmount, APNsRetryCause)
    /// Take the connection out of rotation and send again at once on another.
    case retryOnAnotherConnection(APNsRetryCause)
    /// Renew the team's provider token, then send again at once; when no new token can be had yet (one was forced
    /// less than the renewal floor ago), send again after `ifNotRenewed`.
    case renewCredentialThenRetry(ifNotRenewed: TimeAmount)

    /// The retry's cause; `nil` when final.
    public var cause: APNsRetryCause? {
        switch self {
        case .final: nil
        case .retryNow(let cause), .retryAfter(_, let cause), .retryOnAnotherConnection(let cause): cause
        case .renewCredentialThenRetry: .expiredProviderToken
        }
    }
}

/// The retries of one notification, as a pure state machine: results in, decisions out; time and jitter are inputs.
///
/// A notification is retried until its deadline: ``APNsRetryPolicy/maxRetryDuration`` after it was handed over, or
/// its `apns-expiration` when that is sooner (a later one never stretches the retries: the bound is the operator's). A backoff never reaches past the deadline (the last send is at it), a
/// `Retry-After` that does ends the retries at once (APNs said it is unusable for longer), and once the deadline has
/// passed every decision is final.
public struct APNsRetryStateMachine: Sendable, Hashable {
    /// The settings.
    public let policy: APNsRetryPolicy
    /// When the notification was handed over.
    public let started: NIODeadline
    /// When retries and waits end.
    public let deadline: NIODeadline
    /// Sends APNs may have processed (every written request but those it refused unprocessed).
    public private(set) var attempts = 0
    /// Sends whose failure was about the request itself (bounded by ``APNsRetryPolicy/maxAttempts``).
    public private(set) var attemptsAgainstLimit = 0
    /// Backoffs waited so far: the exponent of the next.
    private var backoffs = 0
    /// Retries at once since the last backoff.
    private var immediateRetriesInARow = 0

    /// Starts the retries of a notification handed over at `started`, whose `apns-expiration` is `expiry` (if any).
    public init(policy: APNsRetryPolicy, started: NIODeadline, expiry: NIODeadline?) {
        self.policy = policy
        self.started = started
        let bound = started + TimeAmount(policy.maxRetryDuration)
        self.deadline = min(expiry ?? bound, bound)
    }

    /// A written request ended with `result` at `now`. `jitter` is a random value in `[0, 1)`; `shuttingDown` makes
    /// every retry that would wait final (a draining pool takes no later work). Both are read only when the decision
    /// needs them: nearly every answer is final, and neither a random number nor the pool's state is wanted for
    /// those, on the event loop's path of every answer.
    public mutating func attemptEnded(_ result: APNsAttemptResult, now: NIODeadline, jitter: @autoclosure () -> Double,
                                      shuttingDown: @autoclosure () -> Bool = false) -> APNsRetryDecision {
        let treatment = APNsRetryTable.treatment(of: result)
        if treatment.processed { attempts += 1 }
        var retryAfterSeconds: Int?
        if case .response(let response) = result { retryAfterSeconds = response.retryAfterSeconds }
        return decide(treatment, retryAfterSeconds: retryAfterSeconds, now: now, jitter: jitter, shuttingDown: shuttingDown)
    }

    /// A wait for a stream ended without one, with `failure` (nothing was written).
    public mutating func waitEnded(_ failure: APNsTransportFailure, now: NIODeadline, jitter: @autoclosure () -> Double,
                                   shuttingDown: @autoclosure () -> Bool = false) -> APNsRetryDecision {
        var treatment = APNsRetryTable.treatment(of: .failure(failure))
        treatment.processed = false
        return decide(treatment, retryAfterSeconds: nil, now: now, jitter: jitter, shuttingDown: shuttingDown)
    }

    private mutating func decide(_ treatment: APNsRetryTreatment, retryAfterSeconds: Int?, now: NIODeadline, jitter: () -> Double,
                                 shuttingDown: () -> Bool) -> APNsRetryDecision {
        guard let cause = treatment.cause, treatment.rule != .final, now < deadline else { return .final }
        if treatment.countsAgainstMaxAttempts {
            attemptsAgainstLimit += 1
            if attemptsAgainstLimit >= policy.maxAttempts { return .final }
        }
        switch treatment.rule {
        case .final:
            return .final
        case .retryAfterBackoff:
            if shuttingDown() { return .final }
            return backoff(cause, retryAfterSeconds: retryAfterSeconds, now: now, jitter: jitter)
        case .retryNow, .retryOnAnotherConnection, .renewCredential:
            guard immediateRetriesInARow < policy.maxImmediateRetries else {
                if shuttingDown() { return .final }
                return backoff(cause, retryAfterSeconds: nil, now: now, jitter: jitter)
            }
            immediateRetriesInARow += 1
            switch treatment.rule {
            case .retryNow: return .retryNow(cause)
            case .retryOnAnotherConnection: return .retryOnAnotherConnection(cause)
            default: return .renewCredentialThenRetry(ifNotRenewed: nextBackoffDelay(now: now, jitter: jitter))
            }
        }
    }

    /// A retry after the next backoff, never before `Retry-After`, never past the deadline.
    private mutating func backoff(_ cause: APNsRetryCause, retryAfterSeconds: Int?, now: NIODeadline, jitter: () -> Double) -> APNsRetryDecision {
        immediateRetriesInARow = 0
        var delay = nextBackoffDelay(now: now, jitter: jitter)
        if let retryAfterSeconds, retryAfterSeconds > 0 {
            // In whole seconds first: `.seconds` of a huge header value would overflow nanoseconds.
            if Int64(retryAfterSeconds) > (deadline - now).nanoseconds / 1_000_000_000 { return .final }
            delay = max(delay, .seconds(Int64(retryAfterSeconds)))
        }
        return .retryAfter(delay, cause)
    }

    /// The next backoff step (jittered, capped by the time left before the deadline).
    private mutating func nextBackoffDelay(now: NIODeadline, jitter: () -> Double) -> TimeAmount {
        backoffs += 1
        return min(TimeAmount(policy.backoff.delay(failures: backoffs, jitter: jitter())), deadline - now)
    }
}
