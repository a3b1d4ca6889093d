import ArgumentParser
import Foundation
import Kafka
import Relay

/// A command that talks to Kafka: it runs only with the librdkafka the relay needs (``KafkaLibrary/minimumVersion``),
/// refused with exit 2 before it starts.
protocol KafkaCommand {}

extension RunCommand: KafkaCommand {}
extension DemoCommand: KafkaCommand {}
extension DeadLetterCommand.Replay: KafkaCommand {}
extension PartitionsCommand.Migrate: KafkaCommand {}

/// The `apns-relay` executable.
struct APNsRelayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-relay",
        abstract: "Relays push events from Kafka to Apple Push Notification service, keeping per-user badge counts in order.",
        subcommands: [RunCommand.self, DemoCommand.self, SimulatorCommand.self, CheckConfigCommand.self, FeedbackCommand.self, ChannelsCommand.self, DeadLetterCommand.self, PartitionsCommand.self, SchemaCommand.self],
        defaultSubcommand: RunCommand.self
    )

    /// Exit codes of the contract: 0 clean stop, 1 runtime failure, 2 bad configuration or usage.
    static func main() async {
        do {
            var command = try parseAsRoot()
            // `run` and `simulator` trap SIGTERM/SIGINT in their service groups; the others stop as by default.
            if !(command is RunCommand || command is SimulatorCommand) { StopSignals.restoreDefault() }
            if command is any KafkaCommand, let refusal = KafkaLibrary.refusal() {
                FileHandle.standardError.write(Data("apns-relay: \(refusal)\n".utf8))
                Foundation.exit(2)
            }
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let error as ConfigurationError {
            FileHandle.standardError.write(Data("apns-relay: \(error)\n".utf8))
            Foundation.exit(2)
        } catch let failure as RelayFailure where failure.exitCode != 1 {
            FileHandle.standardError.write(Data("\(fullMessage(for: failure))\n".utf8))
            Foundation.exit(failure.exitCode)
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                print(fullMessage(for: error))
                Foundation.exit(0)
            }
            FileHandle.standardError.write(Data("\(fullMessage(for: error))\n".utf8))
            // ArgumentParser reports usage errors as EX_USAGE (64); the contract says 2.
            Foundation.exit(code == .validationFailure ? 2 : 1)
        }
    }
}

// `make fuzz` builds this target as the configuration loader's fuzzer (`-DFUZZING`, see
// Configuration/ConfigurationFuzzing.swift); libFuzzer then provides `main`.
#if !FUZZING
@main
extension APNsRelayCommand {}
#endif
