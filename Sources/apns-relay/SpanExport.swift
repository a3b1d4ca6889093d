import Foundation
import Logging
import OTel
import Relay
import ServiceLifecycle
import Tracing

/// `tracing.otlp_endpoint`: the tracer the relay's spans go through and the service that exports them over OTLP/HTTP
/// (swift-otel's batch processor and exporter). Only traces: the relay's logs and metrics keep their own backends.
enum SpanExport {
    /// The tracer and its export service; `nil` when `settings` turn tracing off.
    ///
    /// The standard `OTEL_*` environment variables still apply (swift-otel reads them): `OTEL_TRACES_SAMPLER`,
    /// `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, `OTEL_RESOURCE_ATTRIBUTES`, and so on.
    static func make(_ settings: RelayConfiguration.TracingSettings, logger: Logger) throws -> (tracer: RelayTracer, service: any Service)? {
        guard let url = settings.tracesURL else { return nil }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "apns-relay"
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        configuration.traces.exporter = .otlp
        configuration.traces.otlpExporter.protocol = .httpProtobuf
        configuration.traces.otlpExporter.endpoint = url
        configuration.diagnosticLogger = .custom(logger)
        let backend = try OTel.makeTracingBackend(configuration: configuration)
        logger.info("exporting spans of traced events", metadata: ["otlp_endpoint": "\(url)"])
        // swift-otel's default sampler, and every one `OTEL_TRACES_SAMPLER` names `parentbased_*`, follow the parent.
        let sampler = ProcessInfo.processInfo.environment["OTEL_TRACES_SAMPLER"]?.lowercased() ?? ""
        return (RelayTracer(tracer: backend.factory, followsParentSampling: sampler.isEmpty || sampler.hasPrefix("parentbased_")), backend.service)
    }
}
