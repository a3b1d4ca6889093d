import Kafka
import Logging

/// One measured pass of the Swift consumer. Kept out of main.swift so it is not main-actor
/// isolated: the loop runs on the global executor, as the relay's consumer task does.
struct SwiftConsumerRun: Sendable {
    var bootstrapServers: String
    var messageCount: Int
    var batchSize: Int
    var logger: Logger

    func messagesPerSecond(round: Int) async throws -> Double {
        let consumer = try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                kafka: KafkaConfiguration(bootstrapServers: bootstrapServers),
                groupID: "swift-\(round)", topics: ["bench"], batchSize: batchSize
            ),
            logger: logger
        )
        var consumed = 0
        var checksum = 0
        var start: ContinuousClock.Instant?
        for try await event in consumer.events {
            guard case .message(let message) = event else { continue }
            if start == nil { start = .now }
            consumed += 1
            checksum &+= (message.value?.count ?? 0) + (message.key?.count ?? 0) + Int(message.value?.first ?? 0)
            if consumed == messageCount { break }
        }
        let duration = ContinuousClock.now - (start ?? .now)
        await consumer.close()
        precondition(checksum > 0)
        return Double(messageCount) / (Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18)
    }
}
