import ArgumentParser

/// The `apns-relay` executable.
@main
struct APNsRelayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-relay",
        abstract: "Relays push events from Kafka to Apple Push Notification service, keeping per-user badge counts in order.",
        subcommands: [DemoCommand.self]
    )
}
