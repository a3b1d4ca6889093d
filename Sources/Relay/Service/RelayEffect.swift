package import Kafka

/// What the engine asks its driver to do. The driver reports completions back as inputs; a
/// failed publish comes back as ``RelayEngine/publishFailed(_:failure:now:)`` with the effect.
package enum RelayEffect: Sendable {
    /// Publish a result; then call `published(_:)` with the record.
    case publishResult(ResultRecord, for: RecordReference)
    /// Publish a dead letter: the input bytes with `x-error`; then call `published(_:)`.
    case publishDeadLetter(KafkaMessage, error: String)
    /// Publish a dead letter that stands for an input too large to publish again (its
    /// topic, partition, offset and size instead of its bytes); then call `published(_:)`.
    case publishDeadLetterReference(DeadLetterReference)
    /// Publish a failed-token record (not tied to an offset); then call
    /// `publishSucceeded(.failedTokens)`.
    case publishFailedToken(FailedTokenRecord)
    /// Append to the badge changelog (key user, same partition number as the event); then call
    /// `changelogged(_:)` with the token given here, in append order per changelog partition.
    case appendChangelog(user: String, record: BadgeStateRecord, partition: Int32, token: UInt64)
    /// Store the progress marker of events partition `partition` in the changelog partition of the
    /// same number (key ``ProgressMarker/key``, value ``ProgressMarker/encoded(at:)`` with `at`).
    case writeProgress(ProgressMarker, partition: Int32, at: Int64)
    /// Send to APNs; then call `sent(_:outcome:now:)`.
    case send(DeviceDispatch<PendingNotification>)
    /// Abandon the sends in flight for these partitions: cancel them so that nothing more of
    /// theirs reaches APNs (their answers, if any, are ignored).
    case cancelSends([TopicPartition])
    /// Read this partition of the changelog to its end, then call `restored(_:generation:changelog:now:)`
    /// with the generation given here (or `restoreFailed` when the read fails).
    case restore(TopicPartition, generation: UInt64)
    /// Read `push.devices` from its beginning into `deviceRecord(key:value:)`, call
    /// `deviceRegistryLoaded(now:)` at the end present at the start, then follow it; call
    /// `deviceRegistryFailed(_:now:)` when reading fails.
    case loadDeviceRegistry
    /// Commit these offsets (next offset to read); then call `committed(_:)` or `commitFailed()`.
    case commit([TopicPartition: Int64])
    /// Store progress markers, wait until they are stored (at most until the hand-over's
    /// deadline), commit the offsets, then do what `then` says.
    case handOver(HandOver)
    /// Stop or restart fetching (backpressure).
    case pause([TopicPartition])
    case resume([TopicPartition])
    /// The relay cannot go on: report unhealthy and exit with `code` (crash-only recovery: the
    /// orchestrator restarts it and the next owner resumes from the changelog and the commits).
    case exit(code: Int32, reason: String)
}

extension RelayEffect {
    /// The events partition of the record a result or dead letter finishes.
    var recordPartition: TopicPartition? {
        switch self {
        case .publishResult(_, let reference): reference.partition
        case .publishDeadLetter(let message, _): message.topicPartition
        case .publishDeadLetterReference(let reference): reference.source.partition
        default: nil
        }
    }
}

/// Partitions leaving this relay (a revoke) or the relay stopping: what the next owner needs.
package struct HandOver: Sendable {
    /// What comes after the markers and the commit.
    package enum Next: Sendable, Equatable {
        /// Tell the consumer it may give these partitions up.
        case acknowledgeRevoke([TopicPartition])
        /// The graceful stop is done: close and exit 0.
        case stop
    }

    /// The progress markers to store first, per events partition.
    package var progress: [(marker: ProgressMarker, partition: Int32)]
    /// Wall-clock time for the markers' `updated_at`.
    package var at: Int64
    /// Offsets to commit after the markers are stored.
    package var offsets: [TopicPartition: Int64]
    /// The monotonic time by which the markers must be stored (the consumer gives the partitions
    /// up soon after): past it, commit anyway.
    package var deadline: Int64
    package var then: Next
}

/// Why a publish failed, as far as the engine cares.
package enum PublishFailure: Sendable, Equatable {
    /// The record is larger than the producer or broker accepts: publishing it again cannot help.
    case tooLarge
    /// Anything else (librdkafka already retried for `message.timeout.ms`); the text is logged.
    case other(String)
}

/// Where records go, for failure streaks (each destination's bound runs separately).
package enum PublishDestination: Int, Sendable, CaseIterable, CustomStringConvertible {
    /// Results and dead letters: what finishes an offset.
    case records
    case failedTokens
    case changelog
    case progress

    package var description: String {
        switch self {
        case .records: "results and dead letters"
        case .failedTokens: "failed tokens"
        case .changelog: "the badge changelog"
        case .progress: "progress markers"
        }
    }
}
