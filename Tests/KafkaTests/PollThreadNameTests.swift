import Foundation
import Kafka
import Testing

@Suite("Poll threads", .serialized)
struct PollThreadNameTests {
    /// The names the OS shows for this process's threads (`top -H`, `perf`, /proc).
    private func threadNames() -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
    }

    @Test("a consumer's and a producer's poll threads carry their own names, so their CPU is told apart from the event loops'")
    func pollThreadsNamed() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        try cluster.createTopic("thread-names", partitions: 1)
        let producer = try makeProducer(cluster)
        let consumer = try makeConsumer(cluster, group: "thread-names", topics: ["thread-names"])
        // The threads start with their clients; naming is the threads' first step (bounded wait for it).
        for _ in 0..<100 where !(threadNames().contains("kafka-producer") && threadNames().contains("kafka-consumer")) {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(threadNames().contains("kafka-producer"))
        #expect(threadNames().contains("kafka-consumer"))
        await consumer.close()
        await producer.close()
    }
}
