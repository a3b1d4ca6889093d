// The engine's publishing: results, dead letters, failures and their retries (RetrySchedule).

import APNsCore
import KafkaCore

extension RelayEngine {
    /// Publishing `effect` failed (after librdkafka's own retries). A dead letter too large to
    /// publish becomes a reference to its input; a changelog append is retried with the user's
    /// current state (never an older one over a newer); anything else is published again after a
    /// jittered backoff. When a destination keeps failing past the failure bound the relay gives
    /// up (exit 1). Nothing is published again for a partition that is leaving or gone.
    package mutating func publishFailed(_ effect: RelayEffect, failure: PublishFailure, now: RelayTime) -> [RelayEffect] {
        guard !isFailed else { return [] }
        if case .fatal(let error) = failure {
            // librdkafka fails everything a fatally failed producer is given: retrying only floods.
            // Crash-only: a restart makes new producers, and the next owner redoes what is unfinished.
            return fail("a Kafka producer failed for good: \(error)")
        }
        let destination: PublishDestination
        switch effect {
        case .publishDeadLetter(let message, let error, let reference) where failure == .tooLarge:
            guard stillPublishing(reference) else { return [] }
            return [.publishDeadLetterReference(DeadLetterReference(source: reference, key: message.key.map(Array.init), size: message.value?.count ?? 0,
                                                                    error: error, trace: TraceHeaders(of: message.headers)))]
        case .publishResult, .publishDeadLetter, .publishDeadLetterReference:
            guard stillPublishing(effect.recordReference!) else { return [] }
            destination = .records
        case .forwardEvent(let message, _, _, let reference):
            return forwardFailed(message, reference, failure: failure, now: now)
        case .writeLayout(_, let partition, let generation):
            guard read(partition, { $0.generation == generation && $0.layoutWait == .recording }) == true else { return [] }
            destination = .changelog
        case .appendChangelog(_, _, _, let token):
            guard let waiting = awaitingChangelog[token], standing(of: waiting.event.record) == .serving else {
                awaitingChangelog[token] = nil
                return []
            }
            destination = .changelog
        case .publishFailedToken:
            destination = .failedTokens
        case .publishWrongEnvironment:
            destination = .wrongEnvironment
        case .writeProgress(_, let partition, _, let handOver):
            // Not stored: the partition's next marker is written whatever it says (until then a new owner would
            // redo more). A hand-over's no longer holds the hand-over, which goes on to the commit, incomplete.
            if let events = partitions.keys.first(where: { $0.partition == partition }) {
                modify(events) { $0.progressWritten = nil }
            }
            if let handOver, let index = handOvers.firstIndex(where: { $0.id == handOver }) {
                handOvers[index].markerSettled(stored: false)
                return advanceHandOvers(now: now)
            }
            destination = .progress
        default:
            return []
        }
        counters.publishFailures += 1
        let (streak, pastBound) = retries.failed(.publishing(destination), now: now.monotonic)
        if pastBound {
            return fail("publishing \(destination) failed for \((now.monotonic - streak.since) / 1_000) s: \(failure)")
        }
        // A periodic marker is never written again as it was (a newer one may be stored by then): the next one
        // takes its place. It counts toward the failure bound like any write.
        if case .writeProgress = effect { return [] }
        retries.schedule(effect, afterFailures: streak.failures, now: now.monotonic)
        return []
    }

    /// Whether a result or dead letter of `record` may still be published (the assignment that
    /// consumed it is the partition's current one, and not leaving); when not, it no longer counts as publishing.
    mutating func stillPublishing(_ record: RecordReference) -> Bool {
        switch standing(of: record) {
        case .serving:
            return true
        case .handingOver:
            modify(record) { $0.publishing = max(0, $0.publishing - 1) }
            return false
        case .notCurrent:
            return false
        }
    }

    /// The retries due at `now`, checked again against what changed meanwhile.
    mutating func dueRetries(now: RelayTime) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        for effect in retries.takeDue(now: now.monotonic) {
            switch effect {
            case .restore(let partition, let generation):
                guard let state = partitions[partition], state.generation == generation, state.badges.phase == .restoring else { continue }
                effects.append(effect)
            case .appendChangelog(let user, _, let partition, let token):
                // The user's state now, which includes this event and any applied since: storing
                // it can only move the changelog forward. The event is sent with that count.
                guard var waiting = awaitingChangelog[token],
                      let state = partitions[waiting.event.record.partition], state.generation == waiting.event.record.generation, !state.revoking,
                      let current = state.badges.sequencer.ledger[user] else {
                    awaitingChangelog[token] = nil
                    continue
                }
                waiting.badge = current.badge
                awaitingChangelog[token] = waiting
                effects += emitAppend(.appendChangelog(user: user, record: changelogRecord(of: user, state: current, in: waiting.event.record.partition, now: now),
                                                       partition: partition, token: token), now: now)
            case .writeLayout(_, let partition, let generation):
                if read(partition, { $0.generation == generation && $0.layoutWait == .recording }) == true { effects.append(effect) }
            case .publishResult, .publishDeadLetter, .publishDeadLetterReference:
                // Leaving partitions dropped theirs at the revoke; gone ones have nothing to finish.
                if let record = effect.recordReference, standing(of: record) != .notCurrent { effects.append(effect) }
            default:
                effects.append(effect)
            }
        }
        return effects
    }

    /// Bad input: a dead letter and an `invalid` result. The reason is bounded (an error that
    /// echoes a huge value would make both records too large to publish).
    mutating func deadLetter(_ message: KafkaMessage, _ reference: RecordReference, reason: String, now: RelayTime) -> [RelayEffect] {
        let reason = reason.bounded(toUTF8Bytes: 1_024)
        counters.eventsInvalid += 1
        counters.deadLetters += 1
        expect(reference, results: 2)
        let id = message.key.map { String(decoding: $0, as: UTF8.self).bounded(toUTF8Bytes: 1_024) } ?? "offset-\(message.offset)"
        modify(reference) { $0.publishing += 1 }
        return [
            .publishDeadLetter(message, error: reason, for: reference),
            publish(.forEvent(id: id, user: nil, seq: nil, badge: nil, status: .invalid, reason: reason, at: now.epoch,
                              trace: TraceHeaders(of: message.headers)), for: reference),
        ]
    }

    func result(for notification: PendingNotification, status: DeliveryStatus, outcome: APNsOutcome?, now: RelayTime) -> ResultRecord {
        let ownReason = status == .superseded ? "replaced by a newer badge update" : (notification.late ? "late" : nil)
        return ResultRecord(
            eventID: notification.eventID, user: notification.user, token: notification.token, seq: notification.seq,
            badge: notification.badge, status: status, apnsID: outcome == nil ? nil : notification.apnsID,
            httpStatus: outcome?.httpStatus, reason: outcome?.resultReason ?? ownReason,
            attempts: outcome?.attempts ?? 0, latencyMs: outcome == nil ? nil : max(0, now.epoch &- notification.consumedAt), at: now.epoch,
            late: notification.late, environment: outcome?.environment, apnsUniqueID: outcome?.uniqueID, trace: notification.trace)
    }

    /// Who should hear that `notification`'s token was delivered in the other environment: its registration's owner
    /// (the registration named the wrong environment), else the event's producer.
    func wrongEnvironmentRecord(for notification: PendingNotification, outcome: APNsOutcome, now: RelayTime) -> WrongEnvironmentRecord {
        let registration = registry.registration(for: notification.token)
        return WrongEnvironmentRecord(
            token: notification.token, user: registration?.user ?? notification.user, topic: registration?.topic ?? notification.notification.topic,
            environment: outcome.environment ?? notification.environment, wrongEnvironment: notification.environment,
            source: registration?.environment == notification.environment ? .registration : .event, eventID: notification.eventID, at: now.epoch,
            trace: notification.trace)
    }

    /// A result to publish for `record`, counted until ``published(_:)`` reports it.
    mutating func publish(_ result: ResultRecord, for record: RecordReference) -> RelayEffect {
        modify(record) { $0.publishing += 1 }
        return .publishResult(result, for: record)
    }

    /// The record is finished with no result of this owner's (its previous owner published them all).
    mutating func finishWithoutResults(_ record: RecordReference) {
        let finished = modify(record) { state -> Bool in
            state.offsets.markDone(record.offset)
            state.devicesDone[record.offset] = nil
            state.pending -= 1
            return true
        }
        if finished == true {
            pendingTotal -= 1
            bulkFinished(record)
        }
    }

    /// The record will have `results` more results; its placeholder is released.
    mutating func expect(_ record: RecordReference, results: Int) {
        modify(record) { state in
            state.offsets.expectMore(record.offset, results: results)
            state.offsets.resultPublished(record.offset)
        }
    }
}
