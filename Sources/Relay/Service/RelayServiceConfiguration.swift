public import Kafka
import RelayCore

/// Where and how the relay runs: the Kafka side of the configuration plus the relay settings.
public struct RelayServiceConfiguration: Sendable {
    public var kafka: KafkaConfiguration
    public var groupID: String
    /// The consumer's `group.instance.id` (`kafka.group_instance_id`): static membership, a replica restarted within
    /// the group's session timeout gets its partitions back without a rebalance; `nil`: a new member at each start.
    public var groupInstanceID: String?
    public var eventsTopic: String
    public var devicesTopic: String
    public var resultsTopic: String
    public var failedTokensTopic: String
    public var deadLetterTopic: String
    public var badgeStateTopic: String
    /// Tokens delivered in the other APNs environment than their registration (or event) named.
    public var wrongEnvironmentTopic: String
    /// The engine's settings. Its stop budget and commit interval are this configuration's (stored there once); the
    /// timings it derives from the consumer and transactions are filled in by ``resolvedEngine(jitterSeed:)``.
    public var engine: RelayEngineConfiguration
    /// The graceful stop's budget (`relay.shutdown_timeout_s`), counted from the signal.
    public var shutdownTimeout: Duration {
        get { engine.shutdownTimeout }
        set { engine.shutdownTimeout = newValue }
    }
    /// How often finished offsets are committed.
    public var commitInterval: Duration {
        get { engine.commitInterval }
        set { engine.commitInterval = newValue }
    }
    /// Kafka transactions (`kafka.transactions: on`); `nil`: off.
    public var transactions: TransactionSettings?
    /// How often the events topic's partition count is asked of the cluster: a count other than the one the relay's
    /// users were placed for (a growth while it runs) stops the relay with exit 2, as a restarted one refuses. A
    /// growth also shows at once when a partition past the old count is assigned.
    public var layoutCheckInterval: Duration = .seconds(10)

    /// How the relay's writes commit in Kafka transactions (see ``RelayTransactions``).
    public struct TransactionSettings: Sendable, Equatable {
        /// How often an open transaction commits when nothing waits for it sooner (`relay.transaction_interval_ms`):
        /// its records become visible to `read_committed` readers then.
        public var interval: Duration
        /// How long the broker lets a transaction stay open before it aborts it (`relay.transaction_timeout_ms`, the
        /// producer's `transaction.timeout.ms`): the longest a relay that died mid-transaction holds back the
        /// `read_committed` readers of the partitions it wrote to, and a new owner's restore.
        public var timeout: Duration
        /// The relay's transactional id; `nil`: ``RelayKafkaClients/transactionalID(group:)``.
        public var transactionalID: String?

        public init(interval: Duration = .milliseconds(100), timeout: Duration = .seconds(10), transactionalID: String? = nil) {
            self.interval = interval
            self.timeout = timeout
            self.transactionalID = transactionalID
        }
    }

    public init(
        kafka: KafkaConfiguration, groupID: String = "apns-relay", groupInstanceID: String? = nil,
        eventsTopic: String = "push.events", devicesTopic: String = "push.devices", resultsTopic: String = "push.results",
        failedTokensTopic: String = "push.failed-tokens", deadLetterTopic: String = "push.dlq", badgeStateTopic: String = "push.badge-state",
        wrongEnvironmentTopic: String = "push.wrong-environment",
        engine: RelayEngineConfiguration = .init(), shutdownTimeout: Duration = .seconds(25), commitInterval: Duration = .seconds(1),
        transactions: TransactionSettings? = nil
    ) {
        self.kafka = kafka
        self.groupID = groupID
        self.groupInstanceID = groupInstanceID
        self.eventsTopic = eventsTopic
        self.devicesTopic = devicesTopic
        self.resultsTopic = resultsTopic
        self.failedTokensTopic = failedTokensTopic
        self.deadLetterTopic = deadLetterTopic
        self.badgeStateTopic = badgeStateTopic
        self.wrongEnvironmentTopic = wrongEnvironmentTopic
        self.engine = engine
        self.transactions = transactions
        self.shutdownTimeout = shutdownTimeout
        self.commitInterval = commitInterval
    }

    /// The engine's configuration as the service runs it, built in this one place: the device registry waited for,
    /// the hand-over's shares of the consumer's revoke timeout, the group's session timeout (the ownership lease),
    /// whether Kafka transactions fence the writes, and `jitterSeed` for the retry jitter.
    func resolvedEngine(jitterSeed: UInt64) -> RelayEngineConfiguration {
        var resolved = engine
        resolved.waitsForDeviceRegistry = true
        // The consumer gives the partitions up after its revoke timeout whatever happens: the
        // drain takes at most 60% of it, the rest of the hand-over (results, markers, commit) 30%.
        let revokeTimeout = consumer.effectiveRevokeTimeout
        resolved.revokeDrain = min(shutdownTimeout, .seconds(8), revokeTimeout * 0.6)
        resolved.handOver = revokeTimeout * 0.3
        resolved.sessionTimeout = consumer.sessionTimeout
        resolved.writesFencedByKafka = transactions != nil
        resolved.jitterSeed = jitterSeed
        return resolved
    }
}
