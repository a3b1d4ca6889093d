import ArgumentParser
import Foundation
import Kafka
import Logging
import Relay
import Synchronization

/// `apns-relay dlq`: the dead-letter topic.
struct DeadLetterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dlq",
        abstract: "Work with the dead-letter topic (kafka.topics.dead_letter).",
        subcommands: [Replay.self]
    )

    /// `apns-relay dlq replay`: re-produces selected dead letters to the events topic.
    struct Replay: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "replay",
            abstract: "Re-produce dead letters to the events topic once what made them dead letters is fixed (a dry run unless --execute).",
            discussion: """
                Reads the dead-letter topic up to its end, takes the dead letters every given condition selects, and \
                prints what it would send, one line each. With --execute it sends them: each input's key and value, \
                unchanged, to the partition of the events topic it came from (x-source-partition). A reference dead \
                letter (x-dead-letter: reference, an input too large to dead-letter) replays its source record from \
                the events topic when that is still retained, else says why not. Running the same replay again is \
                harmless for events with a user and a seq (the relay answers duplicate) and re-sends an event without \
                one with the same apns-id and collapse id; an event changing a badge without a seq is left out unless \
                --allow-unsequenced-badges. Exit 0 when every selected dead letter was sent or reported, 1 when a \
                read or a send failed, 2 for a bad option or configuration.
                """
        )

        @Option(name: .long, help: "YAML configuration file; APNS_RELAY_* environment variables override it.")
        var config: String?

        @Option(name: .long, help: "A partition of the dead-letter topic to read (repeatable; default: all).")
        var partition: [Int32] = []

        @Option(name: .long, help: "The first dead-letter offset to take (in each partition read).")
        var fromOffset: Int64?

        @Option(name: .long, help: "The last dead-letter offset to take (inclusive).")
        var toOffset: Int64?

        @Option(name: .long, help: "Take only dead letters whose x-error contains this text (case-sensitive).")
        var errorContains: String?

        @Flag(name: .long, help: "Send them (without it: a dry run that prints what it would send).")
        var execute = false

        @Flag(name: .long, help: "Also replay events that change a badge without a seq (a second replay applies them again).")
        var allowUnsequencedBadges = false

        func validate() throws {
            if partition.contains(where: { $0 < 0 }) { throw ValidationError("--partition must be >= 0") }
            if let fromOffset, fromOffset < 0 { throw ValidationError("--from-offset must be >= 0") }
            if let fromOffset, let toOffset, toOffset < fromOffset { throw ValidationError("--to-offset must not be below --from-offset") }
        }

        func run() async throws {
            let configuration = try await ConfigurationLoader.load(file: config, requireService: false)
            configuration.log.bootstrap()
            guard let brokers = configuration.kafka.brokers, !configuration.kafka.isEmbedded else {
                throw ConfigurationError(key: "kafka.brokers", problem: "dlq replay reads and writes a real cluster; set kafka.brokers to it")
            }
            let logger = Logger(label: "apns-relay.dlq")
            let kafka = KafkaConfiguration(bootstrapServers: brokers, properties: configuration.kafka.properties)
            let replayer = try DeadLetterReplayer(
                kafka: kafka, deadLetterTopic: configuration.kafka.topics.deadLetter, eventsTopic: configuration.kafka.topics.events,
                allowUnsequencedBadges: allowUnsequencedBadges, logger: logger)
            let selection = DeadLetterSelection(partitions: Set(partition), fromOffset: fromOffset, toOffset: toOffset, errorContains: errorContains)
            let summary = try await replayer.replay(selection, execute: execute) { print($0) }
            print(summary.description(execute: execute, eventsTopic: configuration.kafka.topics.events))
            if summary.failed > 0 { throw ExitCode.failure }
        }
    }
}

/// Reads the dead-letter topic, decides each selected dead letter's fate (``DeadLetterReplay``) and, when asked,
/// produces the replays; reports one line per dead letter.
struct DeadLetterReplayer {
    /// What a replay did.
    struct Summary {
        var selected = 0
        var replayed = 0
        var skipped = 0
        var failed = 0

        func description(execute: Bool, eventsTopic: String) -> String {
            let verb = execute ? "replayed" : "would replay"
            var text = "\(execute ? "" : "dry run: ")\(verb) \(replayed) of \(selected) selected dead letter(s) to \(eventsTopic)"
            if skipped > 0 { text += "; \(skipped) not replayable (see above)" }
            if failed > 0 { text += "; \(failed) failed" }
            if !execute && replayed > 0 { text += "; --execute sends them" }
            return text
        }
    }

    let kafka: KafkaConfiguration
    let deadLetterTopic: String
    let eventsTopic: String
    let allowUnsequencedBadges: Bool
    let logger: Logger
    private let admin: KafkaAdmin
    private let reader: KafkaPartitionReader

    init(kafka: KafkaConfiguration, deadLetterTopic: String, eventsTopic: String, allowUnsequencedBadges: Bool, logger: Logger) throws {
        self.kafka = kafka
        self.deadLetterTopic = deadLetterTopic
        self.eventsTopic = eventsTopic
        self.allowUnsequencedBadges = allowUnsequencedBadges
        self.logger = logger
        self.admin = try KafkaAdmin(configuration: kafka, logger: logger)
        self.reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
    }

    /// Replays the dead letters `selection` takes (produces them only when `execute`), reporting each on `report`.
    func replay(_ selection: DeadLetterSelection, execute: Bool, report: (String) -> Void) async throws -> Summary {
        guard let partitionCount = try await admin.partitionCount(of: deadLetterTopic) else {
            throw ConfigurationError(key: "kafka.topics.dead_letter", problem: "the topic \(deadLetterTopic) does not exist")
        }
        let partitions = (0..<Int32(partitionCount)).filter { selection.partitions.isEmpty || selection.partitions.contains($0) }
            .map { TopicPartition(deadLetterTopic, $0) }
        let read = Mutex<[KafkaMessage]>([])
        _ = try await reader.readToEnd(
            partitions, from: Dictionary(uniqueKeysWithValues: partitions.compactMap { partition in selection.fromOffset.map { (partition, $0) } }),
            through: Dictionary(uniqueKeysWithValues: partitions.compactMap { partition in selection.toOffset.map { (partition, $0) } })
        ) { message in
            if selection.selects(message) { read.withLock { $0.append(message) } }
        }
        let deadLetters = read.withLock { $0 }.sorted { ($0.partition, $0.offset) < ($1.partition, $1.offset) }
        let producer = execute ? try KafkaProducer(configuration: kafka, logger: logger) : nil
        var summary = Summary(selected: deadLetters.count)
        for deadLetter in deadLetters {
            let place = "\(deadLetterTopic)[\(deadLetter.partition)]@\(deadLetter.offset)"
            var step = DeadLetterReplay.step(for: deadLetter, eventsTopic: eventsTopic, allowUnsequencedBadges: allowUnsequencedBadges)
            var origin = place
            if case .readSource(let source) = step {
                origin += " (reference to \(source))"
                step = try await sourceStep(source)
            }
            switch step {
            case .replay(let record):
                let key = record.key.map { String(decoding: $0, as: UTF8.self) } ?? "(none)"
                let target = "\(record.topic)[\(record.partition ?? -1)]"
                let error = DeadLetterReplay.error(of: deadLetter)
                guard let producer else {
                    report("would replay \(origin) to \(target), key \(key), \(record.value?.count ?? 0) bytes: \(error)")
                    summary.replayed += 1
                    continue
                }
                do {
                    let delivered = try await producer.send(record)
                    report("replayed \(origin) to \(target)@\(delivered.offset), key \(key): \(error)")
                    summary.replayed += 1
                } catch {
                    report("failed \(origin) to \(target): \(error)")
                    summary.failed += 1
                }
            case .skip(let reason):
                report("not replayed \(origin): \(reason)")
                summary.skipped += 1
            case .readSource:
                preconditionFailure("a source is read once")
            }
        }
        if let producer {
            try await producer.flush()
            await producer.close()
        }
        return summary
    }

    /// The step for a reference dead letter's source: its partition's watermarks, then its record if retained.
    private func sourceStep(_ source: RecordReference) async throws -> DeadLetterReplay.Step {
        guard try await admin.partitionCount(of: source.partition.topic) != nil else {
            return .skip("\(source.partition.topic) does not exist")
        }
        let watermarks = try await admin.watermarks(of: source.partition)
        var record: KafkaMessage?
        if source.offset >= watermarks.low && source.offset < watermarks.high {
            let found = Mutex<KafkaMessage?>(nil)
            _ = try await reader.readToEnd([source.partition], from: [source.partition: source.offset], through: [source.partition: source.offset]) { message in
                found.withLock { $0 = message }
            }
            record = found.withLock { $0 }
        }
        return DeadLetterReplay.step(forSource: source, low: watermarks.low, high: watermarks.high, record: record,
                                     allowUnsequencedBadges: allowUnsequencedBadges)
    }
}
