package import KafkaCore
import RelayCore

extension BadgeStateReading {
    /// Reads a changelog partition to its end: the last value per key, decoded as it is read (users' states, the
    /// previous owner's progress marker, the layout record). Only a complete read is used.
    package func readChangelog(_ partition: TopicPartition) async throws -> RestoredChangelog {
        let changelog = LockedBox(RestoredChangelog())
        _ = try await readToEnd([partition]) { message in
            guard let key = message.key else { return }
            _ = changelog.withLock { $0.add(key: key, value: message.value) }
        }
        return changelog.withLock { $0 }
    }
}

extension RelayDriver {
    /// ``BadgeStateReading/readChangelog(_:)`` as a result, for the driver's restore effects.
    static func readChangelog(_ partition: TopicPartition, with reader: any BadgeStateReading) async -> Result<RestoredChangelog, any Error> {
        do {
            return .success(try await reader.readChangelog(partition))
        } catch {
            return .failure(error)
        }
    }
}

/// The driver's readers: a partition's badge state read for its restore, partition 0's layout record, and
/// `push.devices` followed into the loop.
extension RelayDriver {
    /// Restores `partition` (assignment `generation`): its changelog partition read to its end (with transactions, once
    /// every transaction open on it has resolved: the previous owner's last one may still commit). The outcome comes
    /// back as an input.
    mutating func restore(_ partition: TopicPartition, generation: UInt64, in group: inout DiscardingTaskGroup) {
        let badgeState = TopicPartition(configuration.badgeStateTopic, partition.partition)
        group.addTask { [reader = clients.changelog, input] in
            switch await Self.readChangelog(badgeState, with: reader) {
            case .success(let changelog): input.yield(.restored(partition, generation: generation, changelog))
            case .failure(let error): input.yield(.restoreFailed(partition, generation: generation, "\(error)"))
            }
        }
    }

    /// Reads the layout record in the changelog's partition 0 for `partition`'s restore (assignment `generation`).
    mutating func readLayoutOfPartitionZero(for partition: TopicPartition, generation: UInt64, in group: inout DiscardingTaskGroup) {
        let partitionZero = TopicPartition(configuration.badgeStateTopic, 0)
        group.addTask { [reader = clients.changelog, input] in
            switch await Self.readChangelog(partitionZero, with: reader) {
            case .success(let changelog): input.yield(.layoutProbed(partition, generation: generation, changelog))
            case .failure(let error): input.yield(.restoreFailed(partition, generation: generation, "reading partition 0's layout: \(error)"))
            }
        }
    }
}

extension RelayDriver {
    /// Most `push.devices` records on their way to the loop at once.
    static let deviceRecordsInFlight = 4_096

    /// Follows `push.devices` into the loop; a failure is an input: the engine reads it again.
    static func followDevices(_ devices: any DeviceRegistryFeed, into input: RelayInbox) async {
        let window = DeviceRecordWindow(records: deviceRecordsInFlight)
        do {
            try await withTaskCancellationHandler {
                try await devices.follow {
                    input.yield(.devicesLoaded)
                } body: { message in
                    guard window.acquire() else { return }
                    input.yield(.device(key: message.key, value: message.value, window: window))
                }
            } onCancel: {
                window.close()
            }
        } catch {
            if !Task.isCancelled { input.yield(.devicesFailed("\(error)")) }
        }
        window.close()
    }
}
