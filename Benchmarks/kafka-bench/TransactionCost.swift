// What a transaction costs librdkafka's main thread, against the same records delivered by an idempotent
// producer's flush: rounds of 16 small records to 4 partitions, then a commit (or a flush), on the embedded
// cluster. The relay's `kafka.transactions: on` makes one such round per partition commit.
import CRdKafka
import Foundation
import Kafka
import Logging

/// CPU seconds of this process's threads whose name starts with `prefix`, from the scheduler's nanosecond counters
/// (exited threads left out).
func threadCPUSeconds(named prefix: String) -> Double {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    var nanoseconds = 0.0
    for task in tasks {
        guard let comm = try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8), comm.hasPrefix(prefix),
              let schedstat = try? String(contentsOfFile: "/proc/self/task/\(task)/schedstat", encoding: .utf8),
              let onCPU = schedstat.split(separator: " ").first.flatMap({ Double($0) })
        else { continue }
        nanoseconds += onCPU
    }
    return nanoseconds / 1e9
}

/// Runs `rounds` rounds through a transactional producer and through an idempotent one (each round: 16 records
/// over 4 partitions of `topic`, then a commit or a flush) and prints librdkafka's main-thread CPU per round.
func measureTransactionCost(cluster: EmbeddedKafka, topic: String, rounds: Int, logger: Logger) async throws {
    let configuration = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)
    let records = (0..<16).map { KafkaRecord(topic: topic, partition: Int32($0 % 4), key: nil, value: Array("record \($0)".utf8)) }

    let transactional = try KafkaTransactionalProducer(configuration: configuration, logger: logger, transactionalID: "kafka-bench")
    try await transactional.initTransactions()
    // The first commit also finds the partitions' leaders: left out of the measurement.
    try await transactional.beginTransaction()
    try await transactional.commitTransaction()
    var before = threadCPUSeconds(named: "rdk:main")
    var start = ContinuousClock.now
    for _ in 0..<rounds {
        try await transactional.beginTransaction()
        for record in records { _ = try await transactional.enqueue(record) }
        try await transactional.commitTransaction()
    }
    let transactionCPU = (threadCPUSeconds(named: "rdk:main") - before) / Double(rounds)
    let transactionTime = elapsed(since: start) / Double(rounds)
    await transactional.close()

    let idempotent = try KafkaProducer(configuration: configuration, logger: logger)
    _ = try await idempotent.send(records[0])
    before = threadCPUSeconds(named: "rdk:main")
    start = ContinuousClock.now
    for _ in 0..<rounds {
        for record in records { _ = try await idempotent.enqueue(record) }
        try await idempotent.flush(timeout: .seconds(10))
    }
    let flushCPU = (threadCPUSeconds(named: "rdk:main") - before) / Double(rounds)
    let flushTime = elapsed(since: start) / Double(rounds)
    await idempotent.close()

    print(String(format: "transactions (%@): librdkafka main thread %.3f ms CPU per commit, %.1f ms per round; idempotent flush %.3f ms CPU, %.1f ms per round",
                 String(cString: rd_kafka_version_str()), transactionCPU * 1_000, transactionTime * 1_000, flushCPU * 1_000, flushTime * 1_000))
}
