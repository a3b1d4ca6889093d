// The engine's ownership lease (OwnershipLease) and its commits.

import APNsCore
package import KafkaCore

extension RelayEngine {
    /// Whether the relay may hand notifications of its partitions to the sender at `now`: its lease holds. (The
    /// sender checks the lease again on its own clock as it writes each request.)
    func maySend(now: RelayTime) -> Bool {
        leaseGate.isValid(at: now.monotonic)
    }

    /// Whether the relay may write its partitions' badge state and progress markers at `now`. Under Kafka
    /// transactions always: a relay that lost a partition has its producer fenced by the next owner, and nothing it
    /// wrote becomes visible. Without them, only while the lease holds.
    func mayWrite(now: RelayTime) -> Bool {
        configuration.writesFencedByKafka || maySend(now: now)
    }

    /// Whether the lease should be confirmed by the next commit even if no offset moved: past half of
    /// it, while anything is in flight. An idle relay commits nothing (and lets its lease lapse: the
    /// first record after the idle spell waits for one commit to confirm it).
    func leaseWantsRenewal(now: RelayTime) -> Bool {
        leaseGate.wantsRenewal(now: now.monotonic, busy: pendingTotal > 0 || notificationsInFlight > 0 || !handOvers.isEmpty)
    }

    /// Whether work waits for the lease: a commit is worth sending at once to confirm it.
    func needsLeaseConfirmation(now: RelayTime) -> Bool {
        (!maySend(now: now) && window.hasWaiting)
            || (!mayWrite(now: now) && (!leaseGate.heldAppends.isEmpty || handOvers.contains(where: \.waitsForLease)))
    }

    /// Time passes: past the failure bound with work waiting for the lease, the relay gives up
    /// (the group does not answer, or keeps refusing this member); a crash-only restart rejoins.
    mutating func checkLease(now: RelayTime) -> [RelayEffect] {
        let waited = leaseGate.waited(now: now.monotonic, waiting: needsLeaseConfirmation(now: now))
        guard waited >= configuration.failureTimeoutMilliseconds else { return [] }
        return fail("the consumer group has not confirmed this relay's partitions for \(waited / 1_000) s; sending and writing for them stopped")
    }

    /// The lease was confirmed: what waited for it goes out, and the sender may write until the new expiry.
    mutating func leaseConfirmed(now: RelayTime) -> [RelayEffect] {
        guard maySend(now: now) else { return [] }
        var effects = permitSends()
        for append in leaseGate.takeHeldAppends() {
            // A partition given up meanwhile dropped its waiting event; its change is not written.
            guard case .appendChangelog(_, _, _, let token) = append, awaitingChangelog[token] != nil else { continue }
            effects.append(append)
        }
        return effects + releaseReadySends(now: now)
    }

    /// Tells the driver until when its sender may write (the lease's expiry), when that moved.
    mutating func permitSends() -> [RelayEffect] {
        leaseGate.newPermit().map { [.permitSends(until: $0)] } ?? []
    }

    /// A changelog append, or held until the lease is confirmed (in order: a user's changes are
    /// written in the order they were made).
    mutating func emitAppend(_ append: RelayEffect, now: RelayTime) -> [RelayEffect] {
        guard mayWrite(now: now), leaseGate.heldAppends.isEmpty else {
            leaseGate.hold(append)
            return []
        }
        return [append]
    }

    /// The progress markers and offsets to store now: the markers and offsets that moved, and with
    /// `renewingLease` every finished offset, an unchanged one too (each commit the coordinator
    /// accepts confirms the ownership lease). The offset stays put while an early record waits for
    /// a seq gap; the marker still moves past the records finished after it. Without transactions,
    /// no marker is written while the lease has lapsed.
    package mutating func commitDue(now: RelayTime, renewingLease: Bool = false) -> [RelayEffect] {
        var effects: [RelayEffect] = []
        var offsets: [TopicPartition: Int64] = [:]
        let writes = mayWrite(now: now)
        // Partitions being handed over are committed too (the hand-over's own commit comes at its end): each
        // accepted commit confirms the lease, which a long drain would otherwise outlast. Their markers are
        // the hand-over's to write.
        for partition in partitions.keys {
            modify(partition) { state in
                if writes, !state.revoking, let marker = Self.progress(of: state), marker != state.progressWritten {
                    state.progressWritten = marker
                    effects.append(.writeProgress(marker, partition: partition.partition, at: now.epoch, handOver: nil))
                }
                if let committable = state.offsets.committable, renewingLease || committable != state.lastCommitted {
                    offsets[partition] = committable
                }
            }
        }
        if !offsets.isEmpty {
            effects.append(.commit(offsets, request: commits.request(at: now.monotonic, periodic: true)))
        }
        return effects
    }

    /// Commit request `request` was answered: `offsets` when it succeeded, `nil` when it failed
    /// (a coordinator mid-rebalance, or this member no longer in the group). A success confirms
    /// the ownership lease as of when the request was made.
    package mutating func committed(request: UInt64, offsets: [TopicPartition: Int64]?, now: RelayTime) -> [RelayEffect] {
        let requestedAt = commits.answered(request)
        var effects: [RelayEffect] = []
        if let offsets {
            for (partition, offset) in offsets { modify(partition) { $0.lastCommitted = offset } }
            if let requestedAt, leaseGate.lease != nil {
                leaseGate.confirm(at: requestedAt)
                effects += leaseConfirmed(now: now)
            }
        }
        for index in handOvers.indices {
            for action in handOvers[index].commitAnswered(request) where action == .finish {
                finish(handOvers[index])
            }
        }
        return effects + advanceHandOvers(now: now)
    }
}
