import CRdKafka

/// One config of a topic as the broker describes it.
public struct KafkaTopicConfig: Sendable, Hashable {
    public var value: String?
    /// Whether the topic sets it (a dynamic topic config), rather than inheriting a broker default.
    public var isSetOnTopic: Bool

    public init(value: String?, isSetOnTopic: Bool) {
        self.value = value
        self.isSetOnTopic = isSetOnTopic
    }
}

extension KafkaAdmin {
    /// A topic's configs as the broker reports them (DescribeConfigs): every config it knows, by name.
    public func topicConfigs(of topic: String, timeout: Duration = .seconds(10)) async throws -> [String: KafkaTopicConfig] {
        try await configRequest(topic: topic, setting: [:], kind: .describe, timeout: timeout)
    }

    /// Sets a topic's configs (AlterConfigs). Like Kafka's AlterConfigs this replaces the topic's whole
    /// set: a config the topic set before and `configs` leaves out goes back to the broker's default.
    public func alterTopicConfigs(of topic: String, to configs: [String: String], timeout: Duration = .seconds(10)) async throws {
        _ = try await configRequest(topic: topic, setting: configs, kind: .alter, timeout: timeout)
    }

    private enum ConfigRequestKind: Sendable {
        case describe, alter
    }

    private func configRequest(
        topic: String, setting configs: [String: String], kind: ConfigRequestKind, timeout: Duration
    ) async throws -> [String: KafkaTopicConfig] {
        let milliseconds = timeout.milliseconds
        let operation = kind == .describe ? "describe configs of \(topic)" : "alter configs of \(topic)"
        return try await handle.runBlocking { pointer in
            var resource: OpaquePointer? = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic)
            defer { rd_kafka_ConfigResource_destroy(resource) }
            for (name, value) in configs.sorted(by: { $0.key < $1.key }) {
                let error = rd_kafka_ConfigResource_set_config(resource, name, value)
                if error != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(error, operation: "\(operation) (config \(name))") }
            }
            let queue = rd_kafka_queue_new(pointer)
            defer { rd_kafka_queue_destroy(queue) }
            let options = rd_kafka_AdminOptions_new(pointer, kind == .describe ? RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS : RD_KAFKA_ADMIN_OP_ALTERCONFIGS)
            defer { rd_kafka_AdminOptions_destroy(options) }
            var errorText = [CChar](repeating: 0, count: 512)
            _ = rd_kafka_AdminOptions_set_request_timeout(options, milliseconds, &errorText, errorText.count)
            switch kind {
            case .describe: rd_kafka_DescribeConfigs(pointer, &resource, 1, options, queue)
            case .alter: rd_kafka_AlterConfigs(pointer, &resource, 1, options, queue)
            }
            guard let event = rd_kafka_queue_poll(queue, milliseconds + 1000) else {
                throw KafkaError.client("_TIMED_OUT", "no answer in time", operation: operation)
            }
            defer { rd_kafka_event_destroy(event) }
            let eventError = rd_kafka_event_error(event)
            if eventError != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(eventError, operation: operation) }
            var count = 0
            let resources = switch kind {
            case .describe: rd_kafka_event_DescribeConfigs_result(event).flatMap { rd_kafka_DescribeConfigs_result_resources($0, &count) }
            case .alter: rd_kafka_event_AlterConfigs_result(event).flatMap { rd_kafka_AlterConfigs_result_resources($0, &count) }
            }
            guard let resources, count > 0, let described = resources[0] else {
                throw KafkaError.client("_BAD_MSG", "no resource in the answer", operation: operation)
            }
            let error = rd_kafka_ConfigResource_error(described)
            if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                let detail = rd_kafka_ConfigResource_error_string(described).map { String(cString: $0) } ?? ""
                throw KafkaError(
                    code: error.rawValue, name: String(cString: rd_kafka_err2name(error)),
                    message: detail.isEmpty ? String(cString: rd_kafka_err2str(error)) : detail, operation: operation)
            }
            var entryCount = 0
            guard let entries = rd_kafka_ConfigResource_configs(described, &entryCount) else { return [:] }
            var result: [String: KafkaTopicConfig] = [:]
            for index in 0..<entryCount {
                guard let entry = entries[index] else { continue }
                result[String(cString: rd_kafka_ConfigEntry_name(entry))] = KafkaTopicConfig(
                    value: rd_kafka_ConfigEntry_value(entry).map { String(cString: $0) },
                    isSetOnTopic: rd_kafka_ConfigEntry_source(entry) == RD_KAFKA_CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG)
            }
            return result
        }
    }
}
