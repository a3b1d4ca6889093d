import APNs
import InMemoryTracing
import Kafka
import Testing
import Tracing

@testable import Relay

/// The spans recorded at the driver's edges, against a tracer that keeps them in memory. That tracer does not read
/// W3C headers, so these tests check what is recorded, when and with what; the OTLP process test checks the parents.
@Suite("Relay spans: what each edge records for a traced event")
struct RelaySpansTests {
    static let sampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    static let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"

    static func spans(_ tracer: InMemoryTracer, followsParentSampling: Bool = true) -> RelaySpans {
        RelaySpans(tracer: tracer, followsParentSampling: followsParentSampling, resultsTopic: "push.results", deadLetterTopic: "push.dlq",
                   consumerGroup: "apns-relay")
    }

    static func trace(_ traceparent: String?) -> TraceHeaders {
        TraceHeaders(of: traceparent.map { [KafkaHeader(key: "traceparent", value: $0)] } ?? [])
    }

    static func dispatch(serial: UInt64, trace: TraceHeaders) throws -> DeviceDispatch<PendingNotification> {
        let token = String(repeating: "cd", count: 32)
        let event = try PushEventDecoder().decode(Array("{\"id\":\"e\",\"tokens\":[\"\(token)\"],\"apns\":{\"payload\":{\"aps\":{\"alert\":\"hi\"}}}}".utf8))
        let notification = try event.render(for: token, badge: nil, defaultTopic: "com.example.app")
        let pending = PendingNotification(record: RecordReference(TopicPartition("push.events", 1), 7), eventID: "e", user: nil, seq: nil,
                                          badge: nil, token: token, notification: notification, environment: .sandbox, consumedAt: 0,
                                          late: false, fanOutLane: nil, trace: trace)
        return DeviceDispatch(ticket: DispatchTicket(slot: 0, serial: serial),
                              notification: DeviceNotification(token: token, eventID: "e", badge: nil, isBadgeOnly: false, payload: pending), attempt: 2)
    }

    @Test("a read event records one consume span from its Kafka timestamp, with Kafka's attributes; without a traceparent, with a malformed one, or unsampled under a parent-based sampler, nothing")
    func consumed() {
        let tracer = InMemoryTracer()
        let spans = Self.spans(tracer)
        for headers in [[], [KafkaHeader(key: "traceparent", value: "not-a-trace")], [KafkaHeader(key: "TraceParent", value: Self.unsampled)]] {
            spans.consumed(KafkaMessage(topic: "push.events", partition: 3, offset: 11, key: nil, value: [], headers: headers, timestamp: 1_700_000_000_000))
        }
        #expect(tracer.finishedSpans.isEmpty && tracer.activeSpans.isEmpty)
        #expect(tracer.performedContextExtractions.isEmpty, "the tracer is not even asked")

        spans.consumed(KafkaMessage(topic: "push.events", partition: 3, offset: 11, key: nil, value: [],
                                    headers: [KafkaHeader(key: "TraceParent", value: Self.sampled)], timestamp: 1_700_000_000_000))
        #expect(tracer.finishedSpans.count == 1)
        let consume = tracer.finishedSpans[0]
        // OpenTelemetry's messaging conventions: `{operation} {destination}`, the operation and the group named.
        #expect(consume.operationName == "process push.events" && consume.kind == .consumer)
        #expect(consume.attributes["messaging.operation.type"]?.toSpanAttribute() == "process")
        #expect(consume.attributes["messaging.operation.name"]?.toSpanAttribute() == "process")
        #expect(consume.attributes["messaging.consumer.group.name"]?.toSpanAttribute() == "apns-relay")
        #expect(consume.attributes["messaging.system"]?.toSpanAttribute() == "kafka")
        #expect(consume.startInstant.nanosecondsSinceEpoch == 1_700_000_000_000 * 1_000_000)
        #expect(consume.attributes["messaging.destination.name"]?.toSpanAttribute() == "push.events")
        #expect(consume.attributes["messaging.destination.partition.id"]?.toSpanAttribute() == "3")
        #expect(consume.attributes["messaging.kafka.offset"]?.toSpanAttribute() == 11)
        #expect(tracer.performedContextExtractions.count == 1, "the producer's context is read from the record's headers")
    }

    @Test("a sampler that does not follow the parent is asked for an unsampled parent too; a record stamped ahead of this clock starts its span at its end")
    func notParentBased() {
        let tracer = InMemoryTracer()
        let spans = Self.spans(tracer, followsParentSampling: false)
        let ahead = Int64(DefaultTracerClock.now.nanosecondsSinceEpoch / 1_000_000) + 3_600_000
        spans.consumed(KafkaMessage(topic: "push.events", partition: 0, offset: 0, key: nil, value: [],
                                    headers: [KafkaHeader(key: "traceparent", value: Self.unsampled)], timestamp: ahead))
        #expect(tracer.finishedSpans.count == 1)
        let consume = tracer.finishedSpans[0]
        #expect(consume.startInstant.nanosecondsSinceEpoch == consume.endInstant.nanosecondsSinceEpoch)
    }

    @Test("a send span ends with APNs' answer (attempts, status, reason, an error status when not delivered); the answer span is its child; an answer to a send not recorded begins nothing")
    func sendAndAnswer() throws {
        let tracer = InMemoryTracer()
        var spans = Self.spans(tracer)
        let rejected = try Self.dispatch(serial: 1, trace: Self.trace(Self.sampled))
        spans.sending(rejected)
        #expect(spans.openCount == 1)
        let refusal = APNsOutcome(.response(APNsResponse(status: 400, reason: .badTopic)), attempts: 3, apnsID: rejected.notification.payload.notification.apnsID)
        let answerSpan = spans.answered(rejected, outcome: refusal)
        let answer = try #require(answerSpan)
        answer.end()
        #expect(spans.openCount == 0)

        let finished = tracer.finishedSpans
        let send = try #require(finished.first { $0.operationName == "POST /3/device/{device_token}" })
        #expect(send.attributes["http.request.method"]?.toSpanAttribute() == "POST")
        #expect(send.attributes["url.template"]?.toSpanAttribute() == "/3/device/{device_token}")
        #expect(send.kind == .client)
        #expect(send.attributes["apns.id"]?.toSpanAttribute() == .string(rejected.notification.payload.apnsID))
        #expect(send.attributes["apns.environment"]?.toSpanAttribute() == "sandbox")
        #expect(send.attributes["apns_relay.attempt"]?.toSpanAttribute() == 2)
        #expect(send.attributes["apns_relay.attempts"]?.toSpanAttribute() == 3)
        #expect(send.attributes["http.response.status_code"]?.toSpanAttribute() == 400)
        #expect(send.attributes["apns.reason"]?.toSpanAttribute() == "BadTopic")
        #expect(send.status?.code == .error)
        let answered = try #require(finished.first { $0.operationName == "answer" })
        #expect(answered.parentSpanID == send.spanID && answered.traceID == send.traceID)
        #expect(answered.attributes["apns_relay.status"]?.toSpanAttribute() == "rejected")

        let untraced = try Self.dispatch(serial: 2, trace: .none)
        spans.sending(untraced)
        #expect(spans.openCount == 0)
        let untracedAnswer = spans.answered(untraced, outcome: APNsOutcome(.response(APNsResponse(status: 200)), attempts: 1, apnsID: .init()))
        #expect(untracedAnswer == nil)

        let delivered = try Self.dispatch(serial: 3, trace: Self.trace(Self.sampled))
        spans.sending(delivered)
        spans.answered(delivered, outcome: APNsOutcome(.response(APNsResponse(status: 200)), attempts: 1, apnsID: .init()))?.end()
        let deliveredSend = try #require(tracer.finishedSpans.last { $0.operationName == RelaySpans.sendSpanName })
        #expect(deliveredSend.status == nil, "a delivered send has no error status")
        #expect(tracer.finishedSpans.count == 4)
    }

    @Test("an apply span begins once per changelog append, a retried append keeping it, and ends when the append is stored")
    func apply() throws {
        let tracer = InMemoryTracer()
        var spans = Self.spans(tracer)
        spans.applying(5, seq: 9, badge: 4, trace: Self.trace(Self.sampled))
        spans.applying(5, seq: 9, badge: 4, trace: Self.trace(Self.sampled))
        spans.applying(6, seq: 1, badge: 1, trace: nil)
        spans.applying(7, seq: 1, badge: 1, trace: Self.trace(Self.unsampled))
        #expect(spans.openCount == 1 && tracer.activeSpans.count == 1)
        spans.applied(6)
        spans.applied(5)
        spans.applied(5)
        #expect(spans.openCount == 0)
        let apply = try #require(tracer.finishedSpans.first)
        #expect(tracer.finishedSpans.count == 1)
        #expect(apply.operationName == "apply")
        #expect(apply.attributes["apns_relay.seq"]?.toSpanAttribute() == 9 && apply.attributes["apns_relay.badge"]?.toSpanAttribute() == 4)
    }

    @Test("a publish span names the results topic and the status for a result, the dead-letter topic for a dead letter; one per record and device, ended when Kafka acknowledged it")
    func publish() throws {
        let tracer = InMemoryTracer()
        var spans = Self.spans(tracer)
        let record = RecordReference(TopicPartition("push.events", 2), 40)
        let trace = Self.trace(Self.sampled)
        spans.publishing(record, device: "aa", trace: trace, status: "delivered")
        spans.publishing(record, device: "aa", trace: trace, status: "delivered")
        spans.publishing(record, device: "bb", trace: trace, status: "unregistered")
        spans.publishing(record, device: nil, trace: trace, status: nil)
        #expect(spans.openCount == 3)
        spans.published(record, device: "bb")
        spans.published(record, device: nil)
        spans.published(record, device: "aa")
        #expect(spans.openCount == 0)
        let finished = tracer.finishedSpans
        #expect(finished.count == 3 && finished.allSatisfy { $0.kind == .producer && $0.attributes["messaging.operation.name"]?.toSpanAttribute() == "send" })
        #expect(finished.map(\.operationName) == ["send push.results", "send push.dlq", "send push.results"])
        #expect(finished.map { $0.attributes["messaging.destination.name"]?.toSpanAttribute() } == ["push.results", "push.dlq", "push.results"])
        #expect(finished.map { $0.attributes["apns_relay.status"]?.toSpanAttribute() } == ["unregistered", nil, "delivered"])
    }

    @Test("spans open for longer than the stale bound end as unfinished, with an error status; at the stop every open span does")
    func unfinished() throws {
        let tracer = InMemoryTracer()
        var spans = Self.spans(tracer)
        let trace = Self.trace(Self.sampled)
        spans.sending(try Self.dispatch(serial: 1, trace: trace))
        spans.applying(1, seq: 1, badge: 1, trace: trace)
        spans.publishing(RecordReference(TopicPartition("push.events", 0), 1), device: "aa", trace: trace, status: "delivered")
        spans.endStale(at: .now)
        #expect(spans.openCount == 3, "none is stale yet")
        spans.endStale(at: .now.advanced(by: RelaySpans.staleAfter + .seconds(1)))
        #expect(spans.openCount == 0)
        #expect(tracer.finishedSpans.count == 3)
        #expect(tracer.finishedSpans.allSatisfy { $0.status?.code == .error && $0.status?.message == "unfinished in this process" })

        spans.sending(try Self.dispatch(serial: 2, trace: trace))
        spans.applying(2, seq: 2, badge: 2, trace: trace)
        spans.endAll()
        #expect(spans.openCount == 0 && tracer.finishedSpans.count == 5 && tracer.activeSpans.isEmpty)
    }
}
