import APNs
import Kafka
import Logging
import NIOCore
import Relay
import ServiceLifecycle

/// What `apns.transport: binary` needs from the configuration: the client certificate, the gateway and feedback
/// endpoints, the format, the feedback poller.
extension RelayConfiguration.APNsSettings {
    /// The gateway for `environment`: its override (own key or `apns.endpoint`), or Apple's legacy gateway.
    func binaryGateway(for environment: APNsEnvironment) -> APNsEndpoint {
        endpointOverride(for: environment) ?? (environment == .production ? .legacyGateway : .legacyGatewaySandbox)
    }

    /// `apns.feedback_endpoint`, or Apple's feedback service for the environment.
    var feedbackService: APNsEndpoint {
        feedbackEndpoint ?? (environment == .production ? .legacyFeedback : .legacyFeedbackSandbox)
    }

    /// `apns.binary_command` (validated to 0...2 by the loader).
    var binaryFormat: APNsBinaryFormat { APNsBinaryFormat(rawValue: binaryCommand) ?? .framed }

    /// The factory of binary gateway connections for `environment`.
    func binaryConnectionFactory(for environment: APNsEnvironment, certificate: APNsClientCertificate, logger: Logger) throws -> APNsBinaryConnectionFactory {
        try APNsBinaryConnectionFactory(
            configuration: APNsBinaryConnectionConfiguration(
                endpoint: binaryGateway(for: environment), certificate: certificate, caFile: caFile, format: binaryFormat, proxy: proxy),
            logger: logger)
    }

    /// The feedback service client of one certificate (the service reports the tokens of its apps).
    func feedbackClient(certificate: APNsClientCertificate, logger: Logger) throws -> APNsFeedbackClient {
        try APNsFeedbackClient(
            configuration: APNsFeedbackConfiguration(endpoint: feedbackService, certificate: certificate, caFile: caFile, proxy: proxy),
            logger: logger)
    }
}

/// The tuples of one feedback poll as the relay's dead-token reports.
func deadTokenReports(_ tuples: [APNsFeedbackTuple]) -> [DeadTokenReport] {
    tuples.map { DeadTokenReport(token: $0.tokenHex, since: $0.sinceMilliseconds) }
}

/// Polls the legacy feedback service every `apns.feedback_interval_s` while `run` runs and hands what it reads to
/// the relay (registry update, failed-token records with reason `Feedback`).
struct FeedbackService: Service {
    let poller: APNsFeedbackPoller

    init(client: APNsFeedbackClient, interval: Duration, relay: RelayService, logger: Logger) {
        poller = APNsFeedbackPoller(
            interval: interval, logger: logger,
            poll: { try await client.poll() },
            handle: { tuples in relay.reportDeadTokens(deadTokenReports(tuples)) })
    }

    func run() async throws {
        // Cancelled on graceful shutdown: the poller's sleep ends and the loop returns.
        await cancelWhenGracefulShutdown {
            await poller.run()
        }
    }
}
