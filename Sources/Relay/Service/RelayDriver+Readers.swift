import Kafka

extension RelayDriver {
    /// Reads a changelog partition to its end: the last value per key, decoded as it is read (users' states, the
    /// previous owner's progress marker, the layout record). Only a complete read is used.
    static func readChangelog(_ partition: TopicPartition, with reader: any BadgeStateReading) async -> Result<RestoredChangelog, any Error> {
        let changelog = LockedBox(RestoredChangelog())
        do {
            _ = try await reader.readToEnd([partition]) { message in
                guard let key = message.key else { return }
                _ = changelog.withLock { $0.add(key: key, value: message.value) }
            }
            return .success(changelog.withLock { $0 })
        } catch {
            return .failure(error)
        }
    }
}
