import APNs
import ArgumentParser
import Foundation
import Kafka
import Logging
import Relay
import Synchronization

/// `apns-relay feedback`: one poll of the legacy feedback service; what it reads is published as failed tokens.
struct FeedbackCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "feedback",
        abstract: "Poll the legacy APNs feedback service once and publish the dead tokens it reports to the failed-tokens topic."
    )

    @Option(name: .long, help: "YAML configuration file; APNS_RELAY_* environment variables override it.")
    var config: String?

    func run() async throws {
        let configuration = try await ConfigurationLoader.load(file: config, requireService: true)
        configuration.log.bootstrap()
        let logger = Logger(label: "apns-relay.feedback")
        let clients = try configuration.apns.requiredClientCertificates(logger: logger).map { group, certificate in
            try configuration.apns.feedbackClient(certificate: certificate, logger: logger.with(credential: group.name))
        }
        guard !configuration.kafka.isEmbedded else {
            throw ConfigurationError(key: "kafka.brokers", problem: "the feedback command publishes to a real cluster; 'embedded' would vanish with the process")
        }
        // One poll per certificate: the service reports the dead tokens of the apps whose certificate asks.
        var tuples: [APNsFeedbackTuple] = []
        var truncatedBytes = 0
        for client in clients {
            let poll = try await client.poll()
            tuples += poll.tuples
            truncatedBytes += poll.truncatedBytes
        }
        let kafka = KafkaConfiguration(bootstrapServers: configuration.kafka.brokers ?? "", properties: configuration.kafka.properties)
        // The registrations as they are now: a token registered again since the service's time for it is alive
        // (the app got it again), and a registered dead token's record names its user, topic and environment.
        let registry = try await Self.readRegistry(kafka: kafka, topic: configuration.kafka.topics.devices, logger: logger)
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        var deliveries: [KafkaPendingDelivery] = []
        var registeredAgain = 0
        for report in deadTokenReports(tuples) {
            let token = report.token.lowercased()
            let record: FailedTokenRecord
            switch registry.withLock({ $0.reportDead(token: token, since: report.since) }) {
            case .registeredAgain:
                registeredAgain += 1
                continue
            case .removed(let registration):
                record = FailedTokenRecord(registration: registration, reason: "Feedback", since: report.since, eventID: nil)
            case .unregistered:
                record = FailedTokenRecord(token: token, user: nil, topic: nil, environment: nil, reason: "Feedback", since: report.since, eventID: nil)
            }
            deliveries.append(try await producer.enqueue(KafkaRecord(topic: configuration.kafka.topics.failedTokens, key: Array(token.utf8), value: record.encoded())))
        }
        try await producer.flush()
        for delivery in deliveries { _ = try await delivery.report() }
        await producer.close()
        var summary = "feedback: \(deliveries.count) dead token(s) published to \(configuration.kafka.topics.failedTokens)"
        if registeredAgain > 0 { summary += "; \(registeredAgain) reported token(s) registered again since, alive, left out" }
        if truncatedBytes > 0 { summary += "; a truncated last tuple (\(truncatedBytes) bytes) was ignored" }
        print(summary)
    }

    /// `push.devices` read to its end: the last registration per token.
    private static func readRegistry(kafka: KafkaConfiguration, topic: String, logger: Logger) async throws -> LockedRegistry {
        let registry = LockedRegistry(DeviceRegistry())
        let partitions = try await KafkaAdmin(configuration: kafka, logger: logger).partitionCount(of: topic) ?? 0
        _ = try await KafkaPartitionReader(configuration: kafka, logger: logger)
            .readToEnd((0..<Int32(partitions)).map { TopicPartition(topic, $0) }) { message in
                guard let key = message.key else { return }
                registry.withLock { _ = $0.apply(key: String(decoding: key, as: UTF8.self), value: message.value) }
            }
        return registry
    }
}

/// The registry the reader's callback fills (on librdkafka's thread) and the command then reads.
private final class LockedRegistry: Sendable {
    private let registry: Mutex<DeviceRegistry>

    init(_ registry: DeviceRegistry) { self.registry = Mutex(registry) }

    func withLock<Result>(_ body: (inout DeviceRegistry) -> Result) -> Result { registry.withLock { body(&$0) } }
}
