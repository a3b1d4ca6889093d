import Foundation
import Kafka
import Logging
import Testing
import TestSupport

/// W3C trace context through `apns-relay run`: an event's `traceparent` and `tracestate` headers come out on every
/// record it causes, and its dead-letter log line names its trace id.
@Suite("apns-relay run: trace context from event to every record it causes", .serialized)
struct TraceContextProcessTests {
    static let production = String(repeating: "ab", count: 32)
    static let wronglyRegistered = String(repeating: "cd", count: 32)
    static let dead = String(repeating: "ef", count: 32)

    static let traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
    static let parent = "00-\(traceID)-00f067aa0ba902b7-01"
    static let state = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    static let deadLetterTraceID = "0af7651916cd43dd8448eb211c80319c"
    static let unsampledTraceID = "5bf92f3577b34da6a3ce929d0e0e4799"
    /// The APNs request span's name: OpenTelemetry's HTTP client span, `{method} {url.template}`.
    static let send = "POST /3/device/{device_token}"

    static func value(_ header: String, of message: KafkaMessage) -> String? {
        message.header(header)?.value.map { String(decoding: $0, as: UTF8.self) }
    }

    @Test("traceparent/tracestate on results, failed tokens, wrong-environment records and dead letters; malformed ones never make a dead letter")
    func traceHeadersOnEveryRecord() async throws {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let hosts = try await TwoHostsFixture.start(tokens: [Self.production: .production, Self.wronglyRegistered: .sandbox])
        hosts.production.markBad(Self.dead)
        hosts.sandbox.markBad(Self.dead)
        let published = try await hosts.run(
            devices: [(Self.production, "production"), (Self.wronglyRegistered, "production"), (Self.dead, "production")],
            events: [
                ("u-1", #"{"id":"e1","user":"u-1","seq":1,"badge":{"increment":1},"apns":{"payload":{"aps":{"alert":"hi"}}}}"#),
                ("bad", #"{"id":"e2","apns":"#),
                ("e3", #"{"id":"e3","tokens":["\#(Self.production)"],"apns":{"payload":{"aps":{"alert":"malformed trace"}}}}"#),
                ("e4", #"{"id":"e4","tokens":["\#(Self.production)"],"apns":{"payload":{"aps":{"alert":"no trace"}}}}"#),
            ],
            results: 6,
            headers: [
                "u-1": [KafkaHeader(key: "traceparent", value: Self.parent), KafkaHeader(key: "tracestate", value: Self.state),
                        KafkaHeader(key: "x-tenant", value: "acme")],
                "bad": [KafkaHeader(key: "traceparent", value: "00-\(Self.deadLetterTraceID)-b7ad6b7169203331-01"),
                        KafkaHeader(key: "x-tenant", value: "acme")],
                "e3": [KafkaHeader(key: "traceparent", value: "not-a-trace"), KafkaHeader(key: "tracestate", value: "=,=")],
            ],
            relayEnvironment: ["APNS_RELAY_LOG_FORMAT": "json"], logger: logger)
        let results = published.records["push.results"] ?? []
        #expect(results.count == 6, "\(published.results)\n\(published.log.suffix(3_000))")
        func eventID(_ message: KafkaMessage) -> String { String(decoding: message.key ?? [], as: UTF8.self) }

        // Every result of e1 (delivered, delivered in the other environment, refused as dead) carries both headers,
        // and only those: the producer's other headers are its own business.
        let first = results.filter { eventID($0) == "e1" }
        #expect(first.count == 3)
        for result in first {
            #expect(Self.value("traceparent", of: result) == Self.parent && Self.value("tracestate", of: result) == Self.state,
                    "\(result.headers)")
            #expect(result.headers.count == 2, "\(result.headers)")
        }
        let failedTokens = published.records["push.failed-tokens"] ?? []
        #expect(failedTokens.count == 1)
        for record in failedTokens {
            #expect(Self.value("traceparent", of: record) == Self.parent && Self.value("tracestate", of: record) == Self.state)
        }
        let notices = published.records["push.wrong-environment"] ?? []
        #expect(notices.count == 1)
        for record in notices {
            #expect(Self.value("traceparent", of: record) == Self.parent && Self.value("tracestate", of: record) == Self.state)
        }

        // The dead letter keeps its producer's headers beside the relay's; its invalid result carries the trace.
        let deadLetters = published.records["push.dlq"] ?? []
        #expect(deadLetters.count == 1)
        for deadLetter in deadLetters {
            #expect(Self.value("traceparent", of: deadLetter) == "00-\(Self.deadLetterTraceID)-b7ad6b7169203331-01", "\(deadLetter.headers)")
            #expect(Self.value("x-tenant", of: deadLetter) == "acme" && Self.value("x-source-topic", of: deadLetter) == "push.events")
        }
        let invalid = results.filter { eventID($0) == "bad" }
        #expect(invalid.count == 1 && invalid.allSatisfy { Self.value("traceparent", of: $0)?.contains(Self.deadLetterTraceID) == true })
        // Its log line names the trace id (JSON log, `trace_id`).
        let deadLetterLine = published.log.split(separator: "\n").first { $0.contains("dead letter") }
        #expect(deadLetterLine?.contains("\"trace_id\":\"\(Self.deadLetterTraceID)\"") == true, "\(deadLetterLine ?? "no line")")

        // Malformed trace headers: delivered, the headers passed on as they came; none, none.
        let malformed = results.filter { eventID($0) == "e3" }
        #expect(malformed.count == 1)
        for result in malformed {
            #expect(String(decoding: result.value ?? [], as: UTF8.self).contains("\"delivered\""))
            #expect(Self.value("traceparent", of: result) == "not-a-trace" && Self.value("tracestate", of: result) == "=,=")
        }
        let untraced = results.filter { eventID($0) == "e4" }
        #expect(untraced.count == 1 && untraced.allSatisfy { $0.headers.isEmpty })
        await hosts.stop()
    }

    @Test("tracing.otlp_endpoint: consume, apply, send, answer and publish spans of a traced event reach an OTLP collector, children of the producer's span; an untraced event records none")
    func spansToAnOTLPCollector() async throws {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let collector = try await OTLPReceiver.start()
        let hosts = try await TwoHostsFixture.start(tokens: [Self.production: .production])
        hosts.production.markBad(Self.dead)
        hosts.sandbox.markBad(Self.dead)
        let producerSpan = "00f067aa0ba902b7"
        let published = try await hosts.run(
            devices: [(Self.production, "production"), (Self.dead, "production")],
            events: [
                ("u-1", #"{"id":"e1","user":"u-1","seq":1,"badge":{"increment":1},"apns":{"payload":{"aps":{"alert":"hi"}}}}"#),
                ("bad", #"{"id":"e2","apns":"#),
                ("e4", #"{"id":"e4","tokens":["\#(Self.production)"],"apns":{"payload":{"aps":{"alert":"no trace"}}}}"#),
                ("e5", #"{"id":"e5","tokens":["\#(Self.production)"],"apns":{"payload":{"aps":{"alert":"not sampled"}}}}"#),
            ],
            results: 5,
            headers: [
                "u-1": [KafkaHeader(key: "traceparent", value: Self.parent), KafkaHeader(key: "tracestate", value: Self.state)],
                "bad": [KafkaHeader(key: "traceparent", value: "00-\(Self.deadLetterTraceID)-b7ad6b7169203331-01")],
                // The producer did not sample this trace: the relay records nothing of it.
                "e5": [KafkaHeader(key: "traceparent", value: "00-\(Self.unsampledTraceID)-b7ad6b7169203331-00")],
            ],
            relayEnvironment: ["APNS_RELAY_TRACING_OTLP_ENDPOINT": "http://127.0.0.1:\(collector.port)", "OTEL_BSP_SCHEDULE_DELAY": "100"],
            logger: logger)
        #expect(published.results.count == 5, "\(published.results)\n\(published.log.suffix(3_000))")
        #expect(published.log.contains("exporting spans of traced events"))

        // The stop exported what was still batched; give the collector's side a moment for the last request.
        let expected: Set = ["process push.events", "apply", Self.send, "answer", "send push.results"]
        _ = await waitUntil(timeout: .seconds(10)) { Set(collector.spans.filter { $0.traceID == Self.traceID }.map(\.name)).isSuperset(of: expected) }
        let spans = collector.spans
        #expect(collector.requests.allSatisfy { $0 == "POST /v1/traces application/x-protobuf" }, "\(collector.requests)")
        let traced = spans.filter { $0.traceID == Self.traceID }
        #expect(Set(traced.map(\.name)) == expected, "\(spans)")

        // Each step a child of the producer's span (the answer, of its send), of the kind OpenTelemetry gives it.
        for span in traced where span.name != "answer" {
            #expect(span.parentSpanID == producerSpan, "\(span)")
        }
        let kinds = Dictionary(traced.map { ($0.name, $0.kind) }, uniquingKeysWith: { first, _ in first })
        #expect(kinds == ["process push.events": 5, "apply": 1, Self.send: 3, "answer": 1, "send push.results": 4])
        let sends = traced.filter { $0.name == Self.send }
        let answers = traced.filter { $0.name == "answer" }
        #expect(sends.count == 2 && answers.count == 2, "one send and one answer per device: \(traced)")
        #expect(Set(answers.map(\.parentSpanID)) == Set(sends.map(\.spanID)))
        #expect(sends.allSatisfy { $0.attributes["apns.topic"] == "com.example.app" && $0.attributes["apns.environment"] == "production" })
        #expect(sends.filter { $0.statusCode == 2 }.count == 1, "the dead token's send is an error: \(sends)")
        #expect(Set(answers.compactMap { $0.attributes["apns_relay.status"] }) == ["delivered", "rejected"], "\(answers)")
        #expect(traced.first { $0.name == "apply" }?.attributes["apns_relay.badge"] == "1")
        let publishes = traced.filter { $0.name == "send push.results" }
        #expect(publishes.count == 2 && publishes.allSatisfy { $0.attributes["messaging.destination.name"] == "push.results" }, "\(publishes)")
        #expect(traced.allSatisfy { $0.end >= $0.start && $0.start > 0 })
        // The consume span begins at the record's Kafka timestamp, before the relay read it.
        if let consume = traced.first(where: { $0.name == "process push.events" }), let send = sends.first {
            #expect(consume.end <= send.start)
        }

        // The dead letter: read and published to push.dlq, in its own trace.
        let deadLetter = spans.filter { $0.traceID == Self.deadLetterTraceID }
        #expect(Set(deadLetter.map(\.name)) == ["process push.events", "send push.dlq"], "\(deadLetter)")
        #expect(deadLetter.first { $0.name == "send push.dlq" }?.attributes["messaging.destination.name"] == "push.dlq")
        // The untraced event began no trace of its own, and the unsampled one recorded nothing.
        #expect(spans.allSatisfy { [Self.traceID, Self.deadLetterTraceID].contains($0.traceID) }, "\(spans)")
        await hosts.stop()
        await collector.shutdown()
    }
}
