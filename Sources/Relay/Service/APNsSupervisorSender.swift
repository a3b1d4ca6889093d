public import APNs
import NIOCore
import Metrics
import RelayCore

/// The connection pools that carry an app's notifications: one per APNs environment, each to its own host, with a
/// credential valid there. A credential limited to one environment (Apple's environment-restricted keys) has a pool
/// in that one only; an app's two pools may then be two keys'.
public struct APNsEnvironmentPools: Sendable {
    /// Carries notifications for Apple's production environment, if the credential is valid there.
    public let production: APNsSupervisor?
    /// Carries notifications for Apple's sandbox (development) environment, if the credential is valid there.
    public let sandbox: APNsSupervisor?

    /// Creates the pair.
    public init(production: APNsSupervisor?, sandbox: APNsSupervisor?) {
        self.production = production
        self.sandbox = sandbox
    }

    /// The supervisor that carries notifications for `environment`; `nil` when no credential here is valid there.
    public func supervisor(for environment: APNsEnvironment) -> APNsSupervisor? {
        switch environment {
        case .production: production
        case .sandbox: sandbox
        }
    }

    /// These pools, with `other`'s where these have none.
    func filling(from other: APNsEnvironmentPools) -> APNsEnvironmentPools {
        APNsEnvironmentPools(production: production ?? other.production, sandbox: sandbox ?? other.sandbox)
    }
}

/// Sends through the APNs connection supervisors (which retry until `relay.max_retry_s` is spent, see
/// `APNsRetryStateMachine`) and hands back their final `APNsOutcome` (the engine reads it as a result).
///
/// A notification's app (its topic, or bundle id) and its ``PendingNotification/environment`` pick the pool of the
/// credential that may sign for both (`apns.apps`: a key's JWT or an app's certificate). A topic no credential sends
/// for, or sends for only in the other environment, is answered without a send: `.failure(.noCredential)`, a
/// `rejected` result with reason `NoCredentialForTopic` (metric `apns_relay_notifications_without_credential_total`).
///
/// A token of the other environment is answered 400 `BadDeviceToken` (legacy: status 8), as a token APNs does
/// not know at all is: a development build registered as production looks dead. So a device notification refused
/// that way is sent once more, unchanged (same `apns-id`), through the app's pool of the other environment (a
/// credential valid there): delivered there, its outcome is `delivered` with `APNsOutcome.environment` naming where (the
/// relay then tells the registry's owner); refused there too, the token is dead. Metric
/// `apns_relay_other_environment_retries_total{outcome}`: `delivered`, `refused` (`BadDeviceToken` in both),
/// `other` (any other final answer, reported as it is).
public struct APNsSupervisorSender: NotificationSending {
    /// Every credential's pools, in configuration order.
    public let pools: [APNsEnvironmentPools]
    /// The pools of each app's topic: per environment, the first credential listed for the topic that is valid there.
    private let poolsOfTopic: [String: APNsEnvironmentPools]
    /// The pools that carry every other topic (the single-credential form), if any.
    private let everyTopicPools: APNsEnvironmentPools?
    private let noCredentialCounter = Counter(label: "apns_relay_notifications_without_credential_total")
    private let otherEnvironmentCounters = OtherEnvironmentCounters()

    /// Routes by topic and environment: each entry's pools carry its topics in the environments it has a pool for;
    /// an entry with no topics carries every topic no other entry names. Per topic and environment the first entry
    /// that has a pool there wins.
    public init(routes: [(topics: [String], pools: APNsEnvironmentPools)]) {
        var poolsOfTopic: [String: APNsEnvironmentPools] = [:]
        var everyTopicPools: APNsEnvironmentPools?
        for route in routes {
            if route.topics.isEmpty { everyTopicPools = everyTopicPools?.filling(from: route.pools) ?? route.pools }
            for topic in route.topics { poolsOfTopic[topic] = poolsOfTopic[topic]?.filling(from: route.pools) ?? route.pools }
        }
        let pools = routes.map(\.pools)
        var seen = Set<ObjectIdentifier>()
        self.pools = pools
        self.supervisors = pools.flatMap { [$0.production, $0.sandbox].compactMap { $0 } }.filter { seen.insert(ObjectIdentifier($0)).inserted }
        self.poolsOfTopic = poolsOfTopic
        self.everyTopicPools = everyTopicPools
    }

    /// Sends every notification, whatever its topic and environment, through `supervisor` (one endpoint for both).
    public init(supervisor: APNsSupervisor) {
        self.init(production: supervisor, sandbox: supervisor)
    }

    /// Sends each notification, whatever its topic, through the supervisor of its environment (one credential).
    public init(production: APNsSupervisor, sandbox: APNsSupervisor) {
        self.init(routes: [(topics: [], pools: APNsEnvironmentPools(production: production, sandbox: sandbox))])
    }

    /// The pools that send for `notification`: its app's, by its `apns-topic` or else its bundle id (the topic
    /// without the push type's suffix); `nil` when no configured credential sends for it.
    public func pools(for notification: APNsNotification) -> APNsEnvironmentPools? {
        // One app (no topics listed) is the common case: no string hashing per notification then.
        if !poolsOfTopic.isEmpty, let pools = poolsOfTopic[notification.topic] ?? poolsOfTopic[notification.bundleID] {
            return pools
        }
        return everyTopicPools
    }

    /// Every distinct supervisor, each once (a single supervisor may carry both environments).
    public let supervisors: [APNsSupervisor]

    public func submit(_ sends: [RelaySend]) {
        // Per supervisor, in order: one submit each (a credential's environment, nearly always one).
        var batches: [(supervisor: APNsSupervisor, submissions: [APNsSupervisor.Submission])] = []
        // When the batch is handed over, per supervisor's clock (nearly always one): a resend in the other
        // environment keeps the retry deadline that counts from here.
        var handedOverBy: [(supervisor: APNsSupervisor, at: NIODeadline)] = []
        for send in sends {
            let pending = send.notification
            guard let pools = pools(for: pending.notification), let supervisor = pools.supervisor(for: pending.environment) else {
                noCredentialCounter.increment()
                send.complete(APNsOutcome(.failure(.noCredential), attempts: 0, apnsID: pending.notification.apnsID))
                continue
            }
            let handedOver: NIODeadline
            if let known = handedOverBy.first(where: { $0.supervisor === supervisor }) {
                handedOver = known.at
            } else {
                handedOver = supervisor.currentTime
                handedOverBy.append((supervisor, handedOver))
            }
            // What the answer needs, not `self`: a copy of this struct in every send's closure retained each of its fields.
            let counters = otherEnvironmentCounters
            let submission = APNsSupervisor.Submission(pending.notification, cancellation: send.cancellation) { outcome in
                // The notification is read from the send (which the closure holds anyway) only when the answer needs
                // it: the common answer, on an event loop, touches the send alone.
                guard outcome.isBadDeviceToken, let other = Self.otherEnvironment(after: outcome, of: send.notification, in: pools),
                      let there = pools.supervisor(for: other) else {
                    return send.complete(outcome)
                }
                // The same notification once more, not a new one: it stops with the first send's cancellation and
                // retries until the first one's deadline (`relay.max_retry_s` from `handedOver`).
                there.submit(send.notification.notification, cancellation: send.cancellation, handedOver: handedOver) { retried in
                    if !retried.isAbandoned { counters.count(retried) }
                    send.complete(Self.outcome(after: outcome, retriedIn: other, as: retried))
                }
            }
            if let at = batches.firstIndex(where: { $0.supervisor === supervisor }) {
                batches[at].submissions.append(submission)
            } else {
                batches.append((supervisor, [submission]))
            }
        }
        for batch in batches { batch.supervisor.submit(batch.submissions) }
    }

    /// The environment to try `pending` in after its own answered `outcome`: the other one, when the answer was
    /// `BadDeviceToken` for a device and the app has a pool of its own there (a credential valid in it); else `nil`.
    static func otherEnvironment(after outcome: APNsOutcome, of pending: PendingNotification, in pools: APNsEnvironmentPools) -> APNsEnvironment? {
        guard outcome.isBadDeviceToken, pending.notification.token != nil else { return nil }
        let other: APNsEnvironment = pending.environment == .production ? .sandbox : .production
        // One supervisor for both environments (a single test host) has no other host to ask.
        guard let there = pools.supervisor(for: other), there !== pools.supervisor(for: pending.environment) else { return nil }
        return other
    }

    /// The outcome of a notification refused with `BadDeviceToken` in its own environment (`first`) and answered
    /// `retried` in `environment`: the second answer, with both sends' attempts and the environment that gave it.
    /// Refused there too, the token is dead (`rejected`, `BadDeviceToken`); abandoned there, the whole send is.
    static func outcome(after first: APNsOutcome, retriedIn environment: APNsEnvironment, as retried: APNsOutcome) -> APNsOutcome {
        var outcome = retried
        outcome.attempts = first.attempts + retried.attempts
        outcome.environment = outcome.isAbandoned ? nil : environment
        return outcome
    }

    /// The streams of every supervisor's usable connections together; `nil` while none has one (its queue then
    /// holds the sends until a connection comes, or their deadline passes).
    public var streamCapacity: Int? {
        let capacity = supervisors.reduce(0) { $0 + $1.streamCapacity }
        return capacity > 0 ? capacity : nil
    }

    public func cancelQueued(_ cancellation: APNsSendCancellation) {
        for supervisor in supervisors { supervisor.cancelQueued(cancellation) }
    }
}

/// `apns_relay_other_environment_retries_total{outcome}`: notifications sent once more in the other environment after
/// `BadDeviceToken`, by how that ended.
private final class OtherEnvironmentCounters: Sendable {
    /// Delivered there: the token was registered (or given) in the wrong environment.
    let delivered = Counter(label: "apns_relay_other_environment_retries_total", dimensions: [("outcome", "delivered")])
    /// `BadDeviceToken` there too: the token is dead.
    let refused = Counter(label: "apns_relay_other_environment_retries_total", dimensions: [("outcome", "refused")])
    /// Any other final answer (410, a failure, ...), reported as it is.
    let other = Counter(label: "apns_relay_other_environment_retries_total", dimensions: [("outcome", "other")])

    /// Counts the other environment's final answer.
    func count(_ answer: APNsOutcome) {
        if answer.classification == .delivered {
            delivered.increment()
        } else if answer.isBadDeviceToken {
            refused.increment()
        } else {
            other.increment()
        }
    }
}
