package import KafkaCore

/// What the engine asks its driver to do. The driver reports completions back as inputs; a
/// failed publish comes back as ``RelayEngine/publishFailed(_:failure:now:)`` with the effect.
package enum RelayEffect: Sendable {
    /// Publish a result; then call `published(_:)` with the record. Boxed: the result is copied into the batch's
    /// records and the producer's report, and a copy of its fields retained each of its strings; the box is one
    /// reference, and it keeps every other effect at a fraction of the result's size.
    indirect case publishResult(ResultRecord, for: RecordReference)
    /// Publish a dead letter: the input bytes with `x-error`; then call `published(_:)` with `record` (the input's
    /// reference). Boxed, as the next three: they are rare, and unboxed they would be the widest cases, which set the
    /// size of every effect (136 bytes against 72).
    indirect case publishDeadLetter(KafkaMessage, error: String, for: RecordReference)
    /// Publish a dead letter that stands for an input too large to publish again (its
    /// topic, partition, offset and size instead of its bytes); then call `published(_:)`.
    indirect case publishDeadLetterReference(DeadLetterReference)
    /// Forward an event read away from its user's home partition: the input's value and headers, keyed by `user`, to
    /// partition `home` of the events topic with a ``ForwardSource`` header naming `for` (its partition and offset);
    /// then call `published(_:)` with `for`. Through the forwards' own producer, in the order asked: a failed forward
    /// is never produced again by this process (``RelayEngine/publishFailed(_:failure:now:)`` ends it).
    indirect case forwardEvent(KafkaMessage, user: String, home: Int32, for: RecordReference)
    /// Record the layout in the changelog partition of number `partition` (key ``PartitionLayout/recordKey``); then
    /// call `layoutStored(_:generation:now:)` with the events partition and `generation`.
    indirect case writeLayout(PartitionLayout, partition: TopicPartition, generation: UInt64)
    /// Read partition 0 of the changelog to its end (as `.restore` does), then call
    /// `layoutProbed(_:generation:partitionZero:now:)` with `partition` and `generation` (or `restoreFailed`).
    indirect case readLayoutOfPartitionZero(for: TopicPartition, generation: UInt64)
    /// Publish a failed-token record (not tied to an offset; with transactions, in the transaction of `source`, the
    /// events partition whose send found the token dead, `nil` for the feedback service's); then call
    /// `publishSucceeded(.failedTokens)`.
    indirect case publishFailedToken(FailedTokenRecord, source: TopicPartition?)
    /// Publish a wrong-environment record (not tied to an offset; with transactions, in the transaction of
    /// `source`, the events partition whose send found it); then call `publishSucceeded(.wrongEnvironment)`.
    indirect case publishWrongEnvironment(WrongEnvironmentRecord, source: TopicPartition)
    /// Append to the badge changelog (key user, same partition number as the event); then call
    /// `changelogged(_:)` with the token given here, in append order per changelog partition.
    case appendChangelog(user: String, record: BadgeStateRecord, partition: Int32, token: UInt64)
    /// Store the progress marker of events partition `partition` in the changelog partition of the
    /// same number (key ``ProgressMarker/key``, value ``ProgressMarker/encoded(at:)`` with `at`);
    /// then call `progressStored(handOver:now:)` with `handOver` (the hand-over that wrote it, or `nil`).
    case writeProgress(ProgressMarker, partition: Int32, at: Int64, handOver: UInt64?)
    /// Send to APNs; then call `sent(_:outcome:now:)`.
    case send(DeviceDispatch<PendingNotification>)
    /// Write nothing more for these partitions (they are being handed over): their sends still queued in the
    /// sender leave the queue unsent, and no retry of theirs is written; those on the wire are answered. Each
    /// send stopped so comes back abandoned (`sent(_:outcome:now:)`), its record left to the next owner.
    case stopWrites([TopicPartition])
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
    /// Commit these offsets (next offset to read) without waiting for the answer; then call
    /// `committed(request:offsets:now:)` with `request` (and the offsets when it succeeded).
    case commit([TopicPartition: Int64], request: UInt64)
    /// Let the consumer give the partitions of revoke `id` to their next owner (the hand-over is done).
    case acknowledgeRevoke(UInt64)
    /// The sender may write notifications until `until` (monotonic milliseconds, the ownership
    /// lease's expiry); past it, it refuses them (an abandoned `APNsOutcome`).
    case permitSends(until: Int64)
    /// The graceful stop's hand-over is over: close the clients and exit, 0 when `handedOver`
    /// (every step done), 1 when Kafka could not take it in time (the next owner redoes more).
    case stopped(handedOver: Bool)
    /// Stop or restart fetching (backpressure).
    case pause([TopicPartition])
    case resume([TopicPartition])
    /// The relay cannot go on: report unhealthy and exit with `code` (crash-only recovery: the
    /// orchestrator restarts it and the next owner resumes from the changelog and the commits).
    indirect case exit(code: Int32, reason: String)
}

extension RelayEffect {
    /// Where a publishing effect's record goes; `nil` for effects that publish nothing.
    package var publishDestination: PublishDestination? {
        switch self {
        case .publishResult, .publishDeadLetter, .publishDeadLetterReference: .records
        case .publishFailedToken: .failedTokens
        case .publishWrongEnvironment: .wrongEnvironment
        case .appendChangelog, .writeLayout: .changelog
        case .writeProgress: .progress
        case .forwardEvent: .forwards
        default: nil
        }
    }

    /// The trace context of the event whose record this effect publishes; none for the relay's own records.
    package var trace: TraceHeaders {
        switch self {
        case .publishResult(let record, _): record.trace
        case .publishDeadLetter(let message, _, _), .forwardEvent(let message, _, _, _): TraceHeaders(of: message.headers)
        case .publishDeadLetterReference(let reference): reference.trace
        case .publishFailedToken(let record, _): record.trace
        case .publishWrongEnvironment(let record, _): record.trace
        default: .none
        }
    }

    /// The record a result or dead letter finishes.
    package var recordReference: RecordReference? {
        switch self {
        case .publishResult(_, let reference), .publishDeadLetter(_, _, let reference): reference
        case .publishDeadLetterReference(let reference): reference.source
        case .forwardEvent(_, _, _, let reference): reference
        default: nil
        }
    }
}

/// Why a publish failed, as far as the engine cares.
package enum PublishFailure: Sendable, Equatable {
    /// The record is larger than the producer or broker accepts: publishing it again cannot help.
    case tooLarge
    /// The producer failed for good (librdkafka's fatal error, e.g. an idempotent producer's lost
    /// sequence after a broker lost acknowledged writes): everything it is given fails from now on.
    case fatal(String)
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
    case wrongEnvironment
    /// Events forwarded to their users' home partitions.
    case forwards

    package var description: String {
        switch self {
        case .records: "results and dead letters"
        case .failedTokens: "failed tokens"
        case .wrongEnvironment: "wrong-environment records"
        case .changelog: "the badge changelog"
        case .progress: "progress markers"
        case .forwards: "events forwarded to their users' home partitions"
        }
    }
}
