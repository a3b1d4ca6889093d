import APNsCore
import KafkaCore

@testable import RelayCore

// The tests' spelling of the engine's hot inputs: each returns its effects, where the engine appends them to the
// driver's array (one form per input in the engine; these are the tests' convenience over it).
extension RelayEngine {
    /// A record of the events topic.
    mutating func consumed(_ message: KafkaMessage, now: RelayTime) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        consumed(message, now: now, into: &effects)
        return effects
    }

    /// The changelog append with this token was acknowledged.
    mutating func changelogged(_ token: UInt64, now: RelayTime) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        changelogged(token, now: now, into: &effects)
        return effects
    }

    /// APNs answered a dispatched notification.
    mutating func sent(_ dispatch: DeviceDispatch<PendingNotification>, outcome: APNsOutcome, now: RelayTime) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        sent(dispatch, outcome: outcome, now: now, into: &effects)
        return effects
    }

    /// The changelog partition was read to its end: `records` are its (key, value) pairs in offset order.
    mutating func restored(_ partition: TopicPartition, generation: UInt64? = nil, records: [(key: [UInt8], value: [UInt8]?)],
                           now: RelayTime) -> [RelayEffect] {
        var changelog = RestoredChangelog()
        for record in records { changelog.add(key: record.key[...], value: record.value?[...]) }
        return restored(partition, generation: generation, changelog: changelog, now: now)
    }
}
