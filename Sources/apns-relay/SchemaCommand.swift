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

    func run() async throws {
        var configured: [String: RecordSchema] = [:]
        if config != nil {
            let topics = try await ConfigurationLoader.load(file: config, requireService: false).kafka.topics
            configured = [
                topics.events: .events, topics.devices: .devices, topics.results: .results, topics.failedTokens: .failedTokens,
                topics.wrongEnvironment: .wrongEnvironment, topics.deadLetter: .deadLetter, topics.badgeState: .badgeState,
            ]
        }
        guard let topic else {
            for schema in RecordSchema.allCases {
                let name = configured.first { $0.value == schema && $0.key != schema.topic }.map { " (configured: \($0.key))" } ?? ""
                print("\(schema.topic)\(name)")
            }
            return
        }
        guard let schema = configured[topic] ?? RecordSchema(naming: topic) else {
            let names = RecordSchema.allCases.map(\.topic).joined(separator: ", ")
            throw ValidationError("no schema for topic \"\(topic)\": name one of \(names) (or its kafka.topics key)")
        }
        print(schema.text, terminator: "")
    }
}
