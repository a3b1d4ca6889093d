public import APNsCore

/// How the relay's engine behaves: ordering, limits, routing defaults and its time bounds.
public struct RelayEngineConfiguration: Sendable {
    /// `relay.reorder_window_ms`: how long a user's later seq waits for a missing earlier one.
    public var reorderWindow: Duration
    /// Records or notifications in flight before the partitions pause, and the most sends
    /// handed to the sender at once (its queue is sized by it: a full queue is never a result).
    public var maxInFlight: Int
    /// `relay.urgent_reserve`: the part of ``maxInFlight`` that bulk (priority 5 and 1) notifications never take, so
    /// urgent ones find room however much bulk traffic waits. `nil`: a tenth of ``maxInFlight``.
    public var urgentReserve: Int?
    /// `relay.max_in_flight_per_user`: one user's notifications in the window, at most, so one user never holds what
    /// other users' ready notifications could use. `nil`: a tenth of ``maxInFlight``.
    public var maxInFlightPerUser: Int?
    /// `relay.read_ahead_bytes`: what the fan-outs waiting for room in the window may hold (roughly, as
    /// ``RelayEngine`` counts it) before the partitions pause; reading ahead lets an urgent event behind queued bulk
    /// ones reach the window.
    public var readAheadBytes: Int
    /// `relay.rate_limits`: caps on the send rate of an app and push type (none: uncapped).
    public var rateLimits: [RateLimitRule] = []
    /// The APNs interface, which decides the payload limits.
    public var transport: APNsTransport
    /// The default `apns-topic` when the event and the registration give none.
    public var defaultTopic: String?
    /// How long and how many skipped seqs are remembered for late arrivals.
    public var lateSeqMemory: LateSeqMemory
    /// `apns.environment`: where a token without a registration goes when the event gives no `apns.environment`.
    public var defaultEnvironment: APNsEnvironment
    /// `relay.max_tokens_per_event`: an event with more `tokens` is a dead letter.
    public var maxTokensPerEvent: Int = 1_000
    /// The bytes a progress marker's runs of open offsets may take (``ProgressMarker/runsBudget``): the partitions
    /// pause while one of them has more open records than that describes for any pattern of them.
    package var markerRunsBudget = ProgressMarker.runsBudget
    /// Events wait until the device registry is loaded (the service reads `push.devices` to its
    /// end first); off for tests that register devices by hand.
    public var waitsForDeviceRegistry = false
    /// `relay.shutdown_timeout_s`: how long a graceful stop waits for work in flight.
    public var shutdownTimeout: Duration = .seconds(25)
    /// How long a revoke waits for the partitions' sends and publishes in flight before it
    /// abandons them; below the consumer's revoke timeout, so the old owner has stopped
    /// before the new one starts.
    public var revokeDrain: Duration = .seconds(6)
    /// How long a revoke's hand-over has after its drain: to publish the results of the sends that
    /// finished, store the progress markers and commit.
    public var handOver: Duration = .seconds(2)
    /// The consumer's `session.timeout.ms`: with it the engine keeps an ``OwnershipLease`` and
    /// sends and writes nothing for its partitions while it has lapsed. `nil`: no lease (tests of
    /// the engine alone, with no group to confirm it).
    public var sessionTimeout: Duration?
    /// Kafka transactions fence the relay's writes (`kafka.transactions: on`): the ownership lease then gates only
    /// the sends to APNs, and badge state and markers are written whatever it says.
    public var writesFencedByKafka = false
    /// How often finished offsets are committed (on the engine's tick).
    public var commitInterval: Duration = .seconds(1)
    /// `relay.failure_timeout_s`: how long publishing to one destination, restoring one
    /// partition or reading the device registry may keep failing before the relay gives up
    /// and exits 1.
    public var failureTimeout: Duration = .seconds(60)
    /// The first retry's delay after a failure; doubled per failure up to ``retryCap``, each
    /// delay jittered to between half and all of it.
    public var retryBase: Duration = .milliseconds(250)
    /// The longest retry delay.
    public var retryCap: Duration = .seconds(5)
    /// Seeds the retry jitter (tests pass a fixed one; the service a random one).
    public var jitterSeed: UInt64 = 0x9E37_79B9_7F4A_7C15
    /// Where users live: the events topic's partition count, under the one placement function. With it, an event read
    /// away from its user's home is forwarded there, and a partition is served only under the layout its badge state
    /// was placed for. `nil`: events count where they are read (engine tests of one partition).
    package var layout: PartitionLayout?
    /// The changelog topic's name, for what the relay says about it.
    public var badgeStateTopic = "push.badge-state"

    /// A configuration with the contract's defaults for what is not given.
    public init(reorderWindow: Duration = .seconds(2), maxInFlight: Int = 10_000, transport: APNsTransport = .http2, defaultTopic: String? = nil,
                lateSeqMemory: LateSeqMemory = .standard, defaultEnvironment: APNsEnvironment = .production, maxTokensPerEvent: Int = 1_000,
                failureTimeout: Duration = .seconds(60), urgentReserve: Int? = nil, maxInFlightPerUser: Int? = nil,
                readAheadBytes: Int = 64 << 20, rateLimits: [RateLimitRule] = []) {
        self.rateLimits = rateLimits
        self.urgentReserve = urgentReserve
        self.maxInFlightPerUser = maxInFlightPerUser
        self.readAheadBytes = readAheadBytes
        self.reorderWindow = reorderWindow
        self.maxInFlight = maxInFlight
        self.transport = transport
        self.defaultTopic = defaultTopic
        self.lateSeqMemory = lateSeqMemory
        self.defaultEnvironment = defaultEnvironment
        self.maxTokensPerEvent = maxTokensPerEvent
        self.failureTimeout = failureTimeout
    }
}

extension RelayEngineConfiguration {
    /// The fan-out scheduler's bounds from ``maxInFlight``, ``urgentReserve`` and ``maxInFlightPerUser``.
    package var fanOutLimits: FanOutLimits {
        FanOutLimits(window: maxInFlight, urgentReserve: urgentReserve ?? maxInFlight / 10,
                     laneShare: maxInFlightPerUser ?? max(1, maxInFlight / 10))
    }
}

/// The engine counts time in whole milliseconds of its ``RelayTime`` clock readings.
extension RelayEngineConfiguration {
    var reorderWindowMilliseconds: Int64 { reorderWindow.inMilliseconds }
    var shutdownTimeoutMilliseconds: Int64 { shutdownTimeout.inMilliseconds }
    var revokeDrainMilliseconds: Int64 { revokeDrain.inMilliseconds }
    var handOverMilliseconds: Int64 { handOver.inMilliseconds }
    var commitIntervalMilliseconds: Int64 { commitInterval.inMilliseconds }
    var failureTimeoutMilliseconds: Int64 { failureTimeout.inMilliseconds }
    var retryBaseMilliseconds: Int64 { retryBase.inMilliseconds }
    var retryCapMilliseconds: Int64 { retryCap.inMilliseconds }
}
