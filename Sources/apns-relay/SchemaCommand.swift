import ArgumentParser
import Relay

/// `apns-relay schema TOPIC`: prints the JSON Schema (2020-12) of a topic's record values (``RecordSchema``), to
/// register in a schema registry, to check producers' events against, or to generate a reader from.
struct SchemaCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schema",
        abstract: "Print the JSON Schema (2020-12) of a topic's record values.",
        discussion: """
            TOPIC is a topic's default name (push.events, push.devices, push.results, push.failed-tokens, \
            push.wrong-environment, push.dlq, push.badge-state), its configuration key (events, devices, results, \
            failed_tokens, wrong_environment, dead_letter, badge_state) or, with --config, the name the configuration \
            gives it. Without TOPIC, lists the topics.
            """
    )

    @Argument(help: "The topic whose schema to print.")
    var topic: String?

    @Option(name: .long, help: "YAML configuration file whose kafka.topics.* names are also understood; APNS_RELAY_* environment variables override it.")
    var config: String?

    // The work is in synchronous helpers: Swift 6.2's optimizer crashed splitting this async function when it held
    // the loops and closures itself (the image's release build).
    func run() async throws {
        let topics = config == nil ? nil : try await ConfigurationLoader.load(file: config, requireService: false).kafka.topics
        let configured = topics.map(Self.schemas(named:)) ?? [:]
        print(try Self.output(for: topic, configured: configured), terminator: "")
    }

    /// The configured topic names and their schemas.
    private static func schemas(named topics: RelayConfiguration.Topics) -> [String: RecordSchema] {
        [
            topics.events: .events, topics.devices: .devices, topics.results: .results, topics.failedTokens: .failedTokens,
            topics.wrongEnvironment: .wrongEnvironment, topics.deadLetter: .deadLetter, topics.badgeState: .badgeState,
        ]
    }

    /// What the command prints: the schema of `topic`, or (no topic) the list of topics.
    private static func output(for topic: String?, configured: [String: RecordSchema]) throws -> String {
        guard let topic else {
            var lines = ""
            for schema in RecordSchema.allCases {
                let renamed = configured.first { $0.value == schema && $0.key != schema.topic }?.key
                lines += schema.topic + (renamed.map { " (configured: \($0))" } ?? "") + "\n"
            }
            return lines
        }
        guard let schema = configured[topic] ?? RecordSchema(naming: topic) else {
            let names = RecordSchema.allCases.map(\.topic).joined(separator: ", ")
            throw ValidationError("no schema for topic \"\(topic)\": name one of \(names) (or its kafka.topics key)")
        }
        return schema.text
    }
}
