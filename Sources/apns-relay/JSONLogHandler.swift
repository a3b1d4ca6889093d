import APNsCore
import Foundation
import Logging
import Synchronization

/// `log.format: json`: one JSON object per line on standard error, with `ts`, `level`, `logger`,
/// `msg` and the metadata as string fields.
struct JSONLogHandler: LogHandler {
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info
    var metadataProvider: Logger.MetadataProvider?
    let label: String
    private let write: @Sendable (String) -> Void

    init(label: String, metadataProvider: Logger.MetadataProvider? = nil,
         write: @escaping @Sendable (String) -> Void = JSONLogHandler.standardError) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.write = write
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var fields: [String: String] = [:]
        for (key, value) in metadata { fields[key] = "\(value)" }
        for (key, value) in metadataProvider?.get() ?? [:] { fields[key] = "\(value)" }
        for (key, value) in event.metadata ?? [:] { fields[key] = "\(value)" }
        fields["ts"] = Self.timestamp()
        fields["level"] = event.level.rawValue
        fields["logger"] = label
        fields["msg"] = "\(event.message)"
        write(Self.line(fields))
    }

    static func line(_ fields: [String: String]) -> String {
        let body = fields.keys.sorted().map { "\(quote($0)):\(quote(fields[$0] ?? ""))" }.joined(separator: ",")
        return "{\(body)}"
    }

    static func quote(_ text: String) -> String { JSONString.quoted(text) }

    static func timestamp() -> String {
        Date().formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted))
    }

    static let standardError: @Sendable (String) -> Void = { line in
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}

extension RelayConfiguration.LogSettings {
    /// Installs the configured format and level for every logger of the process, with the trace id of the event a
    /// line is about (``Logging/Logger/MetadataProvider/eventTrace``).
    func bootstrap() {
        let level = self.level
        switch format {
        case .json:
            LoggingSystem.bootstrap({ label, provider in
                var handler = JSONLogHandler(label: label, metadataProvider: provider)
                handler.logLevel = level
                return handler
            }, metadataProvider: .eventTrace)
        case .text:
            LoggingSystem.bootstrap({ label, provider in
                var handler = StreamLogHandler.standardError(label: label, metadataProvider: provider)
                handler.logLevel = level
                return handler
            }, metadataProvider: .eventTrace)
        }
    }
}
