import APNs
import ArgumentParser
import Foundation
import Logging

/// `apns-relay channels`: manages the broadcast channels (iOS 18 Live Activities) of an app on Apple's channel
/// management host, with the run configuration's credential.
struct ChannelsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "channels",
        abstract: "Create, read, list and delete an app's broadcast channels (Live Activities) on APNs' channel management host.",
        discussion: """
            Uses the run configuration (--config, APNS_RELAY_*): apns.auth.* for the credential, apns.ca_file, and \
            apns.production_management_endpoint / apns.sandbox_management_endpoint in place of Apple's hosts \
            (api-manage-broadcast.push.apple.com:2196, api-manage-broadcast.sandbox.push.apple.com:2195). \
            An error from APNs is printed with Apple's reason (e.g. ChannelNotRegistered) and exits 1.
            """,
        subcommands: [Create.self, Read.self, List.self, Delete.self]
    )

    /// The options every channels subcommand takes.
    struct Target: ParsableArguments {
        @Option(name: .long, help: "YAML configuration file; APNS_RELAY_* environment variables override it.")
        var config: String?

        @Option(name: .long, help: "The app's bundle id (default: apns.topic).")
        var topic: String?

        @Option(name: .long, help: "production or sandbox (default: apns.environment).")
        var environment: String?

        func validate() throws {
            if let environment, APNsEnvironment(rawValue: environment) == nil {
                throw ValidationError("--environment must be production or sandbox, not '\(environment)'")
            }
        }

        /// Loads the configuration and runs `operation` on a manager for the app; closes the manager after.
        func withManager<Value: Sendable>(
            _ operation: (APNsChannelManager, String) async throws(APNsChannelManagementError) -> Value
        ) async throws -> Value {
            let configuration = try await ConfigurationLoader.load(file: config, requireService: false)
            configuration.log.bootstrap()
            let logger = Logger(label: "apns-relay.channels")
            guard let bundleID = topic ?? configuration.apns.defaultTopic else {
                throw ValidationError("--topic is required when apns.topic is not configured (or apns.apps lists more than one app)")
            }
            let environment = environment.flatMap(APNsEnvironment.init(rawValue:)) ?? configuration.apns.environment
            let factory = try APNsHTTP2ConnectionFactory(
                configuration: APNsHTTP2ConnectionConfiguration(
                    endpoint: configuration.apns.managementEndpoint(for: environment),
                    credential: try configuration.apns.credential(for: bundleID, in: environment, logger: logger), caFile: configuration.apns.caFile,
                    proxy: configuration.apns.proxy),
                logger: logger.with(environment: environment))
            let manager = APNsChannelManager(factory: factory)
            let result: Value
            do {
                result = try await operation(manager, bundleID)
            } catch {
                await manager.close()
                throw ChannelsCommandError(error: error)
            }
            await manager.close()
            return result
        }
    }

    /// `--channel-id`, checked before anything is sent.
    struct ChannelArgument: ParsableArguments {
        @Option(name: .long, help: "The channel id, as `channels create` printed it.")
        var channelID: String

        func validate() throws { _ = try parsed() }

        func parsed() throws -> APNsChannelID {
            do {
                return try APNsChannelID(channelID)
            } catch {
                throw ValidationError("--channel-id: \(error)")
            }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a Live Activity channel; prints its id.")

        @OptionGroup var target: Target

        @Option(name: .long, help: "What APNs keeps for devices it cannot reach: none or most-recent.")
        var storagePolicy: StoragePolicy = .none

        func run() async throws {
            let policy = storagePolicy.apns
            let id = try await target.withManager { manager, bundleID throws(APNsChannelManagementError) in
                try await manager.create(bundleID: bundleID, storagePolicy: policy)
            }
            print(id.value)
        }
    }

    struct Read: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a channel's configuration (JSON).")

        @OptionGroup var target: Target
        @OptionGroup var channel: ChannelArgument

        func run() async throws {
            let id = try channel.parsed()
            let read = try await target.withManager { manager, bundleID throws(APNsChannelManagementError) in
                try await manager.read(bundleID: bundleID, channelID: id)
            }
            let object = ["channel_id": read.id.value, "storage_policy": StoragePolicy(read.storagePolicy).rawValue, "push_type": read.pushType]
            // Serialised, not interpolated: the push type is APNs' text.
            let json = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
            print(String(decoding: json, as: UTF8.self))
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the app's channel ids, one a line.")

        @OptionGroup var target: Target

        func run() async throws {
            let ids = try await target.withManager { manager, bundleID throws(APNsChannelManagementError) in
                try await manager.list(bundleID: bundleID)
            }
            for id in ids { print(id.value) }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a channel; broadcasts to it are then rejected (ChannelNotRegistered).")

        @OptionGroup var target: Target
        @OptionGroup var channel: ChannelArgument

        func run() async throws {
            let id = try channel.parsed()
            try await target.withManager { manager, bundleID throws(APNsChannelManagementError) in
                try await manager.delete(bundleID: bundleID, channelID: id)
            }
            print("deleted \(id.value)")
        }
    }

    /// `--storage-policy`: Apple's `message-storage-policy` 0 and 1 by name.
    enum StoragePolicy: String, ExpressibleByArgument, CaseIterable {
        case none
        case mostRecent = "most-recent"

        init(_ policy: APNsMessageStoragePolicy) {
            self = policy == .mostRecent ? .mostRecent : .none
        }

        var apns: APNsMessageStoragePolicy { self == .mostRecent ? .mostRecent : .noStorage }
    }
}

/// An APNs answer to a channels command, as the operator reads it (exit 1).
struct ChannelsCommandError: Error, CustomStringConvertible {
    let error: APNsChannelManagementError

    var description: String { "apns-relay channels: \(error)" }
}

extension RelayConfiguration.APNsSettings {
    /// The credential that sends for the app `bundleID` in `environment`, as the relay picks it: the app of
    /// `apns.apps` with that topic whose key is valid there, else the single `apns.auth.*` form.
    func credential(for bundleID: String, in environment: APNsEnvironment, logger: Logger) throws(ConfigurationError) -> APNsCredential {
        let groups = try credentialGroups(logger: logger)
        guard !groups.isEmpty else { throw ConfigurationError(key: "apns.auth", problem: "required: the channels commands use the relay's credential") }
        guard let group = groups.first(where: { $0.topics.contains(bundleID) && $0.environments.contains(environment) })
            ?? groups.first(where: \.carriesEveryTopic) else {
            throw ConfigurationError(key: "apns.apps", problem: "no app has the topic '\(bundleID)'")
        }
        return group.credential
    }
}
