import Kafka

@testable import Relay

/// One events partition, its badge-state changelog, the output topics and a group commit, worked
/// by a ``RelayEngine`` that can crash (its state and everything unacknowledged dropped) or hand
/// the partition over gracefully. Completions arrive in a seeded random order, as Kafka
/// acknowledgements and APNs answers may. What the outside world saw is recorded for the checks.
struct CrashWorld {
    static let events = TopicPartition("push.events", 0)

    var configuration: RelayEngine.Configuration
    var engine: RelayEngine
    var random: SeededGenerator
    var now: RelayTime = 1_000_000

    /// The events partition: offset = index.
    private(set) var log: [(key: [UInt8]?, value: [UInt8])] = []
    /// The changelog partition as stored by Kafka (acknowledged, or stored before a crash).
    private(set) var changelog: [(key: [UInt8], value: [UInt8]?)] = []
    /// The group's committed offset.
    private(set) var committed: Int64?
    private var nextOffset: Int64 = 0
    /// The group refuses commits (a rebalance under way, a coordinator moving).
    var refuseCommits = false
    /// Devices that answer nothing while listed: their sends stay in flight.
    var slowTokens: Set<String> = []
    /// The engine handed the partition over (markers stored, commit done or refused).
    private var handedOver = false
    private var refuseHandOverCommit = false

    private enum Completion {
        case published(RecordReference, ResultRecord?)
        case sent(DeviceDispatch<PendingNotification>)
    }

    private var completions: [Completion] = []
    /// What a changelog write in flight is: a badge change (the engine waits for its token) or a
    /// progress marker (a hand-over's waits for it).
    private enum Append {
        case change(token: UInt64)
        case marker(handOver: UInt64?)
    }

    /// Changelog writes in flight, in the order the producer stores them.
    private var changelogAppends: [(kind: Append, key: [UInt8], value: [UInt8]?)] = []
    /// A hand-over is under way (its commit may be refused on its own).
    private var handingOver = false
    /// The engine is a frozen owner thawed after the group moved on: its commits are refused.
    private var refusingFrozenOwner = false

    /// Every notification APNs received: token, badge, apns-id, event id, the event's offset.
    private(set) var sends: [(token: String, badge: Int64?, apnsID: String, eventID: String, offset: Int64)] = []
    /// Every result published (acknowledged), in publish order, with its record's offset.
    private(set) var results: [ResultRecord] = []
    private var resultOffsets: [Int64] = []
    private(set) var resultsAfterLastRestart: [ResultRecord] = []
    private(set) var deadLetters: [Int64] = []
    private(set) var restarts = 0

    init(configuration: RelayEngine.Configuration = .init(), seed: UInt64) {
        self.configuration = configuration.withTestTopic
        engine = RelayEngine(configuration: self.configuration)
        random = SeededGenerator(seed: seed)
        perform(engine.assigned([Self.events], at: now.monotonic))
    }

    mutating func produce(_ value: [UInt8], key: String? = nil) {
        log.append((key.map { Array($0.utf8) }, value))
    }

    // MARK: Driving

    /// Random steps: consume, complete, tick, commit.
    mutating func step() {
        switch Int(random.next() % 10) {
        case 0...3 where nextOffset < Int64(log.count):
            consumeNext()
        case 4:
            now += Int64(random.next() % 700)
            perform(engine.tick(now: now))
        case 5:
            perform(engine.commitDue(now: now))
        default:
            completeOne()
        }
    }

    /// Random steps, with a crash at a random point between each of `crashes` restarts.
    mutating func run(crashes: Int) {
        for _ in 0..<crashes {
            let steps = Int(random.next() % UInt64(max(1, 4 * log.count))) + 1
            for _ in 0..<steps { step() }
            crash()
        }
    }

    /// Consumes everything and lets every completion and gap deadline pass.
    mutating func processAll() {
        while nextOffset < Int64(log.count) || !completions.isEmpty || !changelogAppends.isEmpty || engine.nextDeadline != nil {
            if nextOffset < Int64(log.count) && random.next() % 2 == 0 {
                consumeNext()
            } else if !completions.isEmpty || !changelogAppends.isEmpty {
                completeOne()
            } else if nextOffset < Int64(log.count) {
                consumeNext()
            } else {
                now += 3_000
                perform(engine.tick(now: now))
            }
        }
        perform(engine.commitDue(now: now))
    }

    mutating func runToEnd() { processAll() }

    private mutating func consumeNext() {
        let record = log[Int(nextOffset)]
        let message = KafkaMessage(topic: Self.events.topic, partition: 0, offset: nextOffset, key: record.key, value: record.value)
        nextOffset += 1
        perform(engine.consumed(message, now: now))
    }

    private mutating func completeOne() {
        if !changelogAppends.isEmpty && (completions.isEmpty || random.next() % 2 == 0) {
            storeFirstAppend()
            return
        }
        let ready = completions.indices.filter { index in
            if case .sent(let dispatch) = completions[index] { return !slowTokens.contains(dispatch.notification.payload.token) }
            return true
        }
        guard !ready.isEmpty else { return }
        let index = ready[Int(random.next() % UInt64(ready.count))]
        switch completions.remove(at: index) {
        case .published(let reference, let result):
            if let result {
                results.append(result)
                resultOffsets.append(reference.offset)
                resultsAfterLastRestart.append(result)
            } else {
                deadLetters.append(reference.offset)
            }
            perform(engine.published(reference, device: result?.token, now: now))
        case .sent(let dispatch):
            record(dispatch)
            perform(engine.sent(dispatch, outcome: .delivered(), now: now))
        }
    }

    /// The producer stores the first changelog write in flight and reports it.
    private mutating func storeFirstAppend() {
        let append = changelogAppends.removeFirst()
        changelog.append((append.key, append.value))
        switch append.kind {
        case .change(let token): perform(engine.changelogged(token, now: now))
        case .marker(let handOver): perform(engine.progressStored(handOver: handOver, now: now))
        }
    }

    mutating func perform(_ effects: [RelayEffect]) {
        for effect in effects {
            switch effect {
            case .publishResult(let record, let reference):
                completions.append(.published(reference, record))
            case .publishDeadLetter(_, _, let reference):
                completions.append(.published(reference, nil))
            case .publishFailedToken, .publishWrongEnvironment:
                break
            case .appendChangelog(let user, let record, _, let token):
                changelogAppends.append((.change(token: token), Array(user.utf8), record.encoded()))
            case .send(let dispatch):
                completions.append(.sent(dispatch))
            case .writeProgress(let marker, _, let at, let handOver):
                changelogAppends.append((.marker(handOver: handOver), ProgressMarker.key, marker.encoded(at: at)))
            case .restore(let partition, let generation):
                perform(engine.restored(partition, generation: generation, records: changelog, now: now))
            case .commit(let offsets, let request):
                let refused = refuseCommits || (handingOver && refuseHandOverCommit) || refusingFrozenOwner
                if !refused, let offset = offsets[Self.events] { committed = offset }
                perform(engine.committed(request: request, offsets: refused ? nil : offsets, now: now))
            case .acknowledgeRevoke:
                handedOver = true
            case .stopped:
                handedOver = true
            case .publishDeadLetterReference(let reference):
                completions.append(.published(reference.source, nil))
            case .stopWrites:
                // Some of the sends handed over were still queued in the sender, or between attempts: those come
                // back abandoned, never written (the rest were on the wire and are answered).
                let unwritten = completions.indices.filter { index in
                    guard case .sent = completions[index] else { return false }
                    return random.next() % 2 == 0
                }
                for index in unwritten.reversed() {
                    guard case .sent(let dispatch) = completions.remove(at: index) else { continue }
                    perform(engine.sent(dispatch, outcome: .abandoned(apnsID: dispatch.notification.payload.notification.apnsID), now: now))
                }
            case .pause, .resume, .cancelSends, .loadDeviceRegistry, .exit, .permitSends:
                break
            }
        }
    }

    // MARK: Failures

    /// The process dies: its state and every unacknowledged completion are gone. Of the changelog
    /// appends in flight a random prefix was stored (a producer's writes to one partition land in
    /// order); results in flight are lost (their records are processed again).
    mutating func crash() {
        let stored = changelogAppends.isEmpty ? 0 : Int(random.next() % UInt64(changelogAppends.count + 1))
        for append in changelogAppends.prefix(stored) { changelog.append((append.key, append.value)) }
        changelogAppends = []
        completions = []
        restart()
    }

    /// The partition is revoked after everything in flight finished; its commit may be refused.
    mutating func handOver(commitRefused: Bool) {
        refuseHandOverCommit = commitRefused
        handingOver = true
        if !handedOver { perform(engine.revokeRequested([Self.events], now: now)) }
        // Nothing in flight: the hand-over waits only for its marker, stored behind the writes before it.
        while !handedOver {
            precondition(!changelogAppends.isEmpty, "nothing in flight: the hand-over waits only for its marker")
            storeFirstAppend()
        }
        handedOver = false
        handingOver = false
        refuseHandOverCommit = false
        // The revoke flushes the producer before it gives the partition up.
        while !changelogAppends.isEmpty {
            let append = changelogAppends.removeFirst()
            changelog.append((append.key, append.value))
        }
        completions = []
        restart()
    }

    /// The partition is revoked in the middle of the work: nothing new is sent, what is in flight
    /// finishes (`settle` of it), then the markers and the commit, then the next owner takes over.
    mutating func handOverMidway(steps: Int) {
        for _ in 0..<steps { step() }
        refuseHandOverCommit = refuseCommits
        handingOver = true
        perform(engine.revokeRequested([Self.events], now: now))
        while !handedOver || !changelogAppends.isEmpty {
            completeOne()
        }
        handOver(commitRefused: refuseCommits)
    }

    /// Consumes everything and completes what can complete, with no time passing (gaps stay held).
    mutating func processWithoutTime() {
        while nextOffset < Int64(log.count) || completable {
            if nextOffset < Int64(log.count) && (random.next() % 2 == 0 || !completable) {
                consumeNext()
            } else {
                completeOne()
            }
        }
    }

    /// Whether a completion other than a slow device's answer is waiting.
    private var completable: Bool {
        !changelogAppends.isEmpty || completions.contains { completion in
            if case .sent(let dispatch) = completion { return !slowTokens.contains(dispatch.notification.payload.token) }
            return true
        }
    }

    /// A graceful hand-over now, whatever is in flight: what can finish finishes, time passes
    /// until the revoke's deadline if a slow device holds it, then the next owner takes over.
    mutating func gracefulHandOver() {
        refuseHandOverCommit = refuseCommits
        handingOver = true
        perform(engine.revokeRequested([Self.events], now: now))
        while !handedOver {
            if completable {
                completeOne()
            } else {
                now += 250
                perform(engine.tick(now: now))
            }
        }
        handOver(commitRefused: refuseCommits)
    }

    /// Every (event, token) that APNs received more than once.
    var resentNotifications: [String] {
        Dictionary(grouping: sends, by: { "\($0.eventID)/\($0.token)" }).filter { $0.value.count > 1 }.keys.sorted()
    }

    /// Every (event, token) whose result was published more than once.
    var republishedResults: [String] {
        Dictionary(grouping: results, by: { "\($0.eventID)/\($0.token ?? "-")" }).filter { $0.value.count > 1 }.keys.sorted()
    }

    private mutating func restart() {
        restarts += 1
        resultsAfterLastRestart = []
        engine = RelayEngine(configuration: configuration)
        nextOffset = committed ?? 0
        perform(engine.assigned([Self.events], at: now.monotonic))
    }

    // MARK: Freezes

    /// The owner freezes (SIGSTOP, a node pause) past its session timeout: the group gives the
    /// partition to a new owner, which works `newOwnerSteps` random steps; then the frozen one
    /// thaws and acts on everything it had queued (acknowledgements, APNs' answers, its timers)
    /// while the group refuses its commits, until librdkafka reports the partition lost. What the
    /// frozen owner had handed to the producer and to APNs before the freeze got there before the
    /// freeze; anything it sends or writes after the thaw is recorded like any other send or write.
    /// Needs a configuration with a session timeout (the ownership lease).
    mutating func freezeAndThaw(newOwnerSteps: Int) {
        precondition(configuration.sessionTimeout != nil, "a freeze is survived through the ownership lease")
        let frozenEngine = engine
        let frozenAppends = changelogAppends
        let frozenCompletions = completions
        for append in frozenAppends { changelog.append((append.key, append.value)) }
        for case .sent(let dispatch) in frozenCompletions { record(dispatch) }
        changelogAppends = []
        completions = []
        now += 45_000
        restart()
        for _ in 0..<newOwnerSteps { step() }

        // The thaw. The new owner's work in flight waits meanwhile.
        let newOwner = (engine: engine, completions: completions, appends: changelogAppends, committed: committed, results: resultsAfterLastRestart)
        engine = frozenEngine
        completions = []
        changelogAppends = []
        refusingFrozenOwner = true
        for append in frozenAppends {
            switch append.kind {
            case .change(let token): perform(engine.changelogged(token, now: now))
            case .marker(let handOver): perform(engine.progressStored(handOver: handOver, now: now))
            }
        }
        for completion in frozenCompletions {
            switch completion {
            case .published(let reference, let result):
                if let result { results.append(result); resultOffsets.append(reference.offset) }
                perform(engine.published(reference, device: result?.token, now: now))
            case .sent(let dispatch):
                perform(engine.sent(dispatch, outcome: .delivered(), now: now))
            }
        }
        for _ in 0..<20 {
            now += 100
            perform(engine.tick(now: now))
            while !completions.isEmpty || !changelogAppends.isEmpty { completeOne() }
        }
        perform(engine.revokeRequested([Self.events], id: 1, lost: true, now: now))
        while !completions.isEmpty || !changelogAppends.isEmpty { completeOne() }
        refusingFrozenOwner = false
        handedOver = false  // the lost revoke's acknowledgement is the frozen owner's, not a hand-over
        engine = newOwner.engine
        completions = newOwner.completions
        changelogAppends = newOwner.appends
        committed = newOwner.committed
        resultsAfterLastRestart = newOwner.results
    }

    /// APNs received `dispatch`'s notification.
    private mutating func record(_ dispatch: DeviceDispatch<PendingNotification>) {
        let notification = dispatch.notification.payload
        sends.append((notification.token, notification.badge, notification.apnsID, notification.eventID, notification.record.offset))
    }

    // MARK: What was seen

    /// The user's count in the stored changelog (the last record for the user).
    func finalBadge(of user: String) -> Int64? {
        guard let value = changelog.last(where: { $0.key == Array(user.utf8) })?.value else { return nil }
        return try? BadgeStateRecord.decode(value).badge
    }

    /// The results published for the record at `offset`.
    func results(ofRecord offset: Int64) -> [ResultRecord] {
        zip(results, resultOffsets).filter { $0.1 == offset }.map(\.0)
    }

    /// The badge of the last notification APNs received for `token`.
    func lastSentBadge(to token: String) -> Int64? {
        sends.last { $0.token == token }?.badge ?? nil
    }
}
