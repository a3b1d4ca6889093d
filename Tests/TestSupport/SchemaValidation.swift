import Foundation
public import RelayCore

/// One record value judged by a topic's JSON Schema.
public struct SchemaVerdict: Sendable, Equatable, Decodable {
    /// What the caller named the record (its topic, partition and offset, or a test case's name).
    public var label: String
    /// Whether the value is JSON that the schema accepts.
    public var valid: Bool
    /// The validator's first complaint (where, what), `nil` when valid.
    public var error: String?
}

/// Record values checked against the relay's published schemas (``RecordSchema``) by python-jsonschema, a validator
/// that is not the relay's own code (`scripts/validate-records.py`, installed by `scripts/install-jsonschema.sh`).
public enum SchemaValidation {
    /// A value to check and the schema it must meet.
    public struct Record: Sendable {
        public var schema: RecordSchema
        public var label: String
        public var value: [UInt8]

        public init(_ schema: RecordSchema, label: String, value: [UInt8]) {
            self.schema = schema
            self.label = label
            self.value = value
        }
    }

    /// A verdict per record, in order. Throws when the validator cannot run or a schema is not a valid 2020-12 schema.
    public static func verdicts(_ records: [Record]) throws -> [SchemaVerdict] {
        guard !records.isEmpty else { return [] }
        let python = try findPython()
        var schemas: [String: Any] = [:]
        for schema in Set(records.map(\.schema)) {
            schemas[schema.topic] = try JSONSerialization.jsonObject(with: Data(schema.text.utf8))
        }
        let request: [String: Any] = [
            "schemas": schemas,
            "records": records.map { ["schema": $0.schema.topic, "label": $0.label, "value": Data($0.value).base64EncodedString()] },
        ]
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("schema-check-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let requestFile = directory.appendingPathComponent("request.json")
        try JSONSerialization.data(withJSONObject: request).write(to: requestFile)
        let outputFile = directory.appendingPathComponent("verdicts.json")
        _ = FileManager.default.createFile(atPath: outputFile.path, contents: nil)
        let errorFile = directory.appendingPathComponent("stderr.txt")
        _ = FileManager.default.createFile(atPath: errorFile.path, contents: nil)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [repository.appendingPathComponent("scripts/validate-records.py").path, requestFile.path]
        process.standardOutput = try FileHandle(forWritingTo: outputFile)
        process.standardError = try FileHandle(forWritingTo: errorFile)
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let message = (try? String(contentsOf: errorFile, encoding: .utf8)) ?? ""
            throw ValidatorFailure(message: "scripts/validate-records.py exited \(process.terminationStatus): \(message)")
        }
        return try JSONDecoder().decode([SchemaVerdict].self, from: Data(contentsOf: outputFile))
    }

    /// The verdicts of the records the schema refuses.
    public static func refused(_ records: [Record]) throws -> [SchemaVerdict] {
        try verdicts(records).filter { !$0.valid }
    }

    /// The validator could not run, or refused a schema.
    public struct ValidatorFailure: Error, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    private static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// `JSONSCHEMA_PYTHON`, else the repository's `.tools/jsonschema/bin/python` (`scripts/test.sh` installs it).
    private static func findPython() throws -> String {
        var candidates: [String] = []
        if let configured = ProcessInfo.processInfo.environment["JSONSCHEMA_PYTHON"] { candidates.append(configured) }
        candidates.append(repository.appendingPathComponent(".tools/jsonschema/bin/python").path)
        guard let python = LocalServerProcess.firstExecutable(candidates) else {
            throw ValidatorFailure(message: "no python with jsonschema at \(candidates.joined(separator: " or ")): run scripts/install-jsonschema.sh")
        }
        return python
    }
}
