import CRdKafka

extension KafkaMessage {
    /// Hands each of the first `count` librdkafka messages to `body`, in order: with its Swift value
    /// when it is a record, `nil` when it is an error event (`err` set). Then destroys every one of
    /// them, also when `body` throws.
    ///
    /// Keys and values are copied into arrays of about ``sharedBytesChunk`` bytes that the records
    /// share: one allocation per chunk instead of two per record, and each record's copies through
    /// the consumer's buffers cost one reference instead of two. Topic names are looked up once per
    /// run of records from one topic handle (the handles stay alive while their messages do).
    /// Without `headers` the records' headers are not parsed (they are empty).
    static func convertAndDestroy(
        _ messages: UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>, count: Int, headers readsHeaders: Bool = true,
        _ body: (UnsafeMutablePointer<rd_kafka_message_t>, consuming KafkaMessage?) throws -> Void
    ) rethrows {
        defer { for index in 0..<count { messages[index].map(rd_kafka_message_destroy) } }
        var topicHandle: OpaquePointer?
        var topicName = ""
        var chunkStart = 0
        while chunkStart < count {
            // The chunk: records until their bytes reach the chunk size (at least one record).
            var chunkEnd = chunkStart
            var chunkBytes = 0
            while chunkEnd < count, chunkBytes < sharedBytesChunk {
                if let message = messages[chunkEnd], message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR {
                    chunkBytes += byteCount(message.pointee.key, message.pointee.key_len)
                        + byteCount(message.pointee.payload, message.pointee.len)
                }
                chunkEnd += 1
            }
            let bytes = [UInt8](unsafeUninitializedCapacity: chunkBytes) { buffer, initialized in
                var at = 0
                for index in chunkStart..<chunkEnd {
                    guard let message = messages[index], message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR else { continue }
                    at = append(message.pointee.key, message.pointee.key_len, to: buffer, at: at)
                    at = append(message.pointee.payload, message.pointee.len, to: buffer, at: at)
                }
                initialized = at
            }
            var at = 0
            for index in chunkStart..<chunkEnd {
                guard let message = messages[index] else { continue }
                guard message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR else {
                    try body(message, nil)
                    continue
                }
                let raw = message.pointee
                if raw.rkt != topicHandle {
                    topicHandle = raw.rkt
                    topicName = raw.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
                }
                let keyCount = byteCount(raw.key, raw.key_len)
                let valueCount = byteCount(raw.payload, raw.len)
                let converted = KafkaMessage(
                    topic: topicName, partition: raw.partition, offset: raw.offset, bytes: bytes,
                    keyBounds: Bounds(start: at, count: keyCount, present: raw.key != nil),
                    valueBounds: Bounds(start: at + keyCount, count: valueCount, present: raw.payload != nil),
                    headers: readsHeaders ? headers(of: message) : [], timestamp: timestamp(of: message)
                )
                at += keyCount + valueCount
                try body(message, converted)
            }
            chunkStart = chunkEnd
        }
    }

    /// The message's headers, copied; empty (no allocation) when it has none.
    private static func headers(of message: UnsafeMutablePointer<rd_kafka_message_t>) -> [KafkaHeader] {
        var headerList: OpaquePointer?
        guard rd_kafka_message_headers(message, &headerList) == RD_KAFKA_RESP_ERR_NO_ERROR, let headerList else { return [] }
        let count = rd_kafka_header_cnt(headerList)
        var headers: [KafkaHeader] = []
        headers.reserveCapacity(count)
        for index in 0..<count {
            var name: UnsafePointer<CChar>?
            var value: UnsafeRawPointer?
            var size = 0
            guard rd_kafka_header_get_all(headerList, index, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR, let name else { continue }
            headers.append(KafkaHeader(key: String(cString: name), value: value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) }))
        }
        return headers
    }

    private static func timestamp(of message: UnsafeMutablePointer<rd_kafka_message_t>) -> Int64? {
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(message, &timestampType)
        return timestampType == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? nil : timestamp
    }
}

/// librdkafka's length of a key or value, 0 when it has no bytes (a null key or value).
@inline(__always)
private func byteCount(_ source: UnsafeRawPointer?, _ count: Int) -> Int {
    source == nil ? 0 : count
}

/// Copies `count` bytes from `source` (if any) into `buffer` at `at`; returns the position after them.
@inline(__always)
private func append(_ source: UnsafeRawPointer?, _ count: Int, to buffer: UnsafeMutableBufferPointer<UInt8>, at: Int) -> Int {
    guard let source, count > 0 else { return at }
    UnsafeMutableRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(buffer)[at..<at + count])
        .copyMemory(from: UnsafeRawBufferPointer(start: source, count: count))
    return at + count
}
