package import Logging
import Synchronization

/// Keeps every log line (message and metadata) so a test can look at what was said.
package final class CapturedLog: Sendable {
    private let lines = Mutex<[String]>([])

    package init() {}

    package var all: [String] { lines.withLock { $0 } }

    package func append(_ line: String) { lines.withLock { $0.append(line) } }

    /// A logger at trace level that writes here.
    package func logger(label: String) -> Logger {
        var logger = Logger(label: label) { label in CapturingLogHandler(label: label, capture: self) }
        logger.logLevel = .trace
        return logger
    }
}

package struct CapturingLogHandler: LogHandler {
    let label: String
    let capture: CapturedLog
    package var metadata: Logger.Metadata = [:]
    package var logLevel: Logger.Level = .trace

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
        capture.append("\(event.level) \(label): \(event.message) \(merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))")
    }
}
