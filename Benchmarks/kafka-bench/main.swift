// Consumer throughput of the Swift `Kafka` face against a plain C loop over librdkafka, both
// reading the same 1,000,000 small messages from the embedded cluster in the same run; then what a
// transaction's commit costs librdkafka's main thread (TransactionCost.swift).
// Usage: kafka-bench [messages] [partitions] [rounds]
import CRdKafkaBaseline
import Foundation
import Kafka
import Logging

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let messageCount = arguments.count > 0 ? arguments[0] : 1_000_000
let partitions = arguments.count > 1 ? arguments[1] : 16
let rounds = arguments.count > 2 ? arguments[2] : 3
let batchSize = 1024

let logger: Logger = {
    var logger = Logger(label: "kafka-bench")
    logger.logLevel = .error
    return logger
}()

func elapsed(since start: ContinuousClock.Instant) -> Double {
    let duration = ContinuousClock.now - start
    return Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

let cluster = try EmbeddedKafka(brokers: 1, logger: logger)
try cluster.createTopic("bench", partitions: partitions)
print("embedded cluster \(cluster.bootstrapServers); \(messageCount) messages in \(partitions) partitions")

// Produce: 8-byte keys, 16-byte values.
let producer = try KafkaProducer(
    configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers, properties: ["linger.ms": "20", "batch.num.messages": "10000"]),
    logger: logger
)
let produceStart = ContinuousClock.now
var pending: [KafkaPendingDelivery] = []
pending.reserveCapacity(messageCount)
for index in 0..<messageCount {
    var key = [UInt8](repeating: 0, count: 8)
    withUnsafeBytes(of: UInt64(index).bigEndian) { key = Array($0) }
    pending.append(try await producer.enqueue(KafkaRecord(topic: "bench", key: key, value: [UInt8](repeating: UInt8(index & 0xff), count: 16))))
}
for delivery in pending { _ = try await delivery.report() }
pending.removeAll()
let produceSeconds = elapsed(since: produceStart)
print(String(format: "produce: %.0f msg/s (Swift producer, enqueue + delivery reports)", Double(messageCount) / produceSeconds))
await producer.close()

// Check the mock kept everything (it drops the oldest data past ~5 MB per partition).
let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
var held: Int64 = 0
for partition in 0..<partitions {
    let marks = try await admin.watermarks(of: TopicPartition("bench", Int32(partition)))
    held += marks.high - marks.low
}
guard held == Int64(messageCount) else {
    print("the embedded cluster holds only \(held) of \(messageCount) messages: use more partitions")
    exit(1)
}

func runC(round: Int) -> Double {
    var seconds = 0.0
    var checksum: UInt64 = 0
    let consumed = crdk_baseline_consume(cluster.bootstrapServers, "bench", "c-\(round)", Int64(messageCount), Int32(batchSize), &seconds, &checksum)
    precondition(consumed == Int64(messageCount), "C loop consumed \(consumed)")
    return Double(messageCount) / seconds
}

/// CPU seconds of the whole process (user + system), exited threads included.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// CPU seconds of the embedded cluster's mock-broker threads (`rdk:mock`): the broker's share, which both loops
/// cause alike and the consumer does not pay.
func mockBrokerCPUSeconds() -> Double {
    threadCPUSeconds(named: "rdk:mock")
}

/// CPU of the consumer side (everything in the process but the mock broker) per message, in µs.
func consumerCPUMicroseconds(of body: () async throws -> Double) async rethrows -> (rate: Double, cpuMicroseconds: Double) {
    let before = (process: processCPUSeconds(), mock: mockBrokerCPUSeconds())
    let rate = try await body()
    let spent = (processCPUSeconds() - before.process) - (mockBrokerCPUSeconds() - before.mock)
    return (rate, spent * 1e6 / Double(messageCount))
}

var cRates: [Double] = []
var swiftRates: [Double] = []
var cCPU: [Double] = []
var swiftCPU: [Double] = []
for round in 0..<rounds {
    let c = await consumerCPUMicroseconds { runC(round: round) }
    let swift = try await consumerCPUMicroseconds {
        try await SwiftConsumerRun(bootstrapServers: cluster.bootstrapServers, messageCount: messageCount, batchSize: batchSize, logger: logger).messagesPerSecond(round: round)
    }
    cRates.append(c.rate)
    swiftRates.append(swift.rate)
    cCPU.append(c.cpuMicroseconds)
    swiftCPU.append(swift.cpuMicroseconds)
    print(String(format: "round %d: consumer-side CPU per message (the mock broker's threads excluded): C loop %.2f µs, Swift consumer %.2f µs, ratio %.2f",
                 round + 1, c.cpuMicroseconds, swift.cpuMicroseconds, c.cpuMicroseconds / swift.cpuMicroseconds))
    print(String(format: "round %d: C loop %.0f msg/s, Swift consumer %.0f msg/s, ratio %.2f",
                 round + 1, cRates.last!, swiftRates.last!, swiftRates.last! / cRates.last!))
}
let bestC = cRates.max()!
let bestSwift = swiftRates.max()!
let medianC = cRates.sorted()[rounds / 2]
let medianSwift = swiftRates.sorted()[rounds / 2]
print(String(format: "best:   C loop %.0f msg/s, Swift consumer %.0f msg/s, ratio %.2f", bestC, bestSwift, bestSwift / bestC))
print(String(format: "median: C loop %.0f msg/s, Swift consumer %.0f msg/s, ratio %.2f", medianC, medianSwift, medianSwift / medianC))
let medianCCPU = cCPU.sorted()[rounds / 2]
let medianSwiftCPU = swiftCPU.sorted()[rounds / 2]
print(String(format: "median consumer-side CPU per message: C loop %.2f µs, Swift consumer %.2f µs, ratio (C / Swift) %.2f", medianCCPU, medianSwiftCPU, medianCCPU / medianSwiftCPU))
try cluster.createTopic("transactions", partitions: 4)
try await measureTransactionCost(cluster: cluster, topic: "transactions", rounds: 300, logger: logger)
cluster.stop()
