import Foundation
import Kafka
import Logging
import Testing

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
}
