import Kafka
import Testing

@testable import Relay

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

    @Test("a dead letter keeps its input's headers; a replay publishes them again without the relay's own")
    func deadLetterHeadersRoundTrip() {
        let input = [KafkaHeader(key: "traceparent", value: Self.parent), KafkaHeader(key: "x-tenant", value: "acme"),
                     KafkaHeader(key: ForwardSource.header, value: "1:5"), KafkaHeader(key: "x-error", value: "forged")]
        let source = RecordReference(TopicPartition("push.events", 2), 9)
        let headers = DeadLetterHeaders.producerHeaders(of: input) + DeadLetterHeaders.headers(error: "apns: missing", source: source)
        let deadLetter = KafkaMessage(topic: "push.dlq", partition: 0, offset: 1, key: Array("k".utf8), value: Array("{}".utf8), headers: headers)
        #expect(DeadLetterReplay.error(of: deadLetter) == "apns: missing")
        #expect(DeadLetterReplay.step(for: deadLetter, eventsTopic: "push.events", allowUnsequencedBadges: false)
            == .replay(KafkaRecord(topic: "push.events", partition: 2, key: Array("k".utf8), value: Array("{}".utf8),
                                   headers: [KafkaHeader(key: "traceparent", value: Self.parent), KafkaHeader(key: "x-tenant", value: "acme")])))
    }
}
