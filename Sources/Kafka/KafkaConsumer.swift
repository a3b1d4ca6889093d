import CRdKafka
import Foundation
public import Logging

/// What a consumer hands out, in the order it happened.
public enum KafkaConsumerEvent: Sendable {
    /// A record of an assigned partition.
    case message(KafkaMessage)
    /// These partitions are now ours. Delivered before any of their messages, so state for them
    /// can be restored first.
    case partitionsAssigned([TopicPartition])
    /// These partitions are no longer ours. Their buffered messages have been dropped; the
    /// consumer waits (up to `revokeTimeout`) for the next call to `next()` before it gives them
    /// up, so the handler can commit what it finished.
    case partitionsRevoked([TopicPartition])
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

    /// The consumer's `max.poll.interval.ms` (librdkafka's default 300 s when not set).
    public var maxPollInterval: Duration {
        .milliseconds(kafka.properties["max.poll.interval.ms"].flatMap { Int64($0) } ?? 300_000)
    }

    /// The longest the poll thread may go without polling: half of `max.poll.interval.ms`, so the
    /// group never drops a member that is only slow.
    public var longestPollPause: Duration { maxPollInterval / 2 }

    /// The revoke wait actually used: `revokeTimeout`, at most ``longestPollPause`` (a revoke
    /// blocks the poll thread).
    public var effectiveRevokeTimeout: Duration { min(revokeTimeout, longestPollPause) }

    public init(
        kafka: KafkaConfiguration, groupID: String, topics: [String],
        batchSize: Int = 1024, bufferLimit: Int = 8192, revokeTimeout: Duration = .seconds(10)
    ) {
        self.kafka = kafka
        self.groupID = groupID
        self.topics = topics
        self.batchSize = batchSize
        self.bufferLimit = bufferLimit
        self.revokeTimeout = revokeTimeout
    }
}

/// A group consumer with manual commits.
///
/// A dedicated thread polls librdkafka in batches; `events` hands out rebalances and messages
/// in order. Auto commit is off: call `commit` with the next offset to read per partition.
/// Iterate `events` from one task only.
public final class KafkaConsumer: Sendable {
    private let handle: KafkaClientHandle
    private let core: ConsumerCore

    /// Settings the consumer's design depends on; user properties cannot override them.
    static let enforcedProperties = [
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "enable.partition.eof": "false",
    ]

    /// Creates the consumer, subscribes and starts polling.
    ///
    /// - Throws: `KafkaError` naming a bad pass-through property, or a subscribe failure.
    public init(configuration: KafkaConsumerConfiguration, logger: Logger) throws {
        let core = ConsumerCore(configuration: configuration, logger: logger)
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
        let handle = try KafkaClientHandle(kind: RD_KAFKA_CONSUMER, configuration: conf, context: core, logger: logger)
        // Route the main queue into the consumer queue so one poll serves everything.
        rd_kafka_poll_set_consumer(handle.pointer)
        let topics = configuration.topics.map { TopicPartition($0, RD_KAFKA_PARTITION_UA) }.makeRdKafkaList()
        defer { rd_kafka_topic_partition_list_destroy(topics) }
        let error = rd_kafka_subscribe(handle.pointer, topics)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError.from(error, operation: "subscribe to \(configuration.topics.joined(separator: ","))")
        }
        self.handle = handle
        self.core = core
        core.start(handle: handle)
    }

    deinit {
        core.requestClose()
    }

    /// Rebalances and messages, in order. Ends after `close()`; throws on a fatal consumer error.
    public var events: Events { Events(core: core) }

    /// Commits offsets and waits for the group coordinator's answer.
    ///
    /// - Parameters:
    ///   - offsets: per partition, the offset of the next message to read (the last finished
    ///     message's offset + 1).
    ///   - metadata: per partition, a short string stored with the offset (Kafka's commit
    ///     metadata); read back with ``committedWithMetadata(_:timeout:)``.
    public func commit(_ offsets: [TopicPartition: Int64], metadata: [TopicPartition: String] = [:]) async throws {
        guard !offsets.isEmpty else { return }
        try await handle.runBlocking { pointer in
            let list = Array(offsets.keys).makeRdKafkaList(offsets: offsets, metadata: metadata)
            defer { rd_kafka_topic_partition_list_destroy(list) }
            let error = rd_kafka_commit(pointer, list, 0)
            if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                throw KafkaError.from(error, operation: "commit")
            }
            if let partitionError = list.firstError(operation: "commit") { throw partitionError }
        }
    }

    /// Sends a commit without waiting for its answer; a failure is logged.
    public func commitInBackground(_ offsets: [TopicPartition: Int64]) {
        guard !offsets.isEmpty else { return }
        let list = Array(offsets.keys).makeRdKafkaList(offsets: offsets)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let error = rd_kafka_commit(handle.pointer, list, 1)
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            handle.logger.warning("commit not sent", metadata: ["error": "\(KafkaError.from(error, operation: "commit"))"])
        }
    }

    /// The group's committed offsets for these partitions (`nil` where none is committed).
    public func committed(_ partitions: [TopicPartition], timeout: Duration = .seconds(10)) async throws -> [TopicPartition: Int64?] {
        try await committedWithMetadata(partitions, timeout: timeout).mapValues(\.offset)
    }

    /// The group's committed offsets for these partitions with the metadata stored with them.
    public func committedWithMetadata(_ partitions: [TopicPartition], timeout: Duration = .seconds(10)) async throws -> [TopicPartition: KafkaCommittedOffset] {
        let milliseconds = timeout.milliseconds
        return try await handle.runBlocking { pointer in
            let list = partitions.makeRdKafkaList()
            defer { rd_kafka_topic_partition_list_destroy(list) }
            let error = rd_kafka_committed(pointer, list, milliseconds)
            if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                throw KafkaError.from(error, operation: "read committed offsets")
            }
            let metadata = list.metadataByPartition
            var result: [TopicPartition: KafkaCommittedOffset] = [:]
            for index in 0..<Int(list.pointee.cnt) {
                let element = list.pointee.elems[index]
                let partition = TopicPartition(String(cString: element.topic), element.partition)
                result[partition] = KafkaCommittedOffset(offset: element.offset >= 0 ? element.offset : nil, metadata: metadata[partition])
            }
            return result
        }
    }

    /// Stops handing out messages of these partitions until `resume`. Messages already fetched
    /// are kept aside and come first after `resume`; nothing is lost. Takes effect at the
    /// iterating task's next call to `next()`; librdkafka stops fetching them at the poll thread's
    /// next read.
    public func pause(_ partitions: [TopicPartition]) {
        guard !partitions.isEmpty else { return }
        core.markPaused(partitions)
    }

    /// Undoes `pause`.
    public func resume(_ partitions: [TopicPartition]) {
        guard !partitions.isEmpty else { return }
        core.markResumed(partitions)
    }

    /// Moves a partition's read position. Messages of that partition fetched before the seek are
    /// dropped; the next one handed out is at `offset` (or the next existing one after it).
    public func seek(_ partition: TopicPartition, to offset: Int64) async throws {
        try await core.seek(partition, to: offset)
    }

    /// The partitions currently assigned to this consumer.
    public var assignment: [TopicPartition] { core.currentAssignment }

    /// Per assigned partition, messages behind the partition's end (high watermark minus the
    /// position), from librdkafka's cached watermarks; partitions without data yet are left out.
    public func lag() -> [TopicPartition: Int64] {
        let partitions = core.currentAssignment
        guard !partitions.isEmpty else { return [:] }
        let list = partitions.makeRdKafkaList()
        defer { rd_kafka_topic_partition_list_destroy(list) }
        guard rd_kafka_position(handle.pointer, list) == RD_KAFKA_RESP_ERR_NO_ERROR else { return [:] }
        var result: [TopicPartition: Int64] = [:]
        for index in 0..<Int(list.pointee.cnt) {
            let element = list.pointee.elems[index]
            var low: Int64 = -1
            var high: Int64 = -1
            guard rd_kafka_get_watermark_offsets(handle.pointer, element.topic, element.partition, &low, &high) == RD_KAFKA_RESP_ERR_NO_ERROR,
                high >= 0
            else { continue }
            let position = element.offset >= 0 ? element.offset : low
            result[TopicPartition(String(cString: element.topic), element.partition)] = max(0, high - position)
        }
        return result
    }

    /// Leaves the group (its partitions are revoked) and ends `events`. Offsets are not committed
    /// here: commit what is finished before closing.
    public func close() async {
        await core.close()
    }

    /// The events of a consumer as an `AsyncSequence`.
    public struct Events: AsyncSequence, Sendable {
        public typealias Element = KafkaConsumerEvent
        let core: ConsumerCore

        public func makeAsyncIterator() -> Iterator { Iterator(core: core) }

        public struct Iterator: AsyncIteratorProtocol {
            let core: ConsumerCore
            /// Events taken from the consumer in one go, handed out one by one.
            private var chunk: [KafkaConsumerEvent] = []
            private var index = 0
            private var chunkGeneration: UInt64 = 0
            private var revokeHandedOut = false

            init(core: ConsumerCore) {
                self.core = core
            }

            /// Runs on the caller's executor: no executor hop per message.
            public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async throws(any Error) -> KafkaConsumerEvent? {
                if revokeHandedOut {
                    revokeHandedOut = false
                    core.acknowledgeRevoke()
                }
                while true {
                    if index < chunk.count {
                        if core.generation.load(ordering: .acquiring) != chunkGeneration {
                            // A pause, resume, seek or revoke happened: what is left must be re-filtered.
                            core.giveBack(chunk[index...])
                            chunk.removeAll(keepingCapacity: true)
                            index = 0
                            continue
                        }
                        let event = chunk[index]
                        index += 1
                        if case .partitionsRevoked = event { revokeHandedOut = true }
                        return event
                    }
                    switch core.takeChunk(limit: 4096) {
                    case .events(let events, let generation):
                        chunk = events
                        index = 0
                        chunkGeneration = generation
                    case .finished(let failure):
                        if let failure { throw failure }
                        return nil
                    case .empty:
                        await core.waitForEvents(isolation: actor)
                        if Task.isCancelled { return nil }
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
