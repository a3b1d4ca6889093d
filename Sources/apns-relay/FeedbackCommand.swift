import APNs
import ArgumentParser
import Foundation
import Kafka
import Logging
import Relay

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
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        var deliveries: [KafkaPendingDelivery] = []
        for report in deadTokenReports(tuples) {
            // One-shot: no device registry here, so user, topic and environment stay empty (a running relay fills
            // them from its registry when it polls).
            let record = FailedTokenRecord(token: report.token, user: nil, topic: nil, environment: nil, reason: "Feedback", since: report.since, eventID: nil)
            deliveries.append(try await producer.enqueue(KafkaRecord(topic: configuration.kafka.topics.failedTokens, key: Array(report.token.utf8), value: record.encoded())))
        }
        try await producer.flush()
        for delivery in deliveries { _ = try await delivery.report() }
        await producer.close()
        var summary = "feedback: \(tuples.count) dead token(s) published to \(configuration.kafka.topics.failedTokens)"
        if truncatedBytes > 0 { summary += "; a truncated last tuple (\(truncatedBytes) bytes) was ignored" }
        print(summary)
    }
}
