import Foundation
import Logging
import Synchronization
import Testing

@testable import apns_relay

final class LineCollector: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

@Suite("JSON logs")
struct JSONLogHandlerTests {
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
