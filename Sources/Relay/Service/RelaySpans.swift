import APNs
import Kafka
public import Tracing
import RelayCore

/// The tracer the relay's spans go through (``RelaySpans``).
public struct RelayTracer: Sendable {
    /// Starts and ends the spans.
    public var tracer: any Tracer
    /// Whether its sampler follows the parent's sampled flag (OpenTelemetry's `parentbased_*` samplers, the default):
    /// an event whose `traceparent` is not sampled then records nothing, and the tracer is not asked.
    public var followsParentSampling: Bool

    /// Creates one.
    public init(tracer: any Tracer, followsParentSampling: Bool) {
        self.tracer = tracer
        self.followsParentSampling = followsParentSampling
    }
}

/// The spans of traced events, recorded at the driver's edges while the engine decides (`tracing.otlp_endpoint`).
///
/// An event is traced when it carries a W3C `traceparent`: its spans continue the producer's trace, each a child of
/// the producer's span (the tracer's sampler decides, usually by the parent's sampled flag). An event without one
/// records nothing: a root trace per event would multiply the relay's work for traces nobody asked for. With a
/// parent-based sampler (OpenTelemetry's default) an unsampled parent costs a parse of its `traceparent` and no
/// more; a span the sampler does not record is neither kept nor given attributes.
///
/// Names and attributes follow OpenTelemetry's semantic conventions: messaging spans are `{operation} {destination}`
/// with `messaging.*` attributes, the APNs request an HTTP client span `{method} {url.template}`, the relay's own steps
/// internal spans under short names of their own.
///
/// - `process push.events`: from the record's Kafka timestamp until the engine read it (time in Kafka, the fetch, the
///   inbox).
/// - `apply`: from the badge change's application until `push.badge-state` stored it (its notifications wait for that).
/// - `POST /3/device/{device_token}`: one per send of one device's notification, from the engine's hand-over to the
///   sender until APNs's answer (a retry inside the sender is part of it; a retry the engine schedules is a span of its
///   own).
/// - `answer`: the engine taking that answer (the result, a retry, a dead token).
/// - `send push.results` (or the dead-letter topic): from a result or dead letter's production until Kafka
///   acknowledged it.
///
/// Only the driver touches it, and only when tracing is on: off, the driver holds `nil` and each edge costs one check.
struct RelaySpans {
    private let tracer: any Tracer
    /// The sampler follows the parent's sampled flag (`parentbased_*`): an unsampled parent records nothing, so the
    /// tracer is not asked.
    private let followsParentSampling: Bool
    private let resultsTopic: String
    private let deadLetterTopic: String
    private let consumerGroup: String
    private var sends: [DispatchTicket: OpenSpan] = [:]
    private var applies: [UInt64: OpenSpan] = [:]
    private var publishes: [PublishKey: OpenSpan] = [:]

    /// A span begun and not yet ended, with when it began on the monotonic clock (for ``endStale(at:)``).
    private struct OpenSpan {
        var span: any Span
        var openedAt: ContinuousClock.Instant
    }

    /// A result (of `device`) or a dead letter (no device) of one record: one of each at most is produced at a time.
    private struct PublishKey: Hashable {
        var record: RecordReference
        var device: String?
    }

    /// A span open longer than this is ended as unfinished: its answer or report will not come (the partition was handed
    /// over, the send dropped with it), and an open span must not be held for ever. Past every retry bound the relay keeps.
    static let staleAfter: Duration = .seconds(900)

    /// The APNs request's path, with its token as OpenTelemetry's `url.template` names a variable.
    static let sendURLTemplate = "/3/device/{device_token}"
    /// The APNs request's span name: its method and URL template (OpenTelemetry's HTTP client spans).
    static let sendSpanName = "POST \(sendURLTemplate)"

    /// Spans started through `tracer`, naming `resultsTopic` and `deadLetterTopic` as their publishes' destinations and
    /// `consumerGroup` as the consumer's group. `followsParentSampling`: the tracer's sampler is parent-based (unsampled
    /// parents record nothing).
    init(tracer: any Tracer, followsParentSampling: Bool, resultsTopic: String, deadLetterTopic: String, consumerGroup: String) {
        self.consumerGroup = consumerGroup
        self.tracer = tracer
        self.followsParentSampling = followsParentSampling
        self.resultsTopic = resultsTopic
        self.deadLetterTopic = deadLetterTopic
    }

    /// How many spans are open (begun, waiting for their end).
    var openCount: Int { sends.count + applies.count + publishes.count }

    // MARK: consume

    /// `message` was read by the engine just now.
    func consumed(_ message: KafkaMessage) {
        let trace = TraceHeaders(of: message.headers)
        guard let context = context(of: trace) else { return }
        let now = EpochInstant(nanoseconds: DefaultTracerClock.now.nanosecondsSinceEpoch)
        // A producer's clock ahead of this one would start the span after its end.
        let start = message.timestamp.map { min(now, EpochInstant(nanoseconds: UInt64(max(0, $0)) * 1_000_000)) } ?? now
        let span = tracer.startSpan("process \(message.topic)", context: context, ofKind: .consumer, at: start)
        guard span.isRecording else { return }
        span.updateAttributes { attributes in
            attributes["messaging.system"] = "kafka"
            attributes["messaging.operation.type"] = "process"
            attributes["messaging.operation.name"] = "process"
            attributes["messaging.consumer.group.name"] = consumerGroup
            attributes["messaging.destination.name"] = message.topic
            attributes["messaging.destination.partition.id"] = "\(message.partition)"
            attributes["messaging.kafka.offset"] = message.offset
        }
        span.end(at: now)
    }

    // MARK: apply

    /// A badge change (changelog append `token`) of the event with trace context `trace` is being stored. An append the
    /// engine writes again (a retry) keeps the span it began with.
    mutating func applying(_ token: UInt64, seq: Int64, badge: Int64, trace: TraceHeaders?) {
        guard applies[token] == nil, let trace, let context = context(of: trace) else { return }
        let span = tracer.startSpan("apply", context: context, ofKind: .internal, at: DefaultTracerClock.now)
        guard span.isRecording else { return }
        span.updateAttributes { attributes in
            attributes["apns_relay.seq"] = seq
            attributes["apns_relay.badge"] = badge
        }
        applies[token] = OpenSpan(span: span, openedAt: .now)
    }

    /// Changelog append `token` was stored.
    mutating func applied(_ token: UInt64) {
        applies.removeValue(forKey: token)?.span.end(at: DefaultTracerClock.now)
    }

    // MARK: send and answer

    /// `dispatch` is handed to the sender.
    mutating func sending(_ dispatch: DeviceDispatch<PendingNotification>) {
        let notification = dispatch.notification.payload
        guard let context = context(of: notification.trace) else { return }
        let span = tracer.startSpan(Self.sendSpanName, context: context, ofKind: .client, at: DefaultTracerClock.now)
        guard span.isRecording else { return }
        span.updateAttributes { attributes in
            attributes["http.request.method"] = "POST"
            attributes["url.template"] = Self.sendURLTemplate
            attributes["apns.id"] = notification.apnsID
            attributes["apns.topic"] = notification.notification.topic
            attributes["apns.push_type"] = notification.notification.pushType.rawValue
            attributes["apns.environment"] = notification.environment.rawValue
            attributes["apns.device_token"] = APNsDeviceToken.shortened(hex: notification.token)
            attributes["apns_relay.attempt"] = dispatch.attempt
        }
        sends[dispatch.ticket] = OpenSpan(span: span, openedAt: .now)
    }

    /// `dispatch`'s answer came: its `send` span ends. Returns the `answer` span, begun now, for the caller to end
    /// once the engine took the answer.
    mutating func answered(_ dispatch: DeviceDispatch<PendingNotification>, outcome: APNsOutcome) -> (any Span)? {
        guard let open = sends.removeValue(forKey: dispatch.ticket) else { return nil }
        let now = DefaultTracerClock.now
        open.span.updateAttributes { attributes in
            attributes["apns_relay.attempts"] = outcome.attempts
            if let status = outcome.httpStatus { attributes["http.response.status_code"] = status }
            if let reason = outcome.resultReason { attributes["apns.reason"] = reason }
        }
        if outcome.classification != .delivered { open.span.setStatus(SpanStatus(code: .error, message: outcome.resultReason)) }
        open.span.end(at: now)

        let answer = tracer.startSpan("answer", context: open.span.context, ofKind: .internal, at: now)
        answer.attributes["apns_relay.status"] = outcome.isAbandoned ? "abandoned" : outcome.deliveryStatus.rawValue
        return answer
    }

    // MARK: publish

    /// A result of `device` (with its `status`), or a dead letter (`device` and `status` nil), of `record` is handed to
    /// its producer.
    mutating func publishing(_ record: RecordReference, device: String?, trace: TraceHeaders, status: String?) {
        let key = PublishKey(record: record, device: device)
        guard publishes[key] == nil, let context = context(of: trace) else { return }
        let destination = status == nil ? deadLetterTopic : resultsTopic
        let span = tracer.startSpan("send \(destination)", context: context, ofKind: .producer, at: DefaultTracerClock.now)
        guard span.isRecording else { return }
        span.updateAttributes { attributes in
            attributes["messaging.system"] = "kafka"
            attributes["messaging.operation.type"] = "send"
            attributes["messaging.operation.name"] = "send"
            attributes["messaging.destination.name"] = destination
            if let status { attributes["apns_relay.status"] = status }
        }
        publishes[key] = OpenSpan(span: span, openedAt: .now)
    }

    /// That record was acknowledged by Kafka.
    mutating func published(_ record: RecordReference, device: String?) {
        publishes.removeValue(forKey: PublishKey(record: record, device: device))?.span.end(at: DefaultTracerClock.now)
    }

    // MARK: ending

    /// Ends the spans open since before `now - staleAfter`, marked unfinished.
    mutating func endStale(at now: ContinuousClock.Instant) {
        let cutoff = now - Self.staleAfter
        Self.endUnfinished(in: &sends) { $0.openedAt < cutoff }
        Self.endUnfinished(in: &applies) { $0.openedAt < cutoff }
        Self.endUnfinished(in: &publishes) { $0.openedAt < cutoff }
    }

    /// Ends every open span, marked unfinished (the relay stops; what they wait for will not be seen by this process).
    mutating func endAll() {
        Self.endUnfinished(in: &sends) { _ in true }
        Self.endUnfinished(in: &applies) { _ in true }
        Self.endUnfinished(in: &publishes) { _ in true }
    }

    private static func endUnfinished<Key>(in spans: inout [Key: OpenSpan], where isDone: (OpenSpan) -> Bool) {
        guard !spans.isEmpty else { return }
        let now = DefaultTracerClock.now
        spans = spans.filter { _, open in
            guard isDone(open) else { return true }
            open.span.setStatus(SpanStatus(code: .error, message: "unfinished in this process"))
            open.span.end(at: now)
            return false
        }
    }

    /// The producer's context from `trace`'s `traceparent` (and `tracestate`), `nil` when it has none.
    private func context(of trace: TraceHeaders) -> ServiceContext? {
        // A malformed `traceparent` gives no parent, and a span without one would begin a trace of its own.
        guard let sampled = trace.parentIsSampled, sampled || !followsParentSampling else { return nil }
        var context = ServiceContext.topLevel
        tracer.extract(trace.headers, into: &context, using: TraceHeaderExtractor())
        return context
    }
}

/// Reads the trace headers of a Kafka record for the tracer's propagator (names compared without case).
private struct TraceHeaderExtractor: Extractor {
    func extract(key: String, from carrier: [KafkaHeader]) -> String? {
        carrier.first { $0.key.lowercased() == key.lowercased() }?.value.map { String(decoding: $0, as: UTF8.self) }
    }
}

/// An instant as nanoseconds since the epoch (a Kafka record's timestamp is in milliseconds).
private struct EpochInstant: TracerInstant {
    var nanosecondsSinceEpoch: UInt64

    init(nanoseconds: UInt64) {
        nanosecondsSinceEpoch = nanoseconds
    }

    static func < (lhs: Self, rhs: Self) -> Bool { lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch }
}
