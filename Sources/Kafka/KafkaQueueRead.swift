import CRdKafka

/// Takes the messages `queue` holds now, at most `limit`, into `messages`, waiting up to
/// `timeoutMilliseconds` for the first one only. Returns how many (or -1 on error, as librdkafka).
///
/// Why not one `rd_kafka_consume_batch_queue(queue, timeout, messages, limit)`: librdkafka's batch
/// read keeps waiting for more until it has `limit` messages or the timeout passes, even with
/// messages in hand. Below `limit` messages per timeout (1,024 per 100 ms: any rate under ~10,000
/// events/s) every message waited the whole timeout before the application saw it, and arrived in
/// bursts. Here the first read blocks for one message; the second takes what is queued without waiting.
func consumeAvailable(
    _ queue: OpaquePointer?, timeoutMilliseconds: Int32,
    into messages: UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>, limit: Int
) -> Int {
    let first = rd_kafka_consume_batch_queue(queue, timeoutMilliseconds, messages, 1)
    guard first == 1, limit > 1 else { return first }
    let rest = rd_kafka_consume_batch_queue(queue, 0, messages + 1, limit - 1)
    return rest < 0 ? 1 : 1 + rest
}
