import CRdKafka
public import Logging

/// A topic to create.
public struct KafkaTopicSpecification: Sendable, Hashable {
    public var name: String
    public var partitions: Int
    public var replicationFactor: Int
    /// Topic configs, e.g. `["cleanup.policy": "compact"]`.
    public var configs: [String: String]

    public init(name: String, partitions: Int, replicationFactor: Int = 1, configs: [String: String] = [:]) {
        self.name = name
        self.partitions = partitions
        self.replicationFactor = replicationFactor
        self.configs = configs
    }
}

extension KafkaTopicSpecification {
    /// Rejects what no broker accepts, before anything is sent. -1 means "the broker's default".
    func validate() throws {
        let operation = "create topic \(name.isEmpty ? "(unnamed)" : name)"
        if name.isEmpty || name.count > 249 {
            throw KafkaError.client("INVALID_ARG", "a topic name must be 1 to 249 characters", operation: operation)
        }
        if partitions != -1 && partitions < 1 {
            throw KafkaError.client("INVALID_ARG", "partitions must be at least 1 (or -1 for the broker default), not \(partitions)", operation: operation)
        }
        if replicationFactor != -1 && replicationFactor < 1 {
            throw KafkaError.client("INVALID_ARG", "replication factor must be at least 1 (or -1 for the broker default), not \(replicationFactor)", operation: operation)
        }
    }
}

/// Low and high watermarks of a partition: the first offset still held and the offset the next
/// produced message will get.
public struct KafkaWatermarks: Sendable, Hashable {
    public var low: Int64
    public var high: Int64

    public init(low: Int64, high: Int64) {
        self.low = low
        self.high = high
    }
}

/// Cluster administration: topics, partition counts, watermarks.
public final class KafkaAdmin: Sendable {
    let handle: KafkaClientHandle

    public init(configuration: KafkaConfiguration, logger: Logger) throws {
        let conf = try RdKafkaConfig(
            configuration,
            roleDefaults: [:],
            // Describing a topic must never create it as a side effect.
            enforced: ["allow.auto.create.topics": "false"]
        )
        handle = try KafkaClientHandle(kind: RD_KAFKA_PRODUCER, configuration: conf, callbacks: KafkaClientCallbacks(logger: logger))
    }

    /// Creates topics. Topics that already exist are left as they are when `ignoreExisting`.
    ///
    /// - Throws: the first per-topic error, naming the topic.
    public func createTopics(
        _ topics: [KafkaTopicSpecification], ignoreExisting: Bool = true, timeout: Duration = .seconds(30)
    ) async throws {
        guard !topics.isEmpty else { return }
        for topic in topics { try topic.validate() }
        let milliseconds = timeout.milliseconds
        try await handle.runBlocking { pointer in
            var newTopics: [OpaquePointer?] = []
            defer { newTopics.forEach { rd_kafka_NewTopic_destroy($0) } }
            for topic in topics {
                var errorText = [CChar](repeating: 0, count: 512)
                guard let newTopic = rd_kafka_NewTopic_new(topic.name, Int32(topic.partitions), Int32(topic.replicationFactor), &errorText, errorText.count) else {
                    throw KafkaError.client("INVALID_ARG", String(cStringBuffer: errorText), operation: "create topic \(topic.name)")
                }
                newTopics.append(newTopic)
                for (name, value) in topic.configs.sorted(by: { $0.key < $1.key }) {
                    let error = rd_kafka_NewTopic_set_config(newTopic, name, value)
                    if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                        throw KafkaError.from(error, operation: "create topic \(topic.name) (config \(name))")
                    }
                }
            }
            let queue = rd_kafka_queue_new(pointer)
            defer { rd_kafka_queue_destroy(queue) }
            let options = rd_kafka_AdminOptions_new(pointer, RD_KAFKA_ADMIN_OP_CREATETOPICS)
            defer { rd_kafka_AdminOptions_destroy(options) }
            var errorText = [CChar](repeating: 0, count: 512)
            _ = rd_kafka_AdminOptions_set_request_timeout(options, milliseconds, &errorText, errorText.count)
            rd_kafka_CreateTopics(pointer, &newTopics, newTopics.count, options, queue)
            guard let event = rd_kafka_queue_poll(queue, milliseconds + 1000) else {
                throw KafkaError.client("_TIMED_OUT", "no answer to CreateTopics in time", operation: "create topics")
            }
            defer { rd_kafka_event_destroy(event) }
            let eventError = rd_kafka_event_error(event)
            if eventError != RD_KAFKA_RESP_ERR_NO_ERROR {
                throw KafkaError.from(eventError, operation: "create topics")
            }
            var count = 0
            guard let result = rd_kafka_event_CreateTopics_result(event),
                let results = rd_kafka_CreateTopics_result_topics(result, &count)
            else { return }
            for index in 0..<count {
                let topicResult = results[index]
                if rd_kafka_topic_result_error(topicResult) == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS && ignoreExisting { continue }
                let name = String(cString: rd_kafka_topic_result_name(topicResult))
                if let error = Self.error(of: topicResult, operation: "create topic \(name)") { throw error }
            }
        }
    }

    /// The error of one topic's result of an admin request, `nil` when it succeeded.
    static func error(of topicResult: OpaquePointer?, operation: String) -> KafkaError? {
        let error = rd_kafka_topic_result_error(topicResult)
        guard error != RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
        let detail = rd_kafka_topic_result_error_string(topicResult).map { String(cString: $0) } ?? ""
        return KafkaError(code: error.rawValue, name: String(cString: rd_kafka_err2name(error)),
                          message: detail.isEmpty ? String(cString: rd_kafka_err2str(error)) : detail, operation: operation)
    }

    /// The number of partitions of a topic, or `nil` when the topic does not exist. A cancelled call throws
    /// `CancellationError` within a quarter of a second (the metadata is asked in short waits), so a task that asks
    /// it never holds up its group's end, whatever is unreachable.
    public func partitionCount(of topic: String, timeout: Duration = .seconds(10)) async throws -> Int? {
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await handle.runBlocking { pointer in
                try Self.partitionCount(of: topic, pointer: pointer, timeout: timeout, cancelled: cancelled)
            }
        } onCancel: {
            cancelled.set()
        }
    }

    private static func partitionCount(of topic: String, pointer: OpaquePointer, timeout: Duration, cancelled: CancellationFlag) throws -> Int? {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        var metadata: UnsafePointer<rd_kafka_metadata>?
        while true {
            if cancelled.isSet { throw CancellationError() }
            let wait = min(250, max(1, (deadline - ContinuousClock.now).milliseconds))
            let error = rd_kafka_metadata(pointer, 1, nil, &metadata, wait)
            if error == RD_KAFKA_RESP_ERR_NO_ERROR, metadata != nil { break }
            guard error == RD_KAFKA_RESP_ERR__TIMED_OUT, ContinuousClock.now < deadline else {
                throw KafkaError.from(error, operation: "describe topic \(topic)")
            }
        }
        guard let metadata else { throw KafkaError.from(RD_KAFKA_RESP_ERR__TIMED_OUT, operation: "describe topic \(topic)") }
        defer { rd_kafka_metadata_destroy(metadata) }
        for index in 0..<Int(metadata.pointee.topic_cnt) {
            let entry = metadata.pointee.topics[index]
            guard String(cString: entry.topic) == topic else { continue }
            if entry.err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART { return nil }
            if entry.err != RD_KAFKA_RESP_ERR_NO_ERROR {
                throw KafkaError.from(entry.err, operation: "describe topic \(topic)")
            }
            return Int(entry.partition_cnt)
        }
        return nil
    }

    /// Queries a partition's low and high watermarks from its leader.
    public func watermarks(of partition: TopicPartition, timeout: Duration = .seconds(10)) async throws -> KafkaWatermarks {
        let milliseconds = timeout.milliseconds
        return try await handle.runBlocking { pointer in
            var low: Int64 = -1
            var high: Int64 = -1
            let error = rd_kafka_query_watermark_offsets(pointer, partition.topic, partition.partition, &low, &high, milliseconds)
            if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                throw KafkaError.from(error, operation: "query watermarks of \(partition)")
            }
            return KafkaWatermarks(low: low, high: high)
        }
    }
}

/// A consumer group as its coordinator describes it (DescribeGroups).
public struct KafkaGroupDescription: Sendable, Hashable {
    /// A member of the group.
    public struct Member: Sendable, Hashable {
        public var memberID: String
        public var clientID: String
        public var clientHost: String

        public init(memberID: String, clientID: String, clientHost: String) {
            self.memberID = memberID
            self.clientID = clientID
            self.clientHost = clientHost
        }
    }

    /// The coordinator's name for the group's state: `Empty`, `Stable`, `PreparingRebalance`, `CompletingRebalance`
    /// or `Dead` (a group never seen).
    public var state: String
    public var members: [Member]

    public init(state: String, members: [Member]) {
        self.state = state
        self.members = members
    }
}

extension KafkaAdmin {
    /// Describes consumer group `group`: its state and the members its coordinator counts now. A member that died
    /// without leaving stays counted until its session timeout expires it.
    public func describeGroup(_ group: String, timeout: Duration = .seconds(10)) async throws -> KafkaGroupDescription {
        let milliseconds = max(1, timeout.milliseconds)
        return try await handle.runBlocking { pointer in
            var list: UnsafePointer<rd_kafka_group_list>?
            let error = rd_kafka_list_groups(pointer, group, &list, milliseconds)
            defer { if let list { rd_kafka_group_list_destroy(list) } }
            if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                throw KafkaError.from(error, operation: "describe group \(group)")
            }
            guard let list, list.pointee.group_cnt > 0, let info = list.pointee.groups?.pointee else {
                return KafkaGroupDescription(state: "Dead", members: [])
            }
            if info.err != RD_KAFKA_RESP_ERR_NO_ERROR {
                throw KafkaError.from(info.err, operation: "describe group \(group)")
            }
            let members = (0..<Int(info.member_cnt)).map { index in
                let member = info.members[index]
                return KafkaGroupDescription.Member(memberID: String(cString: member.member_id),
                                                    clientID: member.client_id.map { String(cString: $0) } ?? "",
                                                    clientHost: member.client_host.map { String(cString: $0) } ?? "")
            }
            return KafkaGroupDescription(state: info.state.map { String(cString: $0) } ?? "", members: members)
        }
    }
}
