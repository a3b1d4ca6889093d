import Foundation
import Kafka
import Logging
import Synchronization

/// Settings that make group joins and rejoins quick against the embedded cluster.
let fastGroupProperties = [
    "session.timeout.ms": "6000",
    "heartbeat.interval.ms": "500",
    "max.poll.interval.ms": "10000",
    "topic.metadata.refresh.interval.ms": "1000",
]

func testLogger(_ label: String) -> Logger {
    var logger = Logger(label: label)
    logger.logLevel = ProcessInfo.processInfo.environment["KAFKA_TEST_TRACE"] != nil ? .info : .warning
    return logger
}

func makeConsumer(_ cluster: EmbeddedKafka, group: String, topics: [String], bufferLimit: Int = 8192, readsHeaders: Bool = true) throws -> KafkaConsumer {
    try KafkaConsumer(
        configuration: KafkaConsumerConfiguration(
            kafka: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers, properties: fastGroupProperties),
            groupID: group,
            topics: topics,
            bufferLimit: bufferLimit,
            readsHeaders: readsHeaders
        ),
        logger: testLogger("consumer-\(group)")
    )
}

func makeProducer(_ cluster: EmbeddedKafka, properties: [String: String] = [:]) throws -> KafkaProducer {
    try KafkaProducer(
        configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers, properties: properties),
        logger: testLogger("producer")
    )
}

/// A one-broker cluster with `topic` holding `count` records from ``produceKeyed(_:topic:range:keys:)``,
/// and the producer that wrote them.
func clusterWithKeyedRecords(_ topic: String, partitions: Int, count: Int, keys: Int) async throws -> (EmbeddedKafka, KafkaProducer) {
    let cluster = try EmbeddedKafka(brokers: 1)
    try cluster.createTopic(topic, partitions: partitions)
    let producer = try makeProducer(cluster)
    try await produceKeyed(producer, topic: topic, range: 0..<count, keys: keys)
    return (cluster, producer)
}

/// Produces `count` records keyed `key-(i % keys)` with value `key-k:i` and a header, in order,
/// and waits for every delivery report.
func produceKeyed(_ producer: KafkaProducer, topic: String, range: Range<Int>, keys: Int) async throws {
    var pending: [KafkaPendingDelivery] = []
    pending.reserveCapacity(range.count)
    for index in range {
        let key = "key-\(index % keys)"
        pending.append(try await producer.enqueue(KafkaRecord(
            topic: topic,
            key: Array(key.utf8),
            value: Array("\(key):\(index)".utf8),
            headers: [KafkaHeader(key: "index", value: "\(index)"), KafkaHeader(key: "empty", value: nil)]
        )))
    }
    for delivery in pending { _ = try await delivery.report() }
}

/// A consumed record reduced to what the tests check.
struct Seen: Hashable, Sendable {
    var key: String
    var index: Int
    var partition: Int32
    var offset: Int64

    init(_ message: KafkaMessage) {
        key = String(decoding: message.key ?? [], as: UTF8.self)
        let value = String(decoding: message.value ?? [], as: UTF8.self)
        index = Int(value.split(separator: ":").last ?? "") ?? -1
        partition = message.partition
        offset = message.offset
    }
}

struct TimedOut: Error, CustomStringConvertible {
    var description: String
}

/// Runs `body` but gives up after `seconds` so a broken consumer fails the test instead of hanging.
func withTimeout<T: Sendable>(_ seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        guard let first = try await group.next(), let value = first else {
            group.cancelAll()
            throw TimedOut(description: "timed out after \(seconds)s: \(what)")
        }
        group.cancelAll()
        return value
    }
}

/// Next offsets to commit for what was seen: per partition, the highest offset + 1.
func nextOffsets(_ seen: [Seen], topic: String) -> [TopicPartition: Int64] {
    var result: [TopicPartition: Int64] = [:]
    for record in seen {
        let partition = TopicPartition(topic, record.partition)
        result[partition] = max(result[partition] ?? 0, record.offset + 1)
    }
    return result
}

/// Prints a timestamped line when KAFKA_TEST_TRACE is set, to see where a slow test spends time.
func trace(_ text: String) {
    guard ProcessInfo.processInfo.environment["KAFKA_TEST_TRACE"] != nil else { return }
    print("trace \(Date().timeIntervalSince1970): \(text)")
}

/// Reads `count` messages (ignoring rebalance events), failing after `seconds`.
func collectMessages(_ consumer: KafkaConsumer, count: Int, seconds: Double = 60) async throws -> [Seen] {
    try await withTimeout(seconds, "consume \(count)") {
        var seen: [Seen] = []
        for try await case .message(let message) in consumer.events {
            seen.append(Seen(message))
            if seen.count == count { break }
        }
        return seen
    }
}
