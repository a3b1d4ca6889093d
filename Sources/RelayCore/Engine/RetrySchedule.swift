// Failed effects waiting for their retry, and the failure bound.

import APNsCore
package import KafkaCore

/// What failed and is tried again: effects waiting out a jittered, doubling delay (the ``Backoff`` of APNs' retries
/// too), and per source (a destination, the device registry, a partition's restore) the streak of failures since its
/// last success, which the failure bound (`relay.failure_timeout_s`) is measured against. Pure, with its randomness
/// seeded.
package struct RetrySchedule: Sendable {
    /// What keeps failing.
    package enum Source: Hashable, Sendable {
        case publishing(PublishDestination)
        case deviceRegistry
        case restore(TopicPartition)
    }

    /// A source's failures since its last success.
    package struct Streak: Sendable, Equatable {
        /// When the first of them came (monotonic milliseconds).
        package var since: Int64
        package var failures: Int
    }

    private struct Retry: Sendable {
        var due: Int64
        var effect: RelayEffect
    }

    private let backoff: Backoff
    private let bound: Int64
    private var jitter: SplitMix64
    private var retries: [Retry] = []
    private var streaks: [Source: Streak] = [:]

    /// Delays from `base` doubling to `cap` milliseconds, each jittered to between half and all of
    /// it; a source failing for `bound` milliseconds is past the bound.
    package init(base: Int64, cap: Int64, bound: Int64, seed: UInt64) {
        self.backoff = Backoff(base: .milliseconds(base), cap: .milliseconds(cap))
        self.bound = bound
        self.jitter = SplitMix64(seed: seed)
    }

    /// `source` failed at `now`: its streak, and whether it has failed for the whole bound.
    package mutating func failed(_ source: Source, now: Int64) -> (streak: Streak, pastBound: Bool) {
        var streak = streaks[source] ?? Streak(since: now, failures: 0)
        streak.failures += 1
        streaks[source] = streak
        return (streak, now - streak.since >= bound)
    }

    /// `source` worked: its streak ends.
    package mutating func succeeded(_ source: Source) {
        if !streaks.isEmpty { streaks[source] = nil }
    }

    /// Queues `effect` for a retry after a jittered, doubling delay (the `failures`-th of a streak; ``Backoff``).
    package mutating func schedule(_ effect: RelayEffect, afterFailures failures: Int, now: Int64) {
        let delay = backoff.delay(failures: failures, jitter: Double.random(in: 0..<1, using: &jitter))
        retries.append(Retry(due: now + delay.inMilliseconds, effect: effect))
    }

    /// Takes the effects due at `now`, in the order they were scheduled.
    package mutating func takeDue(now: Int64) -> [RelayEffect] {
        guard !retries.isEmpty else { return [] }
        var due: [RelayEffect] = []
        retries.removeAll { retry in
            guard retry.due <= now else { return false }
            due.append(retry.effect)
            return true
        }
        return due
    }

    /// Drops the waiting effects `drop` selects (their partition left).
    package mutating func removeAll(where drop: (RelayEffect) -> Bool) {
        retries.removeAll { drop($0.effect) }
    }

    /// Effects waiting.
    package var waiting: Int { retries.count }
}
