// The engine's hand-overs: revokes and the stop, step by step (HandOverPlan).

import APNsCore
package import KafkaCore

extension RelayEngine {
    /// The consumer is taking these partitions away: from now on nothing new is sent or written
    /// for them. Queued notifications are dropped (their records stay unfinished, so the next
    /// owner sends them, once), and so are those the sender still holds unwritten or between
    /// attempts (``RelayEffect/stopWrites(_:)``); sends on the wire finish and their results are
    /// published; gaps are not released and acknowledged changelog writes start no sends. Their hand-over
    /// (``HandOverPlan``) goes on from there.
    /// `maySend`: whether sends may go to the sender now (the lease).
    mutating func revoking(_ revoking: [TopicPartition], maySend: Bool) -> [RelayEffect] {
        let leaving = Set(revoking.filter { partitions.contains($0) })
        guard !leaving.isEmpty else { return [] }
        for partition in leaving { modify(partition) { $0.revoking = true } }
        // Queued or released and not handed to the sender: dropped (their records stay unfinished, for the next
        // owner); each frees its device's slot for the device's next notification (of another partition).
        let (dropped, released) = window.drop(where: { leaving.contains($0.record.partition) }, maySend: maySend)
        for notification in dropped {
            modify(notification.payload.record) { $0.notifications -= 1 }
            leftWindow(notification)
        }
        // Fan-outs not begun or not finished: the rest of their devices are the next owner's (their records stay open).
        dropFanOuts(of: leaving)
        // Retries waiting for them are dropped: the next owner publishes (and stores) what is left.
        let leavingAppends = Set(awaitingChangelog.serials { leaving.contains($0.event.record.partition) })
        var droppedPublishes: [RecordReference] = []
        retries.removeAll { effect in
            if let record = effect.recordReference {
                guard leaving.contains(record.partition) else { return false }
                droppedPublishes.append(record)
                return true
            }
            if case .appendChangelog(_, _, _, let token) = effect { return leavingAppends.contains(token) }
            return false
        }
        for record in droppedPublishes { modify(record) { $0.publishing -= 1 } }
        for token in leavingAppends { awaitingChangelog[token] = nil }
        // A drop only completes dispatches, which replaces no queued notification: the step has sends, nothing superseded.
        return [.stopWrites(revoking.filter(leaving.contains))] + released.send.map(RelayEffect.send) + backpressure()
    }

    /// Forgets the current assignment of these partitions at once (the consumer gave them up), after
    /// ``revoking(_:maySend:)``: their sends in flight are cancelled (their answers touch nothing), their state
    /// goes, and a hand-over under way no longer covers them, so it cannot drop a later assignment of them.
    mutating func giveUp(_ leaving: [TopicPartition]) -> [RelayEffect] {
        guard !leaving.isEmpty else { return [] }
        drop(leaving)
        for index in handOvers.indices { handOvers[index].remove(leaving) }
        return [.cancelSends(leaving)]
    }

    /// The consumer is taking these partitions away: a hand-over (``HandOverPlan``) with the
    /// revoke's deadlines, ending before `consumerDeadline` (monotonic), when the consumer gives the
    /// partitions up unacknowledged: a revoke that reached the engine late gets a shorter one.
    /// Revoke `id` is acknowledged once every hand-over of its partitions is done (this one, and
    /// the stop's if it had begun). A `lost` revoke (the group gave them away already) hands nothing
    /// over: their state is dropped at once, nothing more is sent, written or committed for them,
    /// and what was unfinished is the next owner's.
    package mutating func revokeRequested(_ partitionsLeaving: [TopicPartition], id: UInt64 = 0, lost: Bool = false,
                                          consumerDeadline: Int64? = nil, now: RelayTime) -> [RelayEffect] {
        guard !isFailed else { return [] }
        let leaving = partitionsLeaving.filter { partitions.contains($0) }
        let effects = revoking(leaving, maySend: maySend(now: now))
        guard !lost else {
            // A hand-over of these partitions under way hands over the rest of its partitions.
            return effects + giveUp(leaving) + [.acknowledgeRevoke(id)] + advanceHandOvers(now: now)
        }
        var waitsFor = Set(handOvers.filter { $0.partitions.contains(where: leaving.contains) }.map(\.id))
        let unplanned = leaving.filter { partition in !handOvers.contains { $0.partitions.contains(partition) } }
        if !unplanned.isEmpty || waitsFor.isEmpty {
            var drain = configuration.revokeDrainMilliseconds
            var total = drain + configuration.handOverMilliseconds
            if let consumerDeadline {
                // Over by nine tenths of the time the consumer still gives (its acknowledgement has to get there),
                // two thirds of it to drain, as the configured shares do.
                total = min(total, max(0, consumerDeadline - now.monotonic) * 9 / 10)
                drain = min(drain, total * 2 / 3)
            }
            nextHandOverID += 1
            handOvers.append(HandOverPlan(id: nextHandOverID, purpose: .revoke, partitions: unplanned, now: now.monotonic, drain: drain, total: total))
            waitsFor.insert(nextHandOverID)
        }
        revokesWaiting[id] = waitsFor
        return effects + advanceHandOvers(now: now)
    }

    /// A graceful stop: nothing new is consumed (the partitions pause; records fetched from now
    /// on are left for the next owner); work in flight finishes, then a hand-over of every
    /// partition (``HandOverPlan``), all within `shutdownTimeout`: 60% to finish work in flight
    /// (sends start in the first 40%; the last 20% is for their answers), 20% to hand over; the
    /// driver keeps the rest to close its clients.
    ///
    /// - Parameter askedAt: when the stop was signalled, if before `now` (a busy loop takes the stop late): the
    ///   budget counts from the signal, as the process's watchdog does, not from when the stop reached the engine.
    package mutating func stopRequested(now: RelayTime, askedAt: RelayTime? = nil) -> [RelayEffect] {
        guard isRunning else { return [] }
        lifecycle = .stopping
        // Records waiting for a restore or the registry never start: the next owner has them.
        for partition in partitions.keys {
            let waiting = modify(partition) { state -> Int in
                let count = state.waitingForRestore.count
                state.waitingForRestore = []
                state.pending -= count
                return count
            } ?? 0
            pendingTotal -= waiting
        }
        let leaving = partitions.keys.filter { partition in !handOvers.contains { $0.partitions.contains(partition) } }
        nextHandOverID += 1
        let budget = configuration.shutdownTimeoutMilliseconds
        let signalled = min(askedAt?.monotonic ?? now.monotonic, now.monotonic)
        handOvers.append(HandOverPlan(id: nextHandOverID, purpose: .stop, partitions: leaving, now: signalled,
                                      drain: budget * 6 / 10, total: budget * 8 / 10))
        return [.pause(partitions.keys)] + advanceHandOvers(now: now)
    }

    /// Moves every hand-over on as far as what is in flight and the clock allow.
    mutating func advanceHandOvers(now: RelayTime) -> [RelayEffect] {
        guard !handOvers.isEmpty else { return [] }
        var effects: [RelayEffect] = []
        for index in handOvers.indices {
            var actions = handOvers[index].advance(observe(handOvers[index]), now: now.monotonic)
            while !actions.isEmpty {
                let action = actions.removeFirst()
                let plan = handOvers[index]
                switch action {
                case .startNothingNew:
                    // The stop's partitions were not leaving until now: nothing new starts for them from here.
                    effects += revoking(plan.partitions, maySend: maySend(now: now))
                case .cancelSends:
                    if !plan.partitions.isEmpty { effects.append(.cancelSends(plan.partitions)) }
                case .storeMarkers:
                    // From what Kafka acknowledged: every result published by now is in the markers. Without
                    // transactions, not while the lease has lapsed (the partitions may be another member's already):
                    // a commit is sent to confirm it, and the markers are asked for again; their time up, the
                    // hand-over is not complete (a stop exits 1).
                    guard mayWrite(now: now) || plan.partitions.isEmpty else {
                        handOvers[index].markersWithheld()
                        continue
                    }
                    let markers = plan.partitions.compactMap { partition in
                        read(partition, Self.progress(of:)).flatMap { $0 }.map { (partition, $0) }
                    }
                    for (partition, marker) in markers {
                        modify(partition) { $0.progressWritten = marker }
                        effects.append(.writeProgress(marker, partition: partition.partition, at: now.epoch, handOver: plan.id))
                    }
                    handOvers[index].markersWritten(markers.count)
                    actions += handOvers[index].advance(observe(handOvers[index]), now: now.monotonic)
                case .commit:
                    var offsets: [TopicPartition: Int64] = [:]
                    for partition in plan.partitions {
                        if let committable = read(partition, { $0.offsets.committable }) ?? nil { offsets[partition] = committable }
                    }
                    let request = commits.request(at: now.monotonic, periodic: false)
                    handOvers[index].commitRequested(request)
                    if offsets.isEmpty {
                        commits.answered(request)
                        actions += handOvers[index].commitAnswered(request)
                    } else {
                        effects.append(.commit(offsets, request: request))
                    }
                case .finish:
                    finish(handOvers[index])
                }
            }
        }
        for plan in handOvers where plan.isDone && plan.purpose == .stop { stopHandedOver = plan.isComplete }
        // A revoke is acknowledged once every hand-over of its partitions is done.
        let done = Set(handOvers.filter(\.isDone).map(\.id))
        if !done.isEmpty {
            for (revoke, plans) in revokesWaiting.sorted(by: { $0.key < $1.key }) {
                let left = plans.subtracting(done)
                revokesWaiting[revoke] = left.isEmpty ? nil : left
                if left.isEmpty { effects.append(.acknowledgeRevoke(revoke)) }
            }
        }
        handOvers.removeAll(where: \.isDone)
        if case .stopping = lifecycle, handOvers.isEmpty {
            lifecycle = .stopped
            effects.append(.stopped(handedOver: stopHandedOver))
        }
        return effects + backpressure()
    }

    /// What a hand-over waits for: for a revoke, its partitions' sends and publishes; for the
    /// stop, until its drain ends, every record consumed.
    func observe(_ plan: HandOverPlan) -> HandOverPlan.Observation {
        var observation = HandOverPlan.Observation(inFlight: false, publishing: false)
        for partition in plan.partitions {
            // A copy of the state, read during hand-overs only.
            guard let state = partitions[partition] else { continue }
            observation.inFlight = observation.inFlight || state.notifications > 0 || (!state.revoking && state.pending > 0)
            observation.publishing = observation.publishing || state.publishing > 0
        }
        return observation
    }

    /// The last step of a hand-over: a revoke's partitions are given up (their state dropped).
    mutating func finish(_ plan: HandOverPlan) {
        if plan.purpose == .revoke { drop(plan.partitions) }
    }

    /// Forgets these partitions: nothing of theirs is tracked, sent, written or committed any more.
    mutating func drop(_ leaving: [TopicPartition]) {
        dropFanOuts(of: Set(leaving))
        for partition in leaving {
            guard var state = partitions.removeValue(forKey: partition) else { continue }
            pendingTotal -= state.pending
            bulkInProcess -= state.bulkStarted.count
            state.badges.revoke()
        }
    }

    /// A progress marker was stored; `handOver` names the hand-over that wrote it, if any.
    package mutating func progressStored(handOver: UInt64?, now: RelayTime) -> [RelayEffect] {
        retries.succeeded(.publishing(.progress))
        guard let handOver, let index = handOvers.firstIndex(where: { $0.id == handOver }) else { return [] }
        handOvers[index].markerSettled(stored: true)
        return advanceHandOvers(now: now)
    }
}
