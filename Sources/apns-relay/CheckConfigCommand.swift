import ArgumentParser

/// `apns-relay check-config`: validates the configuration and prints the effective values.
struct CheckConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Validate the configuration and print the effective values (secrets redacted). Exit 2 on any error."
    )

    @Option(name: .long, help: "YAML configuration file; APNS_RELAY_* environment variables override it.")
    var config: String?

    func run() async throws {
        let configuration = try await ConfigurationLoader.load(file: config, requireService: true)
        for (key, value) in configuration.effectiveValues {
            print("\(key): \(value)")
        }
        print("configuration OK")
    }
}
