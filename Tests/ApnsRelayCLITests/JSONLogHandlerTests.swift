import Foundation
import Kafka
import Logging
import Synchronization
import Testing

@testable import Relay
@testable import apns_relay

final class LineCollector: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

@Suite("JSON logs")
struct JSONLogHandlerTests {
    @Test("a line logged about an event with a valid traceparent names its trace id; others do not")
    func traceID() throws {
        let collector = LineCollector()
        let logger = Logger(label: "relay") { label in
            JSONLogHandler(label: label, metadataProvider: .eventTrace, write: collector.append)
        }
        let trace = TraceHeaders(of: [KafkaHeader(key: "traceparent", value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")])
        withEventTrace(trace) { logger.warning("event is a dead letter") }
        withEventTrace(TraceHeaders(of: [KafkaHeader(key: "traceparent", value: "garbage")])) { logger.warning("malformed") }
        logger.warning("outside")
        let objects = try collector.all.map { try #require(JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: String]) }
        #expect(objects.count == 3)
        #expect(objects.first?["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(objects.dropFirst().allSatisfy { $0["trace_id"] == nil })
    }

    @Test("one parseable JSON object per line with level, logger, message and metadata")
    func oneObjectPerLine() throws {
        let collector = LineCollector()
        var logger = Logger(label: "relay") { label in JSONLogHandler(label: label, write: collector.append) }
        logger[metadataKey: "instance"] = "a"
        logger.info("delivered \"quoted\"\nnext line", metadata: ["token": "a1b2c3d4…", "count": "3"])
        logger.debug("not at info level")
        let lines = collector.all
        #expect(lines.count == 1)
        let object = try #require(JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: String])
        #expect(object["level"] == "info")
        #expect(object["logger"] == "relay")
        #expect(object["msg"] == "delivered \"quoted\"\nnext line")
        #expect(object["token"] == "a1b2c3d4…")
        #expect(object["instance"] == "a")
        #expect(object["ts"]?.isEmpty == false)
        #expect(!lines[0].contains("\n"))
    }
}
