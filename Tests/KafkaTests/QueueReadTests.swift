import CRdKafka
import Foundation
import Testing

@testable import Kafka

@Suite("Reading the consumer queue", .serialized)
struct QueueReadTests {
    @Test("a read hands out the messages that are there without waiting for its batch to fill: a message produced later comes in a later read")
    func readDoesNotWaitToFill() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        try cluster.createTopic("queue-read", partitions: 1)
        let producer = try makeProducer(cluster)
        _ = try await producer.enqueue(KafkaRecord(topic: "queue-read", key: Array("k".utf8), value: Array("first".utf8))).report()

        let conf = try RdKafkaConfig(KafkaConfiguration(bootstrapServers: cluster.bootstrapServers, properties: fastGroupProperties),
                                     roleDefaults: [:], enforced: ["group.id": "queue-read", "enable.partition.eof": "false"])
        let handle = try KafkaClientHandle(kind: RD_KAFKA_CONSUMER, configuration: conf, callbacks: KafkaClientCallbacks(logger: testLogger("queue-read")))
        let partitions = KafkaPartitionList([TopicPartition("queue-read", 0)], offsets: [TopicPartition("queue-read", 0): Int64(RD_KAFKA_OFFSET_BEGINNING)])
        #expect(partitions.withPointer { rd_kafka_assign(handle.pointer, $0) } == RD_KAFKA_RESP_ERR_NO_ERROR)
        let queue = ConsumerQueue(handle: handle)

        // The second message is produced 2 s after the first read starts; the read may wait 20 s.
        // A read that waits to fill its 64 slots returns both together; one that hands out what is
        // there returns the first alone, long before the second exists.
        let second = Task {
            try await Task.sleep(for: .seconds(2))
            _ = try await producer.enqueue(KafkaRecord(topic: "queue-read", key: Array("k".utf8), value: Array("second".utf8))).report()
        }
        let (count, values) = await withCheckedContinuation { (done: CheckedContinuation<(Int, [String]), Never>) in
            Thread.detachNewThread {
                let messages = UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>.allocate(capacity: 64)
                defer { messages.deallocate() }
                let count = queue.read(into: messages, limit: 64, timeoutMilliseconds: 20_000)
                var values: [String] = []
                for index in 0..<max(0, count) {
                    guard let message = messages[index] else { continue }
                    values.append(String(decoding: UnsafeRawBufferPointer(start: message.pointee.payload, count: message.pointee.len), as: UTF8.self))
                    rd_kafka_message_destroy(message)
                }
                done.resume(returning: (count, values))
            }
        }
        #expect(count == 1 && values == ["first"], "the first read returned \(values)")
        try await second.value
        _ = rd_kafka_assign(handle.pointer, nil)
        await producer.close()
    }
}
