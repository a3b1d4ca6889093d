public import Kafka
import RelayCore

/// Which dead letters `apns-relay dlq replay` takes: every condition given must hold.
public struct DeadLetterSelection: Sendable, Equatable {
    /// The dead-letter topic's partitions to read; empty: all of them.
    public var partitions: Set<Int32>
    /// The first dead-letter offset taken (in each partition read).
    public var fromOffset: Int64?
    /// The last dead-letter offset taken (inclusive).
    public var toOffset: Int64?
    /// Text the dead letter's `x-error` must contain (case-sensitive).
    public var errorContains: String?

    /// Creates a selection; no condition takes every dead letter.
    public init(partitions: Set<Int32> = [], fromOffset: Int64? = nil, toOffset: Int64? = nil, errorContains: String? = nil) {
        self.partitions = partitions
        self.fromOffset = fromOffset
        self.toOffset = toOffset
        self.errorContains = errorContains
    }

    /// Whether `message` (a record of the dead-letter topic) is selected.
    public func selects(_ message: KafkaMessage) -> Bool {
        if !partitions.isEmpty && !partitions.contains(message.partition) { return false }
        if let fromOffset, message.offset < fromOffset { return false }
        if let toOffset, message.offset > toOffset { return false }
        if let errorContains, !DeadLetterReplay.error(of: message).contains(errorContains) { return false }
        return true
    }
}

/// What replaying one dead letter takes, decided from the dead letter alone (pure: the command does the reading and
/// producing). A dead letter goes back to the partition of the events topic it came from (`x-source-partition`),
/// with its key and value unchanged: the same partition keeps a user's events in order whatever partitioner their
/// producer used, and the same bytes keep the event id, so the relay knows a redelivery of what it applied before.
public enum DeadLetterReplay {
    /// The next step for one dead letter.
    public enum Step: Sendable, Equatable {
        /// Produce this record (the input, to its source partition).
        case replay(KafkaRecord)
        /// A reference dead letter (`x-dead-letter: reference`): the input is the record at this place, if it is
        /// still retained; it goes back to the same partition.
        case readSource(RecordReference)
        /// Not replayed, and why (for a person).
        case skip(String)
    }

    /// The step for `message` (a record of the dead-letter topic) whose source must be `eventsTopic`. An event
    /// that changes a badge without a `seq` is skipped unless `allowUnsequencedBadges`: its replay applies it once
    /// more, and nothing tells a second replay of it from a new event.
    public static func step(for message: KafkaMessage, eventsTopic: String, allowUnsequencedBadges: Bool) -> Step {
        guard let sourceTopic = header(DeadLetterHeaders.sourceTopic, of: message), let partition = header(DeadLetterHeaders.sourcePartition, of: message).flatMap(Int32.init),
              let offset = header(DeadLetterHeaders.sourceOffset, of: message).flatMap(Int64.init)
        else {
            return .skip("no x-source-topic, x-source-partition and x-source-offset headers: not a dead letter of the relay")
        }
        guard sourceTopic == eventsTopic else {
            return .skip("its source is \(sourceTopic), not the events topic \(eventsTopic)")
        }
        if header(DeadLetterHeaders.kind, of: message) == "reference" {
            return .readSource(RecordReference(TopicPartition(sourceTopic, partition), offset))
        }
        return replay(key: message.key.map(Array.init), value: message.value.map(Array.init),
                      headers: DeadLetterHeaders.producerHeaders(of: message.headers), to: TopicPartition(sourceTopic, partition),
                      allowUnsequencedBadges: allowUnsequencedBadges)
    }

    /// The step for a reference dead letter's source once its partition's watermarks (`low`: the first retained
    /// offset, `high`: the next offset to be written) and the record at its offset (`nil` when none was read) are
    /// known.
    public static func step(forSource source: RecordReference, low: Int64, high: Int64, record: KafkaMessage?,
                            allowUnsequencedBadges: Bool) -> Step {
        if source.offset < low {
            return .skip("\(source) is no longer retained (\(source.partition) now starts at offset \(low))")
        }
        if source.offset >= high {
            return .skip("\(source) is past the end of \(source.partition) (offset \(high)): the topic was recreated or truncated")
        }
        guard let record, record.offset == source.offset else {
            return .skip("\(source) holds no record (compacted away, or a transaction marker)")
        }
        return replay(key: record.key.map(Array.init), value: record.value.map(Array.init),
                      headers: DeadLetterHeaders.producerHeaders(of: record.headers), to: source.partition,
                      allowUnsequencedBadges: allowUnsequencedBadges)
    }

    /// Whether an event changes its user's badge without a `seq` (replaying it twice would apply it twice). Bytes that
    /// are no event are not: the relay only dead-letters them again.
    public static func isUnsequencedBadgeChange(_ value: [UInt8]) -> Bool {
        guard let event = try? JSON.parse(value), case .object = event else { return false }
        func present(_ key: String) -> Bool { event[key].map { $0 != .null } ?? false }
        return present("badge") && present("user") && !present("seq")
    }

    /// The dead letter's `x-error`, or "" without one.
    public static func error(of message: KafkaMessage) -> String { header(DeadLetterHeaders.error, of: message) ?? "" }

    private static func replay(key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader], to partition: TopicPartition,
                               allowUnsequencedBadges: Bool) -> Step {
        if !allowUnsequencedBadges, let value, isUnsequencedBadgeChange(value) {
            return .skip("a badge change without seq: a second replay would apply it again (--allow-unsequenced-badges replays it)")
        }
        return .replay(KafkaRecord(topic: partition.topic, partition: partition.partition, key: key, value: value, headers: headers))
    }

    private static func header(_ name: String, of message: KafkaMessage) -> String? {
        message.header(name)?.value.map { String(decoding: $0, as: UTF8.self) }
    }
}
