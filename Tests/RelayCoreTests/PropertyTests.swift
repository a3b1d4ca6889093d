import Testing
@testable import RelayCore

/// Random interleavings of events, duplicates, gaps, retries and completion orders through the
/// ledger and the dispatcher. Every case is replayable from its seed.
@Suite struct PropertyTests {
    private struct Arrival {
        let id: Int
        let user: Int
        let seq: Int64
        let operation: BadgeOperation
        let isAlert: Bool
    }

    private struct Applied {
        let arrival: Arrival
        let badge: Int64
        /// Applied late: its seq had been skipped before it arrived.
        let late: Bool
    }

    private struct Note: Sendable, Equatable {
        let user: Int
        let ledgerIndex: Int  // position in the user's applied order
        let arrivalID: Int
    }

    private static func randomOperation(using random: inout SeededGenerator) -> BadgeOperation {
        switch Int.random(in: 0..<3, using: &random) {
        case 0: return .set(Int64.random(in: 0...5, using: &random))
        case 1: return .increment(Int64.random(in: 0...3, using: &random))
        default: return .decrement(Int64.random(in: 0...3, using: &random))
        }
    }

    @Test func ledgerAndDispatcherKeepOrderUnderRandomInterleavings() {
        for seed in 0..<1_200 {
            runCase(seed: UInt64(seed))
        }
    }

    private func runCase(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        let userCount = Int.random(in: 1...3, using: &random)
        let longWindow = Bool.random(using: &random)
        let window: Int64 = longWindow ? 1_000_000_000 : Int64.random(in: 20...300, using: &random)
        var devicesOfUser: [[String]] = []
        var nextDevice = 1
        for _ in 0..<userCount {
            let count = Int.random(in: 1...2, using: &random)
            devicesOfUser.append((0..<count).map { token(nextDevice + $0) })
            nextDevice += count
        }

        // Arrivals: per user seqs 1...n with some never arriving (gaps) and some repeated.
        var arrivals: [Arrival] = []
        var operationOf: [Int: [Int64: BadgeOperation]] = [:]
        var alertOf: [Int: [Int64: Bool]] = [:]
        for user in 0..<userCount {
            for seq in Int64(1)...Int64.random(in: 1...15, using: &random) where Int.random(in: 0..<100, using: &random) < 85 {
                let operation = Self.randomOperation(using: &random)
                let isAlert = Int.random(in: 0..<100, using: &random) < 30
                operationOf[user, default: [:]][seq] = operation
                alertOf[user, default: [:]][seq] = isAlert
                let copies = Int.random(in: 0..<100, using: &random) < 20 ? 2 : 1
                for _ in 0..<copies {
                    arrivals.append(Arrival(id: arrivals.count, user: user, seq: seq, operation: operation, isAlert: isAlert))
                }
            }
        }
        let arrivalByID = arrivals
        arrivals.shuffle(using: &random)

        // Short windows also get small held bounds so overflow (early gap skips) is exercised;
        // long windows get room for everything, so the result must equal the model exactly.
        var sequencer = longWindow
            ? BadgeSequencer<Int>(reorderWindowMs: window, maxHeldPerUser: 64, maxHeldTotal: 1_000)
            : BadgeSequencer<Int>(reorderWindowMs: window, maxHeldPerUser: 4, maxHeldTotal: 8)
        var dispatcher = DeviceDispatcher<Note>()
        var appliedOf = [[Applied]](repeating: [], count: userCount)
        var outcomeCount = [Int](repeating: 0, count: arrivals.count)
        var outstanding: [DeviceDispatch<Note>] = []
        var spentTickets: [DispatchTicket] = []
        var deviceLog: [String: [Note]] = [:]
        var superseded: [Note] = []
        var now: Int64 = 0

        func handle(_ outcomes: [SequencerOutcome<Int>]) {
            for outcome in outcomes {
                let arrival = arrivalByID[outcome.update.tag]
                outcomeCount[arrival.id] += 1
                let state: UserBadgeState
                let late: Bool
                switch outcome {
                case .applied(_, let applied, _): (state, late) = (applied, false)
                case .appliedLate(_, let applied): (state, late) = (applied, true)
                case .alreadyApplied, .duplicate, .repeatedForward: continue
                }
                let note = Note(user: arrival.user, ledgerIndex: appliedOf[arrival.user].count, arrivalID: arrival.id)
                appliedOf[arrival.user].append(Applied(arrival: arrival, badge: state.badge, late: late))
                for device in devicesOfUser[arrival.user] {
                    let step = dispatcher.enqueue(DeviceNotification(token: device, eventID: "e\(arrival.id)", badge: state.badge,
                                                                     isBadgeOnly: !arrival.isAlert, payload: note))
                    outstanding += step.send
                    superseded += step.superseded.map(\.payload)
                }
            }
        }

        func completeOne() {
            let dispatch = outstanding.remove(at: Int.random(in: 0..<outstanding.count, using: &random))
            let retry = dispatch.attempt < 3 && Int.random(in: 0..<100, using: &random) < 25
            // A send that is retried may still have reached the device (at-least-once).
            if !retry || Bool.random(using: &random) {
                deviceLog[dispatch.notification.token, default: []].append(dispatch.notification.payload)
            }
            if let stale = spentTickets.randomElement(using: &random), Int.random(in: 0..<5, using: &random) == 0 {
                #expect(dispatcher.complete(stale, outcome: .finished).send.isEmpty, "seed \(seed)")
            }
            spentTickets.append(dispatch.ticket)
            outstanding += dispatcher.complete(dispatch.ticket, outcome: retry ? .retry : .finished).send
        }

        var pending = arrivals[...]
        while !pending.isEmpty || !outstanding.isEmpty {
            now += Int64.random(in: 0...40, using: &random)
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<5 where !pending.isEmpty:
                let arrival = pending.removeFirst()
                handle(sequencer.offer(BadgeUpdate(user: "u\(arrival.user)", seq: arrival.seq, operation: arrival.operation, tag: arrival.id), now: now))
            case 5..<9 where !outstanding.isEmpty:
                completeOne()
            default:
                handle(sequencer.tick(now: now))
            }
            if pending.isEmpty && outstanding.isEmpty {
                handle(sequencer.tick(now: Int64.max))
            }
        }

        // Every arrival has exactly one outcome; nothing waits; nothing is in flight.
        #expect(outcomeCount.allSatisfy { $0 == 1 }, "seed \(seed)")
        #expect(sequencer.heldUpdateCount == 0, "seed \(seed)")
        #expect(dispatcher.pendingCount == 0, "seed \(seed)")

        for user in 0..<userCount {
            let applied = appliedOf[user]
            // No seq applied twice; in seq order but for late ones (below the last applied seq when
            // they came); each badge follows from the previous: a late increment or decrement
            // applies at the tail, a late set leaves the count.
            let seqs = applied.map(\.arrival.seq)
            let inOrder = applied.filter { !$0.late }.map(\.arrival.seq)
            #expect(zip(inOrder, inOrder.dropFirst()).allSatisfy { $0 < $1 }, "seed \(seed): seqs \(seqs)")
            #expect(Set(seqs).count == seqs.count, "seed \(seed): a seq applied twice: \(seqs)")
            var count: Int64 = 0
            var lastSeq: Int64 = 0
            for entry in applied {
                if entry.late {
                    #expect(entry.arrival.seq < lastSeq, "seed \(seed)")
                    if case .set = entry.arrival.operation {} else { count = entry.arrival.operation.applied(to: count) }
                } else {
                    count = entry.arrival.operation.applied(to: count)
                    lastSeq = entry.arrival.seq
                }
                #expect(entry.badge == count, "seed \(seed)")
            }
            // Nothing lost: every distinct seq that arrived was applied once, skipped gaps or not.
            #expect(Set(seqs) == Set((operationOf[user] ?? [:]).keys), "seed \(seed)")
            #expect(sequencer.ledger["u\(user)"]?.badge ?? 0 == count, "seed \(seed)")
            if longWindow {
                #expect(sequencer.earlyReleases == 0, "seed \(seed)")
                // The model: every distinct seq that arrived, in seq order, regardless of arrival order.
                let model = (operationOf[user] ?? [:]).sorted { $0.key < $1.key }.reduce(Int64(0)) { $1.value.applied(to: $0) }
                #expect(count == model, "seed \(seed)")
                #expect(seqs == (operationOf[user] ?? [:]).keys.sorted(), "seed \(seed)")
            }

            for device in devicesOfUser[user] {
                let received = deviceLog[device] ?? []
                // Repeats of one notification (resends) collapse; the rest is a subsequence of the ledger's order.
                var indexes: [Int] = []
                for note in received where indexes.last != note.ledgerIndex { indexes.append(note.ledgerIndex) }
                #expect(zip(indexes, indexes.dropFirst()).allSatisfy { $0 < $1 }, "seed \(seed): device got \(indexes)")
                let badges = indexes.map { applied[$0].badge }
                if let last = applied.last {
                    #expect(badges.last == last.badge, "seed \(seed): final badge")
                }
                // Alerts are never dropped.
                let alertsApplied = applied.enumerated().filter { $0.element.arrival.isAlert }.map(\.offset)
                #expect(Set(alertsApplied).isSubset(of: Set(indexes)), "seed \(seed): alerts")
                // Whatever was not delivered was superseded (badge-only) by a newer badge.
                let missing = Set(applied.indices).subtracting(indexes)
                let supersededHere = Set(superseded.filter { $0.user == user }.map(\.ledgerIndex))
                #expect(missing.isSubset(of: supersededHere), "seed \(seed)")
            }
            _ = alertOf
        }
    }

    /// Replay after a crash: 1,000 events processed with offsets committed as results are
    /// published; crash at an arbitrary point; restore the changelog as snapshotted at an arbitrary
    /// later moment; replay every event from the committed offset. Final badges equal a run
    /// without a crash, and nothing is applied twice.
    @Test func replayAfterCrashConverges() {
        for seed in 0..<40 {
            var random = SeededGenerator(seed: 0xBADC0DE &+ UInt64(seed))
            let records = makeRecords(count: 1_000, users: 20, using: &random)
            let reference = process(records, from: 0, ledger: BadgeLedger(), crashAfter: nil, using: &random)
            for _ in 0..<10 {
                let crashAfter = Int.random(in: 0...records.count, using: &random)
                let crashed = process(records, from: 0, ledger: BadgeLedger(), crashAfter: crashAfter, using: &random)
                // Restore through the partition state machine from the encoded changelog.
                var partition = BadgePartition<Int>(sequencer: BadgeSequencer())
                for (user, value) in crashed.changelogSnapshot { partition.restore(key: slice(Array(user.utf8)), value: slice(value), now: 0) }
                partition.finishRestore()
                let replay = process(records, from: Int(crashed.committed), ledger: partition.sequencer.ledger, crashAfter: nil, using: &random)
                #expect(replay.ledger.allStates.mapValues(\.badge) == reference.ledger.allStates.mapValues(\.badge),
                        "seed \(seed), crash after \(crashAfter), committed \(crashed.committed)")
                #expect(replay.ledger == reference.ledger)
            }
        }
    }

    private struct Record {
        let user: String
        let seq: Int64
        let operation: BadgeOperation
    }

    private func makeRecords(count: Int, users: Int, using random: inout SeededGenerator) -> [Record] {
        var nextSeq = [Int64](repeating: 1, count: users)
        var records: [Record] = []
        while records.count < count {
            let user = Int.random(in: 0..<users, using: &random)
            let operation = Self.randomOperation(using: &random)
            records.append(Record(user: "u\(user)", seq: nextSeq[user], operation: operation))
            if Int.random(in: 0..<100, using: &random) < 5 { records.append(records[records.count - 1]) }  // producer retry
            nextSeq[user] += 1
        }
        // Local reordering, as a partition written by several producers would show.
        for index in stride(from: 0, to: records.count - 1, by: 1) where Int.random(in: 0..<100, using: &random) < 15 {
            records.swapAt(index, index + 1)
        }
        return Array(records.prefix(count))
    }

    private struct RunResult {
        var ledger: BadgeLedger
        var committed: Int64
        var changelogSnapshot: [(String, [UInt8])]
    }

    /// The service's loop in miniature: track offset, offer, publish changelog then results, mark
    /// done, commit now and then. With `crashAfter`, stops after that many records and returns the
    /// last commit and the changelog as flushed at a random moment after that commit.
    private func process(_ records: [Record], from start: Int, ledger: BadgeLedger, crashAfter: Int?,
                         using random: inout SeededGenerator) -> RunResult {
        var sequencer = BadgeSequencer<Int>(reorderWindowMs: 2_000, ledger: ledger)
        var tracker = OffsetTracker(committed: Int64(start))
        var changelog: [(String, [UInt8])] = []
        var committed = Int64(start)
        var changelogAtCommit = 0
        var appliedKeys = Set<String>()
        var unfinished = Set<Int>()  // offsets offered whose result is not published yet (the model)
        let end = min(records.count, crashAfter ?? records.count)

        func publish(_ outcomes: [SequencerOutcome<Int>], now: Int64) {
            for outcome in outcomes {
                if let state = outcome.appliedState {
                    let key = "\(outcome.update.user)#\(outcome.update.seq ?? 0)"
                    #expect(!appliedKeys.contains(key), "applied twice: \(key)")
                    appliedKeys.insert(key)
                    changelog.append((outcome.update.user, BadgeStateRecord(state: state, updatedAt: now).encoded()))
                }
                tracker.resultPublished(Int64(outcome.update.tag))
                unfinished.remove(outcome.update.tag)
            }
        }

        for offset in start..<end {
            let record = records[offset]
            let now = Int64(offset) * 5
            tracker.track(Int64(offset))
            unfinished.insert(offset)
            publish(sequencer.offer(BadgeUpdate(user: record.user, seq: record.seq, operation: record.operation, tag: offset), now: now), now: now)
            publish(sequencer.tick(now: now), now: now)
            if Int.random(in: 0..<10, using: &random) == 0, let committable = tracker.committable {
                #expect(committable >= committed)
                // Never past an unfinished record: every record below the commit has its results.
                #expect(unfinished.allSatisfy { Int64($0) >= committable }, "commit \(committable) passes \(unfinished.min() ?? -1)")
                committed = committable
                changelogAtCommit = changelog.count
            }
        }
        if crashAfter == nil || end == records.count {
            publish(sequencer.tick(now: Int64.max), now: Int64(records.count) * 5)
            committed = tracker.committable ?? committed
            changelogAtCommit = changelog.count
        }
        // The changelog was flushed before the commit; how much more got out before the crash is arbitrary.
        let flushed = Int.random(in: changelogAtCommit...changelog.count, using: &random)
        return RunResult(ledger: sequencer.ledger, committed: committed, changelogSnapshot: Array(changelog.prefix(flushed)))
    }
}
