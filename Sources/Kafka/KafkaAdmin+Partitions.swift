import CRdKafka

extension KafkaAdmin {
    /// Grows `topic` to `count` partitions in place (Kafka's CreatePartitions, what `kafka-topics --alter
    /// --partitions` sends): existing partitions, their records and the groups' committed offsets stay.
    ///
    /// - Throws: the broker's error, naming the topic (a count not above the current one is `INVALID_PARTITIONS`).
    public func createPartitions(of topic: String, growingTo count: Int, timeout: Duration = .seconds(30)) async throws {
        let milliseconds = timeout.milliseconds
        try await handle.runBlocking { pointer in
            var errorText = [CChar](repeating: 0, count: 512)
            guard let newPartitions = rd_kafka_NewPartitions_new(topic, count, &errorText, errorText.count) else {
                throw KafkaError.client("INVALID_ARG", String(cStringBuffer: errorText), operation: "grow topic \(topic)")
            }
            defer { rd_kafka_NewPartitions_destroy(newPartitions) }
            var list: [OpaquePointer?] = [newPartitions]
            let queue = rd_kafka_queue_new(pointer)
            defer { rd_kafka_queue_destroy(queue) }
            let options = rd_kafka_AdminOptions_new(pointer, RD_KAFKA_ADMIN_OP_CREATEPARTITIONS)
            defer { rd_kafka_AdminOptions_destroy(options) }
            _ = rd_kafka_AdminOptions_set_request_timeout(options, milliseconds, &errorText, errorText.count)
            rd_kafka_CreatePartitions(pointer, &list, 1, options, queue)
            guard let event = rd_kafka_queue_poll(queue, milliseconds + 1000) else {
                throw KafkaError.client("_TIMED_OUT", "no answer to CreatePartitions in time", operation: "grow topic \(topic)")
            }
            defer { rd_kafka_event_destroy(event) }
            let eventError = rd_kafka_event_error(event)
            if eventError != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(eventError, operation: "grow topic \(topic)") }
            var resultCount = 0
            guard let result = rd_kafka_event_CreatePartitions_result(event),
                  let results = rd_kafka_CreatePartitions_result_topics(result, &resultCount) else { return }
            for index in 0..<resultCount {
                if let error = Self.error(of: results[index], operation: "grow topic \(topic)") { throw error }
            }
        }
    }
}
