package import KafkaCore

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
