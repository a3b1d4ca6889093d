// The engine's partitions: assignment, the restore of their badge state, their progress.

import APNsCore
package import KafkaCore

extension RelayEngine {
    /// Partitions were assigned (the group answered at `at`, monotonic, which confirms the lease):
    /// restore each before its events are processed. A partition still held here is the consumer's
    /// to give again: it gave the earlier assignment up without waiting for its hand-over (its revoke
    /// timeout), so that assignment is forgotten as a lost one is, and the new one starts afresh.
    package mutating func assigned(_ assigned: [TopicPartition], at: Int64? = nil) -> [RelayEffect] {
        // A partition past the layout's count: the topic grew while the relay ran. Its users' homes moved; serving it
        // under the old layout would place them where the new one does not (a restarted relay refuses the same way).
        if let layout = configuration.layout, let grown = assigned.first(where: { $0.partition >= layout.partitionCount }) {
            return partitionCountChanged(to: nil, seenAt: grown)
        }
        var effects: [RelayEffect] = []
        if let at { leaseGate.confirm(at: at) }
        let held = assigned.filter { partitions.contains($0) }
        if !held.isEmpty {
            let maySend = at.map { leaseGate.isValid(at: $0) } ?? (leaseGate.lease == nil)
            effects += revoking(held, maySend: maySend)
            effects += giveUp(held)
        }
        for partition in assigned {
            let sequencer = BadgeSequencer<EventInFlight>(reorderWindowMs: configuration.reorderWindowMilliseconds,
                                                          lateSeqMemory: configuration.lateSeqMemory)
            nextGeneration += 1
            partitions[partition] = PartitionState(badges: BadgePartition(sequencer: sequencer), generation: nextGeneration)
            retries.succeeded(.restore(partition))
            effects.append(.restore(partition, generation: nextGeneration))
        }
        if isPaused { effects.append(.pause(assigned)) }
        return effects + permitSends()
    }


    /// The events topic has `partitionCount` partitions now (the service asks every `layoutCheckInterval` of its
    /// configuration); a count other than the layout's is a growth while the relay runs: it stops serving, as a
    /// restarted relay would refuse to start (exit 2, naming the command that moves users' state).
    package mutating func partitionCountObserved(_ partitionCount: Int) -> [RelayEffect] {
        guard let layout = configuration.layout, partitionCount != Int(layout.partitionCount), isRunning || isStopping else { return [] }
        return partitionCountChanged(to: partitionCount, seenAt: nil)
    }

    private mutating func partitionCountChanged(to count: Int?, seenAt partition: TopicPartition?) -> [RelayEffect] {
        guard let layout = configuration.layout else { return [] }
        let found = count.map { "it has \($0) now" } ?? "\(partition.map { "\($0)" } ?? "a partition") was assigned"
        return fail("the events topic grew while the relay ran: its users were placed for \(layout.partitionCount) partitions, and \(found). "
                    + "Stop every relay, then run `\(LayoutVerdict.moveCommand) --config FILE` (docs/DEPLOY.md, \"Growing the partitions\")", code: 2)
    }

    /// The changelog partition matching `partition` was read to its end, decoded as it was read (see
    /// ``RestoredChangelog``): users' states and the previous owner's progress marker. The records that waited for it
    /// run now (once the device registry is loaded too). A restore of an earlier assignment of the partition
    /// (`generation`) is ignored.
    package mutating func restored(_ partition: TopicPartition, generation: UInt64? = nil, changelog: RestoredChangelog, now: RelayTime) -> [RelayEffect] {
        guard var state = partitions[partition], state.badges.phase == .restoring,
              generation == nil || generation == state.generation else { return [] }
        state.badges.restore(changelog, now: now)
        partitions[partition] = state
        retries.succeeded(.restore(partition))
        return checkLayout(of: partition, changelog: changelog, now: now)
    }

    /// Reading the changelog partition failed: read it again after a backoff, from its beginning
    /// (a partial read must never be the ledger). Past the failure bound the relay gives up.
    package mutating func restoreFailed(_ partition: TopicPartition, generation: UInt64, error: String, now: RelayTime) -> [RelayEffect] {
        guard isRunning, let state = partitions[partition], state.generation == generation, state.badges.phase == .restoring else { return [] }
        counters.restoreFailures += 1
        let (streak, pastBound) = retries.failed(.restore(partition), now: now.monotonic)
        if pastBound {
            return fail("the badge state of \(partition) could not be restored for \((now.monotonic - streak.since) / 1_000) s: \(error)")
        }
        retries.schedule(.restore(partition, generation: generation), afterFailures: streak.failures, now: now.monotonic)
        return []
    }

    /// `push.devices` was read to the end it had when reading started: events may run.
    package mutating func deviceRegistryLoaded(now: RelayTime) -> [RelayEffect] {
        retries.succeeded(.deviceRegistry)
        guard !isDeviceRegistryLoaded else { return [] }
        isDeviceRegistryLoaded = true
        return runWaiting(in: partitions.keys, now: now)
    }

    /// Reading `push.devices` failed: read it again from its beginning after a backoff (the
    /// registry's records apply idempotently). Past the failure bound the relay gives up.
    package mutating func deviceRegistryFailed(_ error: String, now: RelayTime) -> [RelayEffect] {
        guard isRunning else { return [] }
        counters.deviceRegistryFailures += 1
        let (streak, pastBound) = retries.failed(.deviceRegistry, now: now.monotonic)
        if pastBound {
            return fail("the device registry could not be read for \((now.monotonic - streak.since) / 1_000) s: \(error)")
        }
        retries.schedule(.loadDeviceRegistry, afterFailures: streak.failures, now: now.monotonic)
        return []
    }

    /// Runs the records that waited for the restore of these partitions and the device registry.
    mutating func runWaiting(in partitionsToRun: [TopicPartition], now: RelayTime) -> [RelayEffect] {
        guard isDeviceRegistryLoaded, isRunning else { return [] }
        var effects: [RelayEffect] = []
        for partition in partitionsToRun {
            guard var state = partitions[partition], state.badges.phase == .ready, !state.revoking, !state.waitingForRestore.isEmpty else { continue }
            let waiting = state.waitingForRestore
            state.waitingForRestore = []
            partitions[partition] = state
            for message in waiting { process(message, now: now, into: &effects) }
        }
        effects += backpressure()
        return effects
    }

    /// The partition's progress as its next owner should read it: what this owner finished, and
    /// what the previous owner had finished beyond what this one has read so far.
    package func progress(of partition: TopicPartition) -> ProgressMarker? {
        partitions[partition].flatMap(Self.progress(of:))
    }

    static func progress(of state: PartitionState) -> ProgressMarker? {
        var through = state.lastConsumed ?? -1
        var open = state.offsets.pendingRuns()
        var devicesDone = state.devicesDone
        // What the previous owner finished beyond what this one has read still holds.
        if let previous = state.badges.previousProgress, previous.through > through {
            for run in previous.open where run.upperBound > through {
                open.append(max(run.lowerBound, through + 1)...run.upperBound)
            }
            for (offset, devices) in previous.devicesDone where offset > through { devicesDone[offset] = devices }
            through = previous.through
        }
        return through >= 0 ? ProgressMarker(through: through, runs: open, devicesDone: devicesDone) : nil
    }

    /// The generation of `partition`'s current assignment; `nil` when it is not assigned.
    package mutating func generation(of partition: TopicPartition) -> UInt64? { read(partition) { $0.generation } }

    /// The previous owner's progress, as restored.
    package func previousProgress(of partition: TopicPartition) -> ProgressMarker? { partitions[partition]?.badges.previousProgress }
}
