import Foundation
import Kafka
import Logging
import Relay
import Synchronization
import Testing
import TestSupport

/// Every record the relays of a process test wrote, checked against its topic's published schema (``RecordSchema``) by
/// python-jsonschema: results, failed tokens, wrong-environment records, dead-letter references, badge state (users'
/// states, progress markers, layouts) and the events forwarded to their users' home partitions. Read uncommitted, so
/// the records of transactions that were aborted are checked too. The fixtures call it as they stop. Returns how many
/// records of each schema it checked.
@discardableResult
func expectWrittenRecordsMatchSchemas(_ kafka: KafkaConfiguration, sourceLocation: SourceLocation = #_sourceLocation) async -> [RecordSchema: Int] {
    var logger = Logger(label: "schema-audit")
    logger.logLevel = .error
    var configuration = kafka
    configuration.properties["isolation.level"] = "read_uncommitted"
    // Every topic but push.devices, which only producers write; the fixtures use the default names.
    let written = RecordSchema.allCases.filter { $0 != .devices }.map { (topic: $0.topic, schema: $0) }
    do {
        let admin = try KafkaAdmin(configuration: configuration, logger: logger)
        let reader = try KafkaPartitionReader(configuration: configuration, logger: logger)
        let records = Mutex<[SchemaValidation.Record]>([])
        for (topic, schema) in written {
            guard let count = try await admin.partitionCount(of: topic), count > 0 else { continue }
            _ = try await reader.readToEnd((0..<count).map { TopicPartition(topic, Int32($0)) }, timeout: .seconds(20)) { message in
                guard let value = message.value else { return }  // a tombstone
                switch schema {
                // A dead letter is its input as it came; only a reference is the relay's own record.
                case .deadLetter where !message.headers.contains(where: { $0.key == DeadLetterHeaders.kind && $0.value == Array("reference".utf8) }):
                    return
                // Events are the producers'; the relay writes the forwards.
                case .events where !message.headers.contains(where: { $0.key == ForwardSource.header }):
                    return
                default:
                    let label = "\(topic) \(message.partition)@\(message.offset): \(String(decoding: value.prefix(200), as: UTF8.self))"
                    records.withLock { $0.append(SchemaValidation.Record(schema, label: label, value: Array(value))) }
                }
            }
        }
        let checked = records.withLock { $0 }
        let refused = try SchemaValidation.refused(checked)
        #expect(refused.isEmpty, "\(refused.count) of \(checked.count) records the relay wrote do not match their topic's schema, e.g. \(refused.prefix(5).map { "\($0.label) (\($0.error ?? ""))" })",
                sourceLocation: sourceLocation)
        return checked.reduce(into: [:]) { counts, record in counts[record.schema, default: 0] += 1 }
    } catch {
        Issue.record("could not check the written records against their schemas: \(error)", sourceLocation: sourceLocation)
        return [:]
    }
}
