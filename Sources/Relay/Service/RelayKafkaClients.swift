import Foundation
public import Kafka
public import Logging
import RelayCore
import Synchronization

/// The events consumer, through what the relay uses of it (``KafkaConsumer`` in production).
public protocol RelayEventConsumer: Sendable {
    /// Hands the events to `handle` in order, in batches of what is available (at most
    /// `maxCount`, a revoke always last in its batch), until the consumer closes (returns) or fails
    /// (throws). The caller acknowledges each revoke (``KafkaRevoke/acknowledge()``) once it has
    /// handed the partitions over.
    func forEachBatch(maxCount: Int, _ handle: @Sendable ([KafkaConsumerEvent]) async -> Void) async throws
    func pause(_ partitions: [TopicPartition])
    func resume(_ partitions: [TopicPartition])
    /// Sends a commit of these offsets (the next offset to read per partition) and returns;
    /// `completion` gets the coordinator's answer, from any thread, or never if none comes.
    func commit(_ offsets: [TopicPartition: Int64], completion: @escaping @Sendable (Result<Void, KafkaError>) -> Void)
    /// Records behind the end, per assigned partition.
    func lag() -> [TopicPartition: Int64]
    /// The group as this member is in it now, for offsets committed in a transaction (a broker that checks the
    /// generation refuses a stale member's); `nil` when the consumer is no member (closed): then nothing is committed.
    func transactionGroupMetadata() -> KafkaConsumerGroupMetadata?
    /// How many times the group took the consumer's partitions away without a revoke it could answer
    /// (``KafkaConsumer/membershipLosses``).
    var membershipLosses: Int { get }
    /// Reads these partitions again from their committed offsets, announced by a
    /// ``KafkaConsumerEvent/partitionsRewound(_:)`` event before their first message from there.
    func rewind(_ partitions: [TopicPartition]) async throws
    /// Leaves the group, waiting at most `timeout`; whether it left in time.
    func close(timeout: Duration) async -> Bool
}

/// What ``RecordOutbox`` produces through: a plain producer or a partition's transactional one.
public protocol RelayRecordProducing: Sendable {
    /// Hands `record` over and returns; its delivery outcome comes later in the producer's delivery reports,
    /// under `tag` (the caller's, below 2^63). Throws when the record cannot even be enqueued (then no report comes).
    func produce(_ record: KafkaRecord, tag: UInt64) async throws
}

/// The producer, through what the relay uses of it (``KafkaProducer`` in production).
public protocol RelayRecordProducer: RelayRecordProducing {
    /// The delivery outcomes of the records handed over, a batch at a time; ends once the producer closes. One reader.
    var deliveries: any AsyncSequence<[KafkaTaggedDeliveryReport], Never> { get }
    /// Waits until every record handed over has its report, or `timeout` passes.
    func flush(timeout: Duration) async throws
    func close(timeout: Duration) async
}

/// Reads changelog partitions to their end (``KafkaPartitionReader`` in production).
public protocol BadgeStateReading: Sendable {
    /// Hands every record present when the call starts to `body`, in offset order per partition.
    func readToEnd(_ partitions: [TopicPartition], body: @escaping @Sendable (KafkaMessage) -> Void) async throws -> Int
}

/// Reads `push.devices` from its beginning and follows it until cancelled.
public protocol DeviceRegistryFeed: Sendable {
    /// Hands each registration record to `body`; calls `reachedEnd` once the records present at
    /// the start were handed over. Throws when reading fails.
    func follow(reachedEnd: @escaping @Sendable () -> Void, body: @escaping @Sendable (KafkaMessage) -> Void) async throws
}

/// The relay's Kafka clients. ``kafka(_:logger:)`` builds the real ones; a test can replace any of
/// them (a reader that fails, a producer that refuses) and the service runs unchanged.
public struct RelayKafkaClients: Sendable {
    public var consumer: any RelayEventConsumer
    /// Results, dead letters and failed tokens: nothing waits for them, so they batch.
    public var producer: any RelayRecordProducer
    /// Badge changes and progress markers (`push.badge-state`). A notification is sent only once its badge
    /// change is acknowledged, so this producer is on every badge event's path to APNs and lingers less.
    public var changelogProducer: any RelayRecordProducer
    /// Events forwarded to their users' home partitions (``KafkaProducer/gapless(configuration:logger:lingerMilliseconds:timeout:)``):
    /// those of one partition must reach the home in the order they were read, with no gap a later one could pass.
    public var forwardProducer: any RelayRecordProducer
    public var changelog: any BadgeStateReading
    public var devices: any DeviceRegistryFeed
    /// With `kafka.transactions: on`: makes the relay's transactional producer, initialised (which aborts what an
    /// earlier process with its transactional id left open). `nil`: no transactions (the idempotent producers above
    /// carry everything).
    public var transactionalProducer: (@Sendable () async throws -> any RelayTransactionalProducer)?
    /// Asks a topic's partition count of the cluster (`nil`: no such topic). The service asks it of the events topic
    /// every `layoutCheckInterval`, so a growth while the relay runs stops it. `nil`: not asked (test doubles).
    public var partitionCount: (@Sendable (String) async throws -> Int?)?

    /// - Parameter forwardProducer: the forwards' producer; the changelog's when `nil` (test doubles).
    public init(consumer: any RelayEventConsumer, producer: any RelayRecordProducer, changelogProducer: any RelayRecordProducer,
                forwardProducer: (any RelayRecordProducer)? = nil, changelog: any BadgeStateReading, devices: any DeviceRegistryFeed) {
        self.consumer = consumer
        self.producer = producer
        self.changelogProducer = changelogProducer
        self.forwardProducer = forwardProducer ?? changelogProducer
        self.changelog = changelog
        self.devices = devices
    }

    /// How long a badge change may wait to share a request (librdkafka's `linger.ms` for the changelog
    /// producer, unless `kafka.properties.linger.ms` sets both): the append is on every badge event's path to
    /// APNs (without transactions), so it lingers for as short a time as lets a fetch's changes share a request.
    public static let changelogLingerMilliseconds = 1

    /// How long a result, dead letter or failed token may wait to share a request (librdkafka's `linger.ms` for
    /// that producer, unless `kafka.properties.linger.ms` sets both). Nothing waits for these records but the
    /// commit of their event's offset, and librdkafka sends one partition per request: over many partitions a
    /// short linger sends nearly every record alone (docs/BENCHMARKS.md).
    public static let resultsLingerMilliseconds = 50

    /// The Kafka module's clients for `configuration`: a group consumer of the events topic, two idempotent
    /// producers (results; the changelog), a partition reader for restores and a group-less reader of
    /// `push.devices`.
    public static func kafka(_ configuration: RelayServiceConfiguration, logger: Logger) throws -> RelayKafkaClients {
        var clients = RelayKafkaClients(
            consumer: try KafkaConsumer(configuration: configuration.consumer, logger: logger),
            producer: try KafkaProducer(configuration: configuration.kafka, logger: logger, lingerMilliseconds: resultsLingerMilliseconds),
            changelogProducer: try KafkaProducer(configuration: configuration.kafka, logger: logger,
                                                 lingerMilliseconds: changelogLingerMilliseconds),
            forwardProducer: try KafkaProducer.gapless(configuration: configuration.kafka, logger: logger,
                                                       lingerMilliseconds: changelogLingerMilliseconds, timeout: configuration.engine.failureTimeout),
            changelog: KafkaChangelogReader(kafka: configuration.kafka, logger: logger,
                                            openTransactionsWait: configuration.transactions.map { $0.timeout + .seconds(5) }),
            devices: KafkaDeviceRegistryFeed(kafka: configuration.kafka, topic: configuration.devicesTopic, logger: logger)
        )
        let admin = try KafkaAdmin(configuration: configuration.kafka, logger: logger)
        clients.partitionCount = { topic in try await admin.partitionCount(of: topic) }
        if let transactions = configuration.transactions {
            let kafka = configuration.kafka
            let failureTimeout = configuration.engine.failureTimeout
            let id = transactions.transactionalID ?? transactionalID(group: configuration.groupID, instance: configuration.staticMemberID)
            clients.transactionalProducer = {
                let producer = try KafkaTransactionalProducer(
                    configuration: kafka, logger: logger, transactionalID: id,
                    // A commit delivers what its transaction holds at once (librdkafka's flush ignores linger.ms), and
                    // notifications wait for the commit, not for a record's acknowledgement: records may wait to share
                    // requests until then.
                    transactionTimeout: transactions.timeout, lingerMilliseconds: resultsLingerMilliseconds)
                do {
                    try await retryingTransactionCall(until: .now + failureTimeout) { try await producer.initTransactions(timeout: $0) }
                    logger.info("transactional producer ready", metadata: ["transactional.id": "\(id)"])
                } catch {
                    await producer.close(timeout: .zero)
                    throw error
                }
                return producer
            }
        }
        return clients
    }

    /// The relays of one process, numbered: the second and later get a suffix of their own.
    private static let relaysInProcess = Atomic<Int>(0)

    /// The transactional id of this process's relay: `apns-relay:GROUP:HOST:PID` (a further `:N` for a second relay in
    /// one process). Unique among the group's live relays; the same for a process that restarts in its container (the
    /// same host name and pid), whose initialisation then aborts at once what the crashed one left open.
    /// A static member (`instance`) has `apns-relay:GROUP:INSTANCE`: the replica that takes its place after a restart,
    /// on any host, fences the producer of the one before and aborts what it left open, as the group hands the
    /// restarted member its partitions back without a rebalance.
    public static func transactionalID(group: String, instance: String? = nil) -> String {
        if let instance { return "apns-relay:\(group):\(instance)" }
        let host = ProcessInfo.processInfo.hostName
        let pid = ProcessInfo.processInfo.processIdentifier
        let number = relaysInProcess.add(1, ordering: .relaxed).newValue
        return "apns-relay:\(group):\(host):\(pid)" + (number > 1 ? ":\(number)" : "")
    }
}

extension RelayServiceConfiguration {
    /// The events consumer's settings. Headers are read: a forwarded event names where it was read in one.
    /// Incremental rebalancing (`cooperative-sticky`) unless `kafka.properties` names another assignor: a replica
    /// joining or leaving revokes only the partitions that move, the others keep sending. Static membership with
    /// ``groupInstanceID``.
    public var consumer: KafkaConsumerConfiguration {
        var consumerKafka = kafka
        if consumerKafka.properties[Self.assignmentStrategyProperty] == nil {
            consumerKafka.properties[Self.assignmentStrategyProperty] = Self.defaultAssignmentStrategy
        }
        if let groupInstanceID {
            consumerKafka.properties["group.instance.id"] = groupInstanceID
        }
        return KafkaConsumerConfiguration(kafka: consumerKafka, groupID: groupID, topics: [eventsTopic], readsHeaders: true)
    }

    /// librdkafka's name for the group assignor setting.
    public static let assignmentStrategyProperty = "partition.assignment.strategy"
    /// The relay's assignor unless `kafka.properties` names one: incremental (KIP-429).
    public static let defaultAssignmentStrategy = "cooperative-sticky"

    /// The replica's static member id: ``groupInstanceID``, or one given as `kafka.properties.group.instance.id`.
    public var staticMemberID: String? { groupInstanceID ?? kafka.properties["group.instance.id"] }
}

extension KafkaConsumer: RelayEventConsumer {
    public func forEachBatch(maxCount: Int, _ handle: @Sendable ([KafkaConsumerEvent]) async -> Void) async throws {
        var iterator = events.makeAsyncIterator()
        while let batch = try await iterator.nextBatch(maxCount: maxCount) {
            await handle(batch)
        }
    }

    public func commit(_ offsets: [TopicPartition: Int64], completion: @escaping @Sendable (Result<Void, KafkaError>) -> Void) {
        commit(offsets, metadata: [:], completion: completion)
    }

    public func transactionGroupMetadata() -> KafkaConsumerGroupMetadata? { groupMetadata() }

    public func rewind(_ partitions: [TopicPartition]) async throws {
        try await rewind(partitions, timeout: .seconds(10))
    }
}

extension RelayEventConsumer {
    public var membershipLosses: Int { 0 }
}

extension KafkaProducer: RelayRecordProducer {
    public var deliveries: any AsyncSequence<[KafkaTaggedDeliveryReport], Never> { deliveryReports }
}

/// Each restore with a reader of its own: a read holds its reader's blocking queue, and one
/// partition's stuck read must not hold the other partitions' restores behind it. A read that
/// brings nothing for 15 s fails (and the engine reads the partition again).
///
/// With `openTransactionsWait` (transactions on), a read first waits for every transaction open on the partitions to
/// resolve (``KafkaPartitionReader/waitForOpenTransactions(_:configuration:logger:timeout:)``): a previous owner's
/// last transaction may still commit, and its changes must be in the restored state. A transaction of a relay that
/// died is aborted by the broker after its `transaction.timeout.ms`, so the wait is that long at most.
package struct KafkaChangelogReader: BadgeStateReading {
    var kafka: KafkaConfiguration
    var logger: Logger
    var openTransactionsWait: Duration?

    package init(kafka: KafkaConfiguration, logger: Logger, openTransactionsWait: Duration? = nil) {
        self.kafka = kafka
        self.logger = logger
        self.openTransactionsWait = openTransactionsWait
    }

    package func readToEnd(_ partitions: [TopicPartition], body: @escaping @Sendable (KafkaMessage) -> Void) async throws -> Int {
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        if let openTransactionsWait {
            try await reader.waitForOpenTransactions(partitions, configuration: kafka, logger: logger, timeout: openTransactionsWait)
        }
        return try await reader.readToEnd(partitions, timeout: .seconds(15), body: body)
    }
}

/// `push.devices` read by assignment, without a consumer group (every replica sees every
/// registration, and no group is left behind per start), with clients of its own per read.
struct KafkaDeviceRegistryFeed: DeviceRegistryFeed {
    var kafka: KafkaConfiguration
    var topic: String
    var logger: Logger

    func follow(reachedEnd: @escaping @Sendable () -> Void, body: @escaping @Sendable (KafkaMessage) -> Void) async throws {
        let partitions = try await KafkaAdmin(configuration: kafka, logger: logger).partitionCount(of: topic) ?? 0
        // A reader of its own: following holds the reader's blocking queue.
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        try await reader.follow((0..<Int32(partitions)).map { TopicPartition(topic, $0) }, reachedEnd: reachedEnd, body: body)
    }
}

extension PublishFailure {
    /// The failure a Kafka error means.
    init(_ error: KafkaError) {
        if error.isMessageTooLarge {
            self = .tooLarge
        } else if error.isFatal {
            self = .fatal("\(error)")
        } else {
            self = .other("\(error)")
        }
    }
}
