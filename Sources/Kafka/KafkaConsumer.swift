import CRdKafka
import Foundation
public import Logging

/// What a consumer hands out, in the order it happened.
public enum KafkaConsumerEvent: Sendable {
    /// A record of an assigned partition.
    case message(KafkaMessage)
    /// These partitions are now ours, since `at` (when the group's answer was applied, on the
    /// monotonic clock: the event may be handled much later). Delivered before any of their
    /// messages, so state for them can be restored first.
    case partitionsAssigned([TopicPartition], at: ContinuousClock.Instant)
    /// These partitions, still ours, start again from their committed offsets (``KafkaConsumer/rewind(_:timeout:)``):
    /// every later message of theirs is read from there. Messages of theirs before this event were read before the
    /// rewind.
    case partitionsRewound([TopicPartition])
    /// These partitions are no longer ours. Their buffered messages have been dropped; the
    /// consumer gives them up once the revoke is acknowledged (``KafkaRevoke/acknowledge()``), or
    /// after ``KafkaConsumerConfiguration/effectiveRevokeTimeout``, so the handler can commit what
    /// it finished first.
    case partitionsRevoked(KafkaRevoke)
}

/// A revoke handed to the application: its partitions go to another member once it is acknowledged.
///
/// The consumer's poll thread holds the partitions until ``acknowledge()`` is called (at most
/// ``KafkaConsumerConfiguration/effectiveRevokeTimeout``), so the application can finish and
/// commit what it has of them first. Acknowledge every revoke: one that is not holds the group's
/// rebalance for the whole timeout.
public struct KafkaRevoke: Sendable {
    /// The partitions taken away.
    public let partitions: [TopicPartition]
    /// librdkafka lost them involuntarily (the session timed out, the member was fenced): another
    /// member may own them already, and the consumer does not wait for the acknowledgement.
    public let lost: Bool
    /// Which revoke of this consumer this is (they are numbered from 1).
    public let id: UInt64
    /// When the consumer gives the partitions up unacknowledged (its revoke timeout); `nil` when it
    /// does not wait (`lost`, or the consumer is leaving the group).
    public let deadline: ContinuousClock.Instant?
    /// Weak: the consumer's buffer holds this value, and a revoke acknowledged after its consumer
    /// is gone has no one to tell.
    private weak var acknowledger: (any KafkaRevokeAcknowledging)?

    init(id: UInt64, partitions: [TopicPartition], lost: Bool = false, deadline: ContinuousClock.Instant? = nil,
         acknowledger: (any KafkaRevokeAcknowledging)?) {
        self.id = id
        self.partitions = partitions
        self.lost = lost
        self.deadline = deadline
        self.acknowledger = acknowledger
    }

    /// Lets the consumer give the partitions up now. Calling it again, or after the timeout, does nothing.
    public func acknowledge() {
        acknowledger?.acknowledge(revoke: id)
    }
}

/// Where a ``KafkaRevoke`` reports its acknowledgement (the consumer's driver).
protocol KafkaRevokeAcknowledging: AnyObject, Sendable {
    func acknowledge(revoke id: UInt64)
}

/// Consumer settings.
public struct KafkaConsumerConfiguration: Sendable {
    public var kafka: KafkaConfiguration
    /// The consumer group.
    public var groupID: String
    /// Topics to subscribe to.
    public var topics: [String]
    /// Most messages taken from librdkafka per poll.
    public var batchSize: Int
    /// Most messages held between librdkafka and the application. When full, the poll thread stops
    /// fetching until the application catches up.
    public var bufferLimit: Int
    /// How long a revoke waits for the application to finish with the revoked partitions; capped
    /// by ``effectiveRevokeTimeout``.
    public var revokeTimeout: Duration
    /// Whether records carry their headers. librdkafka parses a record's headers into lists of
    /// its own (three allocations even for a record with none), so a consumer that never reads
    /// them turns this off; its records' ``KafkaMessage/headers`` are then empty.
    public var readsHeaders: Bool

    /// The consumer's `max.poll.interval.ms` (librdkafka's default 300 s when not set).
    public var maxPollInterval: Duration {
        .milliseconds(kafka.properties["max.poll.interval.ms"].flatMap { Int64($0) } ?? 300_000)
    }

    /// The longest the poll thread may go without polling: half of `max.poll.interval.ms`, so the
    /// group never drops a member that is only slow.
    public var longestPollPause: Duration { maxPollInterval / 2 }

    /// The group's `session.timeout.ms` (librdkafka's default 45 s when not set): a member not
    /// heard from for that long loses its partitions.
    public var sessionTimeout: Duration {
        .milliseconds(kafka.properties["session.timeout.ms"].flatMap { Int64($0) } ?? 45_000)
    }

    /// The revoke wait actually used: `revokeTimeout`, at most ``longestPollPause`` (a revoke
    /// blocks the poll thread).
    public var effectiveRevokeTimeout: Duration { min(revokeTimeout, longestPollPause) }

    public init(
        kafka: KafkaConfiguration, groupID: String, topics: [String],
        batchSize: Int = 1024, bufferLimit: Int = 8192, revokeTimeout: Duration = .seconds(10), readsHeaders: Bool = true
    ) {
        self.kafka = kafka
        self.groupID = groupID
        self.topics = topics
        self.batchSize = batchSize
        self.bufferLimit = bufferLimit
        self.revokeTimeout = revokeTimeout
        self.readsHeaders = readsHeaders
    }
}

/// A group consumer with manual commits.
///
/// A dedicated thread polls librdkafka in batches; `events` hands out rebalances and messages
/// in order. Auto commit is off: call `commit` with the next offset to read per partition, and
/// acknowledge each ``KafkaRevoke`` once what it takes away is committed. Iterate `events` from
/// one task only.
public final class KafkaConsumer: Sendable {
    private let handle: KafkaClientHandle
    private let driver: ConsumerDriver
    private let groupID: String
    /// Where a partition without a committed offset starts (`auto.offset.reset`): its first offset, or its end.
    private let startsAtEarliest: Bool

    /// Settings the consumer's design depends on; user properties cannot override them.
    ///
    /// `read_committed` (librdkafka's default, stated so it cannot be turned off): records of an aborted
    /// transaction, such as those of an owner fenced by a newer one, are never handed out, and a transaction's
    /// records only once it commits.
    static let enforcedProperties = [
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "enable.partition.eof": "false",
        "isolation.level": "read_committed",
    ]

    /// Creates the consumer, subscribes and starts polling.
    ///
    /// - Throws: `KafkaError` naming a bad pass-through property, or a subscribe failure.
    public init(configuration: KafkaConsumerConfiguration, logger: Logger) throws {
        let driver = ConsumerDriver(configuration: configuration, logger: logger)
        var conf = try RdKafkaConfig(
            configuration.kafka,
            roleDefaults: ["auto.offset.reset": "earliest"],
            enforced: Self.enforcedProperties
        )
        do {
            try conf.set("group.id", configuration.groupID)
        } catch {
            conf.destroy()
            throw error
        }
        let handle = try KafkaClientHandle(kind: RD_KAFKA_CONSUMER, configuration: conf, callbacks: driver.callbacks)
        // Route the main queue into the consumer queue so one poll serves everything.
        rd_kafka_poll_set_consumer(handle.pointer)
        let topics = KafkaPartitionList(configuration.topics.map { TopicPartition($0, RD_KAFKA_PARTITION_UA) })
        let error = topics.withPointer { rd_kafka_subscribe(handle.pointer, $0) }
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError.from(error, operation: "subscribe to \(configuration.topics.joined(separator: ","))")
        }
        self.handle = handle
        self.driver = driver
        self.groupID = configuration.groupID
        startsAtEarliest = (configuration.kafka.properties["auto.offset.reset"] ?? "earliest") != "latest"
            && configuration.kafka.properties["auto.offset.reset"] != "largest" && configuration.kafka.properties["auto.offset.reset"] != "end"
        driver.start(handle: handle, batchSize: configuration.batchSize)
    }

    deinit {
        driver.requestClose()
    }

    /// Rebalances and messages, in order. Ends after `close()`; throws on a fatal consumer error.
    public var events: Events { Events(driver: driver) }

    /// Commits offsets and waits for the group coordinator's answer.
    ///
    /// - Parameters:
    ///   - offsets: per partition, the offset of the next message to read (the last finished
    ///     message's offset + 1).
    ///   - metadata: per partition, a short string stored with the offset (Kafka's commit
    ///     metadata); read back with ``committedWithMetadata(_:timeout:)``.
    public func commit(_ offsets: [TopicPartition: Int64], metadata: [TopicPartition: String] = [:]) async throws {
        guard !offsets.isEmpty else { return }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            commit(offsets, metadata: metadata) { continuation.resume(with: $0.mapError { $0 as any Error }) }
        }
    }

    /// Sends a commit and returns at once; `completion` gets the coordinator's answer on a
    /// librdkafka thread (keep it short). Nothing waits for the answer: a coordinator that never
    /// answers holds no thread and no task, and a caller bounds its wait by its own deadline.
    /// A commit still unanswered when the consumer closes may never complete.
    public func commit(
        _ offsets: [TopicPartition: Int64], metadata: [TopicPartition: String] = [:],
        completion: @escaping @Sendable (Result<Void, KafkaError>) -> Void
    ) {
        guard !offsets.isEmpty else { return completion(.success(())) }
        guard let queue = handle.backgroundQueue else {
            return completion(.failure(.client("NO_BACKGROUND_QUEUE", "librdkafka gave no background queue", operation: "commit")))
        }
        let box = Unmanaged.passRetained(CommitCompletion(completion)).toOpaque()
        let list = KafkaPartitionList(Array(offsets.keys), offsets: offsets, metadata: metadata)
        let error = list.withPointer { rd_kafka_commit_queue(handle.pointer, $0, queue, nil, box) }
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            Unmanaged<CommitCompletion>.fromOpaque(box).release()
            completion(.failure(KafkaError.from(error, operation: "commit")))
        }
    }

    /// Sends a commit without waiting for its answer; a failure is logged.
    public func commitInBackground(_ offsets: [TopicPartition: Int64]) {
        guard !offsets.isEmpty else { return }
        let error = KafkaPartitionList(Array(offsets.keys), offsets: offsets).withPointer { rd_kafka_commit(handle.pointer, $0, 1) }
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            handle.logger.warning("commit not sent", metadata: ["error": "\(KafkaError.from(error, operation: "commit"))"])
        }
    }

    /// The group as this member is in it now (its member id and generation), for committing offsets in a
    /// transaction (``KafkaTransactionalProducer/sendOffsetsToTransaction(_:groupMetadata:timeout:)``): a broker
    /// that checks the generation refuses them once a rebalance has moved on. Take it after the assignment the
    /// offsets belong to. `nil` once the consumer has closed (it is no member any more).
    public func groupMetadata() -> KafkaConsumerGroupMetadata? {
        rd_kafka_consumer_group_metadata(handle.pointer).map { KafkaConsumerGroupMetadata(groupID: groupID, taking: $0) }
    }

    /// How many times the group took this member's partitions away without a revoke it could answer (its session or
    /// poll interval ran out, it was fenced): each is counted before its lost revoke is handed out, and so before the
    /// consumer joins the group again under a new generation. A transaction built while the application had seen
    /// fewer losses than this may hold writes for partitions that are another member's now; its offsets must not be
    /// sent with this consumer's newer group metadata.
    public var membershipLosses: Int { driver.membershipLosses.load(ordering: .sequentiallyConsistent) }

    /// The group's committed offsets for these partitions (`nil` where none is committed).
    public func committed(_ partitions: [TopicPartition], timeout: Duration = .seconds(10)) async throws -> [TopicPartition: Int64?] {
        try await committedWithMetadata(partitions, timeout: timeout).mapValues(\.offset)
    }

    /// The group's committed offsets for these partitions with the metadata stored with them.
    public func committedWithMetadata(_ partitions: [TopicPartition], timeout: Duration = .seconds(10)) async throws -> [TopicPartition: KafkaCommittedOffset] {
        let milliseconds = timeout.milliseconds
        return try await handle.runBlocking { try KafkaPartitionList.committed(partitions, client: $0, milliseconds: milliseconds) }
    }

    /// Stops handing out messages of these partitions until `resume`. Messages already fetched
    /// are kept aside and come first after `resume`; nothing is lost. Takes effect at the
    /// iterating task's next call to `next()`; librdkafka stops fetching them at the poll thread's
    /// next read.
    public func pause(_ partitions: [TopicPartition]) {
        guard !partitions.isEmpty else { return }
        driver.pause(partitions)
    }

    /// Undoes `pause`.
    public func resume(_ partitions: [TopicPartition]) {
        guard !partitions.isEmpty else { return }
        driver.resume(partitions)
    }

    /// Moves a partition's read position. Messages of that partition fetched before the seek are
    /// dropped; the next one handed out is at `offset` (or the next existing one after it).
    public func seek(_ partition: TopicPartition, to offset: Int64) async throws {
        try await driver.seek(partition, to: offset)
    }

    /// Reads these assigned partitions again from the group's committed offsets (where none is committed, from
    /// where `auto.offset.reset` starts): their messages fetched before are dropped, and a
    /// ``KafkaConsumerEvent/partitionsRewound(_:)`` event comes before the first message read from there. For work
    /// redone after a transaction failed: what it had consumed since the last commit is read again. A partition no
    /// longer assigned when the rewind is made is left out of the event.
    ///
    /// - Throws: `KafkaError` when the committed offsets cannot be fetched within `timeout`, or the consumer is closing.
    public func rewind(_ partitions: [TopicPartition], timeout: Duration = .seconds(10)) async throws {
        guard !partitions.isEmpty else { return }
        let committed = try await self.committed(partitions, timeout: timeout)
        var offsets: [TopicPartition: Int64] = [:]
        for partition in partitions {
            offsets[partition] = (committed[partition] ?? nil) ?? (startsAtEarliest ? Int64(RD_KAFKA_OFFSET_BEGINNING) : Int64(RD_KAFKA_OFFSET_END))
        }
        try driver.rewind(offsets)
    }

    /// The partitions currently assigned to this consumer.
    public var assignment: [TopicPartition] { driver.currentAssignment }

    /// Per assigned partition, messages behind the partition's end (high watermark minus the
    /// position), from librdkafka's cached watermarks; partitions without data yet are left out.
    public func lag() -> [TopicPartition: Int64] {
        let partitions = driver.currentAssignment
        guard !partitions.isEmpty else { return [:] }
        let list = KafkaPartitionList(partitions)
        guard list.withPointer({ rd_kafka_position(handle.pointer, $0) }) == RD_KAFKA_RESP_ERR_NO_ERROR else { return [:] }
        var result: [TopicPartition: Int64] = [:]
        for (partition, position) in list.offsets {
            var low: Int64 = -1
            var high: Int64 = -1
            guard rd_kafka_get_watermark_offsets(handle.pointer, partition.topic, partition.partition, &low, &high) == RD_KAFKA_RESP_ERR_NO_ERROR,
                high >= 0
            else { continue }
            result[partition] = max(0, high - (position.offset ?? low))
        }
        return result
    }

    /// Leaves the group (its partitions are revoked) and ends `events`. Offsets are not committed
    /// here: commit what is finished before closing.
    public func close() async {
        await driver.close()
    }

    /// ``close()``, waiting at most `timeout`: with the group coordinator unreachable leaving can
    /// take librdkafka's own timeouts. Past it this returns and the poll thread goes on leaving.
    /// Returns whether the consumer left in time.
    @discardableResult
    public func close(timeout: Duration) async -> Bool {
        await driver.close(timeout: timeout)
    }

    /// The events of a consumer as an `AsyncSequence`.
    public struct Events: AsyncSequence, Sendable {
        public typealias Element = KafkaConsumerEvent
        let driver: ConsumerDriver

        public func makeAsyncIterator() -> Iterator { Iterator(driver: driver) }

        public struct Iterator: AsyncIteratorProtocol {
            let driver: ConsumerDriver
            /// Events taken from the consumer in one go, reversed: handed out one by one from the
            /// back, each moved out rather than copied.
            private var reversedChunk: [KafkaConsumerEvent] = []
            private var chunkGeneration: UInt64 = 0

            init(driver: ConsumerDriver) {
                self.driver = driver
            }

            /// Runs on the caller's executor: no executor hop per message.
            public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async throws(any Error) -> KafkaConsumerEvent? {
                guard try await fill(isolation: actor) else { return nil }
                return reversedChunk.popLast()
            }

            /// The events available now, in order: at least one (waiting for it), at most
            /// `maxCount`, and a revoke always last, so a handler can finish its partitions before
            /// acknowledging it. `nil` once the consumer is closed or the task cancelled.
            ///
            /// A pause, resume or seek made while the caller handles a batch takes effect from the
            /// next batch: what the caller already holds is its to handle.
            public mutating func nextBatch(maxCount: Int, isolation actor: isolated (any Actor)? = #isolation) async throws(any Error) -> [KafkaConsumerEvent]? {
                guard try await fill(isolation: actor) else { return nil }
                var batch: [KafkaConsumerEvent] = []
                batch.reserveCapacity(Swift.min(reversedChunk.count, Swift.max(1, maxCount)))
                while batch.count < Swift.max(1, maxCount), let event = reversedChunk.popLast() {
                    let isRevoke = if case .partitionsRevoked = event { true } else { false }
                    batch.append(event)
                    if isRevoke { break }
                }
                return batch
            }

            /// Makes `reversedChunk.last` the next event to hand out, current with the consumer's
            /// pauses, seeks and revokes; `false` when the sequence ended.
            private mutating func fill(isolation actor: isolated (any Actor)?) async throws(any Error) -> Bool {
                while true {
                    if !reversedChunk.isEmpty {
                        if driver.generation.load(ordering: .acquiring) != chunkGeneration {
                            // A pause, resume, seek or revoke happened: what is left must be re-filtered.
                            driver.giveBack(ArraySlice(reversedChunk.reversed()))
                            reversedChunk.removeAll(keepingCapacity: true)
                            continue
                        }
                        return true
                    }
                    switch driver.takeChunk(limit: 4096) {
                    case .events(let events, let generation):
                        reversedChunk = events
                        reversedChunk.reverse()
                        chunkGeneration = generation
                    case .finished(let failure):
                        if let failure { throw failure }
                        return false
                    case .empty:
                        await driver.waitForEvents(isolation: actor)
                        if Task.isCancelled { return false }
                    }
                }
            }

            public mutating func next() async throws -> KafkaConsumerEvent? {
                try await next(isolation: nil)
            }
        }
    }
}

extension Duration {
    var milliseconds: Int32 {
        Int32(clamping: components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000)
    }
}
