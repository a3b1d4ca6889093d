import KafkaCore
import Testing
@testable import RelayCore

@Suite("Trace context headers of an event")
struct TraceHeadersTests {
    static let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test("the first traceparent and tracestate, names without case, values as they came; other headers left")
    func picksTraceHeaders() {
        let trace = TraceHeaders(of: [
            KafkaHeader(key: "x-tenant", value: "acme"), KafkaHeader(key: "TraceParent", value: Self.parent),
            KafkaHeader(key: "tracestate", value: "a=1"), KafkaHeader(key: "traceparent", value: "00-second"),
            KafkaHeader(key: "tracestate", value: "b=2"),
        ])
        #expect(trace.headers == [KafkaHeader(key: "TraceParent", value: Self.parent), KafkaHeader(key: "tracestate", value: "a=1")])
        #expect(trace.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(TraceHeaders(of: []) == .none && TraceHeaders(of: [KafkaHeader(key: "x-tenant", value: "acme")]).isEmpty)
    }

    @Test("a value over the bound or a null one is not copied; a malformed traceparent is copied but names no trace id")
    func boundsAndMalformed() {
        let long = String(repeating: "k=v,", count: 300)
        let trace = TraceHeaders(of: [KafkaHeader(key: "tracestate", value: long), KafkaHeader(key: "traceparent", value: nil)])
        #expect(trace.isEmpty)
        let malformed = TraceHeaders(of: [KafkaHeader(key: "traceparent", value: "not-a-trace")])
        #expect(malformed.headers.count == 1 && malformed.traceID == nil)
        #expect(TraceHeaders(of: [KafkaHeader(key: "traceparent", value: "00-00000000000000000000000000000000-00f067aa0ba902b7-01")]).traceID == nil,
                "an all-zero trace id is invalid")
    }
}
