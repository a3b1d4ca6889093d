public import Logging
import Tracing
import RelayCore

/// The trace id of the event a piece of work is about, in the task's `ServiceContext`.
enum EventTraceIDKey: ServiceContextKey {
    typealias Value = String
    static var nameOverride: String? { "apns-relay-trace-id" }
}

extension Logger.MetadataProvider {
    /// Adds `trace_id` to every log line written while the task's `ServiceContext` names an event's trace
    /// (``withEventTrace(_:_:)``). The process bootstraps its log handlers with it.
    public static let eventTrace = Logger.MetadataProvider {
        guard let traceID = ServiceContext.current?[EventTraceIDKey.self] else { return [:] }
        return [TraceHeaders.logMetadataKey: .string(traceID)]
    }
}

/// Runs `body` (logging about one event) with the event's trace id in the task's `ServiceContext`, for
/// ``Logging/Logger/MetadataProvider/eventTrace``; without a valid `traceparent`, as it is.
func withEventTrace<Result>(_ trace: TraceHeaders, _ body: () throws -> Result) rethrows -> Result {
    guard !trace.isEmpty, let traceID = trace.traceID else { return try body() }
    var context = ServiceContext.current ?? .topLevel
    context[EventTraceIDKey.self] = traceID
    return try ServiceContext.withValue(context) { try body() }
}
