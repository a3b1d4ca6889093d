// The W3C trace context an event carries, for the records it causes.

public import KafkaCore
import W3CTraceContext

/// The W3C trace context headers (`traceparent`, `tracestate`) of a `push.events` record, copied as they are onto
/// every record the event causes (results, failed tokens, wrong-environment records, dead letters, forwards), so a
/// consumer of those topics continues the producer's trace.
///
/// The headers are kept byte for byte, valid or not: a relay that judged them would lose a vendor's extension, and
/// a malformed header never makes an event a dead letter. Only ``traceID`` (for log lines) reads them. An event
/// without them costs nothing: ``none`` holds an empty array, which allocates nothing.
public struct TraceHeaders: Sendable, Hashable {
    /// The headers, in the event's order; empty when it had none.
    public let headers: [KafkaHeader]

    /// No trace context.
    public static let none = TraceHeaders(uncheckedHeaders: [])

    /// The names copied, lower-case as W3C's Trace Context over Kafka writes them.
    public static let names = ["traceparent", "tracestate"]

    /// A header value longer than this is not copied: a record causes one result per device, and a
    /// header of any size copied onto each could make them too large to publish. W3C bounds
    /// `tracestate` at 32 members; 512 bytes is what it asks every vendor to pass on, and this is twice that.
    public static let maxValueBytes = 1_024

    /// The log metadata key of the trace id in lines about one event.
    public static let logMetadataKey = "trace_id"

    /// The trace headers among `headers`: the first `traceparent` and the first `tracestate` (names compared without
    /// case, as HTTP does), each with a value of at most ``maxValueBytes``; ``none`` when there are none.
    public init(of headers: [KafkaHeader]) {
        guard !headers.isEmpty else {
            self = .none
            return
        }
        var found: [KafkaHeader] = []
        for header in headers {
            guard let name = Self.traceName(header.key), !found.contains(where: { $0.key.lowercased() == name }),
                  let value = header.value, value.count <= Self.maxValueBytes else { continue }
            found.append(header)
        }
        self.init(uncheckedHeaders: found)
    }

    private init(uncheckedHeaders: [KafkaHeader]) {
        self.headers = uncheckedHeaders
    }

    /// Whether the event carried no trace context.
    public var isEmpty: Bool { headers.isEmpty }

    /// The trace id (32 lower-case hex digits) of a valid `traceparent`; `nil` without one.
    public var traceID: String? { parent?.traceID.description }

    /// Whether the producer sampled the trace (the `traceparent`'s sampled flag); `nil` without a valid `traceparent`.
    public var parentIsSampled: Bool? { parent.map { $0.flags.contains(.sampled) } }

    /// The valid `traceparent`, parsed.
    private var parent: TraceContext? {
        guard let parent = headers.first(where: { $0.key.lowercased() == "traceparent" })?.value else { return nil }
        return try? TraceContext(traceParentHeaderValue: String(decoding: parent, as: UTF8.self))
    }

    /// `key` as a trace header's name, lower-cased; `nil` for any other header.
    private static func traceName(_ key: String) -> String? {
        guard key.utf8.count == 11 || key.utf8.count == 10 else { return nil }
        let lowered = key.lowercased()
        return names.contains(lowered) ? lowered : nil
    }
}
