import KafkaCore

@testable import RelayCore

/// The events partitions (one by default), their badge-state changelogs, the output topics and a group commit, worked
/// by a ``RelayEngine`` that owns every partition and can crash (its state and everything unacknowledged dropped) or
/// hand the partitions over gracefully. With more than one partition the engine places users by its layout and
/// forwards what producers wrote elsewhere; the partition count can grow (with the migration an operator runs).
/// Completions arrive in a seeded random order, as Kafka acknowledgements and APNs answers may. What the outside
/// world saw is recorded for the checks.
struct CrashWorld {
    static let events = TopicPartition("push.events", 0)

    var configuration: RelayEngine.Configuration
    var engine: RelayEngine
    var random: SeededGenerator
    var now: RelayTime = 1_000_000

    /// A record of an events partition.
    struct Entry {
        var key: [UInt8]?
        var value: [UInt8]
        var headers: [KafkaHeader] = []
    }

    /// The events partitions: offset = index.
    private(set) var logs: [[Entry]] = [[]]
    /// The changelog partitions as stored by Kafka (acknowledged, or stored before a crash).
    private(set) var changelogs: [[(key: [UInt8], value: [UInt8]?)]] = [[]]
    /// The group's committed offsets.
    private(set) var committed: [Int32: Int64] = [:]
    private var nextOffsets: [Int64] = [0]
    /// Forwards handed to the producer and not yet stored, in the order produced (stored in that order).
    private var forwards: [(reference: RecordReference, home: Int32, entry: Entry)] = []
    /// Every event forwarded (stored), and the repeats among them (a forward stored again after a crash).
    private(set) var forwardsStored = 0
    /// The engine refused to serve a partition (its exit reason).
    private(set) var refusals: [String] = []
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
        case layout(TopicPartition, generation: UInt64)
    }

    /// Changelog writes in flight, in the order the producer stores them.
    private var changelogAppends: [(kind: Append, key: [UInt8], value: [UInt8]?, partition: Int32)] = []
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

    /// `partitions` events partitions; with more than one, the engine places users by their count.
    init(configuration: RelayEngine.Configuration = .init(), seed: UInt64, partitions: Int32 = 1) {
        var configuration = configuration.withTestTopic
        if partitions > 1 { configuration.layout = PartitionLayout(partitionCount: partitions) }
        self.configuration = configuration
        engine = RelayEngine(configuration: self.configuration)
        random = SeededGenerator(seed: seed)
        logs = Array(repeating: [], count: Int(partitions))
        changelogs = Array(repeating: [], count: Int(partitions))
        nextOffsets = Array(repeating: 0, count: Int(partitions))
        perform(engine.assigned(allPartitions, at: now.monotonic))
    }

    var partitionCount: Int32 { Int32(logs.count) }

    var allPartitions: [TopicPartition] { (0..<partitionCount).map { TopicPartition(Self.events.topic, $0) } }

    /// A producer writes `value` to `partition` (its partitioner's choice, right or wrong).
    mutating func produce(_ value: [UInt8], key: String? = nil, partition: Int32 = 0) {
        logs[Int(partition)].append(Entry(key: key.map { Array($0.utf8) }, value: value))
    }

    // MARK: Driving

    /// Random steps: consume, complete, tick, commit.
    mutating func step() {
        switch Int(random.next() % 10) {
        case 0...3 where hasUnconsumed:
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
            let steps = Int(random.next() % UInt64(max(1, 4 * logs.map(\.count).reduce(0, +)))) + 1
            for _ in 0..<steps { step() }
            crash()
        }
    }

    /// Consumes everything and lets every completion and gap deadline pass.
    mutating func processAll() {
        while hasUnconsumed || !completions.isEmpty || !changelogAppends.isEmpty || !forwards.isEmpty || engine.nextDeadline != nil {
            if hasUnconsumed && random.next() % 2 == 0 {
                consumeNext()
            } else if !completions.isEmpty || !changelogAppends.isEmpty || !forwards.isEmpty {
                completeOne()
            } else if hasUnconsumed {
                consumeNext()
            } else {
                now += 3_000
                perform(engine.tick(now: now))
            }
        }
        perform(engine.commitDue(now: now))
    }

    mutating func runToEnd() { processAll() }

    /// Whether a partition has records not consumed yet.
    private var hasUnconsumed: Bool { logs.indices.contains { nextOffsets[$0] < Int64(logs[$0].count) } }

    /// The next record of a random partition that has one.
    private mutating func consumeNext() {
        let ready = logs.indices.filter { nextOffsets[$0] < Int64(logs[$0].count) }
        let partition = ready[Int(random.next() % UInt64(ready.count))]
        let offset = nextOffsets[partition]
        let record = logs[partition][Int(offset)]
        let message = KafkaMessage(topic: Self.events.topic, partition: Int32(partition), offset: offset, key: record.key, value: record.value,
                                   headers: record.headers)
        nextOffsets[partition] += 1
        perform(engine.consumed(message, now: now))
    }

    private mutating func completeOne() {
        if !forwards.isEmpty && random.next() % 3 == 0 {
            storeFirstForward()
            return
        }
        if !changelogAppends.isEmpty && (completions.isEmpty || random.next() % 2 == 0) {
            storeFirstAppend()
            return
        }
        if completions.isEmpty && !forwards.isEmpty {
            storeFirstForward()
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
        changelogs[Int(append.partition)].append((append.key, append.value))
        switch append.kind {
        case .change(let token): perform(engine.changelogged(token, now: now))
        case .marker(let handOver): perform(engine.progressStored(handOver: handOver, now: now))
        case .layout(let partition, let generation): perform(engine.layoutStored(partition, generation: generation, now: now))
        }
    }

    /// The forwards' producer stores the first forward in flight at its home partition and reports it.
    private mutating func storeFirstForward() {
        let forward = forwards.removeFirst()
        store(forward)
        perform(engine.published(forward.reference, now: now))
    }

    private mutating func store(_ forward: (reference: RecordReference, home: Int32, entry: Entry)) {
        logs[Int(forward.home)].append(forward.entry)
        forwardsStored += 1
    }

    /// Changelog partition `partition` as a restore reads it.
    private func restoredChangelog(_ partition: Int32) -> RestoredChangelog {
        var changelog = RestoredChangelog()
        for record in changelogs[Int(partition)] { changelog.add(key: record.key[...], value: record.value?[...]) }
        return changelog
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
            case .appendChangelog(let user, let record, let partition, let token):
                changelogAppends.append((.change(token: token), Array(user.utf8), record.encoded(), partition))
            case .send(let dispatch):
                completions.append(.sent(dispatch))
            case .writeProgress(let marker, let partition, let at, let handOver):
                changelogAppends.append((.marker(handOver: handOver), ProgressMarker.key, marker.encoded(at: at), partition))
            case .writeLayout(let layout, let partition, let generation):
                changelogAppends.append((.layout(partition, generation: generation), PartitionLayout.recordKey, layout.encoded(), partition.partition))
            case .restore(let partition, let generation):
                perform(engine.restored(partition, generation: generation, changelog: restoredChangelog(partition.partition), now: now))
            case .readLayoutOfPartitionZero(let partition, let generation):
                perform(engine.layoutProbed(partition, generation: generation, partitionZero: restoredChangelog(0), now: now))
            case .forwardEvent(let message, let user, let home, let reference):
                let headers = message.headers.filter { $0.key != ForwardSource.header }
                    + [KafkaHeader(key: ForwardSource.header, value: ForwardSource(partition: reference.partition.partition, offset: reference.offset).headerValue)]
                forwards.append((reference, home, Entry(key: Array(user.utf8), value: message.value.map(Array.init) ?? [], headers: headers)))
            case .commit(let offsets, let request):
                let refused = refuseCommits || (handingOver && refuseHandOverCommit) || refusingFrozenOwner
                if !refused { for (partition, offset) in offsets { committed[partition.partition] = offset } }
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
            case .exit(_, let reason):
                refusals.append(reason)
            case .pause, .resume, .cancelSends, .loadDeviceRegistry, .permitSends:
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
        for append in changelogAppends.prefix(stored) { changelogs[Int(append.partition)].append((append.key, append.value)) }
        changelogAppends = []
        // The forwards' producer stored a prefix of its forwards too (one producer, in order).
        let forwarded = forwards.isEmpty ? 0 : Int(random.next() % UInt64(forwards.count + 1))
        for forward in forwards.prefix(forwarded) { store(forward) }
        forwards = []
        completions = []
        restart()
    }

    /// The partition is revoked after everything in flight finished; its commit may be refused.
    mutating func handOver(commitRefused: Bool) {
        refuseHandOverCommit = commitRefused
        handingOver = true
        if !handedOver { perform(engine.revokeRequested(allPartitions, now: now)) }
        // Nothing in flight: the hand-over waits only for its marker, stored behind the writes before it.
        while !handedOver {
            precondition(!changelogAppends.isEmpty, "nothing in flight: the hand-over waits only for its marker")
            storeFirstAppend()
        }
        handedOver = false
        handingOver = false
        refuseHandOverCommit = false
        // The revoke flushes the producers before it gives the partitions up.
        while !changelogAppends.isEmpty {
            let append = changelogAppends.removeFirst()
            changelogs[Int(append.partition)].append((append.key, append.value))
        }
        for forward in forwards { store(forward) }
        forwards = []
        completions = []
        restart()
    }

    /// The partition is revoked in the middle of the work: nothing new is sent, what is in flight
    /// finishes (`settle` of it), then the markers and the commit, then the next owner takes over.
    mutating func handOverMidway(steps: Int) {
        for _ in 0..<steps { step() }
        refuseHandOverCommit = refuseCommits
        handingOver = true
        perform(engine.revokeRequested(allPartitions, now: now))
        while !handedOver || !changelogAppends.isEmpty {
            completeOne()
        }
        handOver(commitRefused: refuseCommits)
    }

    /// Consumes everything and completes what can complete, with no time passing (gaps stay held).
    mutating func processWithoutTime() {
        while hasUnconsumed || completable {
            if hasUnconsumed && (random.next() % 2 == 0 || !completable) {
                consumeNext()
            } else {
                completeOne()
            }
        }
    }

    /// Whether a completion other than a slow device's answer is waiting.
    private var completable: Bool {
        !changelogAppends.isEmpty || !forwards.isEmpty || completions.contains { completion in
            if case .sent(let dispatch) = completion { return !slowTokens.contains(dispatch.notification.payload.token) }
            return true
        }
    }

    /// A graceful hand-over now, whatever is in flight: what can finish finishes, time passes
    /// until the revoke's deadline if a slow device holds it, then the next owner takes over.
    mutating func gracefulHandOver() {
        refuseHandOverCommit = refuseCommits
        handingOver = true
        perform(engine.revokeRequested(allPartitions, now: now))
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
        nextOffsets = logs.indices.map { committed[Int32($0)] ?? 0 }
        perform(engine.assigned(allPartitions, at: now.monotonic))
    }

    // MARK: Freezes

    /// Where a frozen owner's Kafka writes in flight at the freeze end up (``freezeAndThaw(newOwnerSteps:inFlightWrites:)``).
    enum FrozenWrites: Equatable {
        case storedBeforeFreeze
        case fencedByTransactions
        case storedAfterTakeover
    }

    /// The owner freezes (SIGSTOP, a node pause) past its session timeout: the group gives the
    /// partition to a new owner, which works `newOwnerSteps` random steps; then the frozen one
    /// thaws and acts on everything it had queued (acknowledgements, APNs' answers, its timers)
    /// while the group refuses its commits, until librdkafka reports the partition lost. What the
    /// frozen owner had handed to the producer and to APNs before the freeze got there before the
    /// freeze; anything it sends or writes after the thaw is recorded like any other send or write.
    /// Needs a configuration with a session timeout (the ownership lease).
    ///
    /// `inFlightWrites` says where the frozen owner's Kafka writes in flight at the freeze (changelog appends, markers,
    /// forwards, results) end up: stored before the freeze; refused after the new owner's restore, as Kafka
    /// transactions do (the new owner's initialisation fences the frozen producer and aborts its transaction; the
    /// frozen owner then exits 1 at its first write, so it never thaws into sending); or stored after the new
    /// owner's steps, as a network cut holds them without transactions.
    mutating func freezeAndThaw(newOwnerSteps: Int, inFlightWrites: FrozenWrites = .storedBeforeFreeze) {
        precondition(configuration.sessionTimeout != nil, "a freeze is survived through the ownership lease")
        let frozenEngine = engine
        let frozenAppends = changelogAppends
        let frozenForwards = forwards
        let frozenCompletions = completions
        if inFlightWrites == .storedBeforeFreeze {
            for append in frozenAppends { changelogs[Int(append.partition)].append((append.key, append.value)) }
            for forward in frozenForwards { store(forward) }
        }
        forwards = []
        for case .sent(let dispatch) in frozenCompletions { record(dispatch) }
        changelogAppends = []
        completions = []
        now += 45_000
        restart()
        for _ in 0..<newOwnerSteps { step() }
        switch inFlightWrites {
        case .storedBeforeFreeze:
            break
        case .fencedByTransactions:
            return
        case .storedAfterTakeover:
            for append in frozenAppends { changelogs[Int(append.partition)].append((append.key, append.value)) }
            for forward in frozenForwards { store(forward) }
        }

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
            case .layout(let partition, let generation): perform(engine.layoutStored(partition, generation: generation, now: now))
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
        perform(engine.revokeRequested(allPartitions, id: 1, lost: true, now: now))
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

    /// The user's count in the stored changelog (the last record for the user at its home partition).
    func finalBadge(of user: String) -> Int64? {
        let home = configuration.layout?.home(of: user) ?? 0
        guard let value = changelogs[Int(home)].last(where: { $0.key == Array(user.utf8) })?.value else { return nil }
        return try? BadgeStateRecord.decode(value).badge
    }

    /// Users whose latest changelog record lives outside their home partition (their count split or stranded).
    var usersCountedAwayFromHome: [String] {
        guard let layout = configuration.layout else { return [] }
        var away: Set<String> = []
        for (partition, changelog) in changelogs.enumerated() {
            var latest: [[UInt8]: [UInt8]?] = [:]
            for record in changelog where record.key != ProgressMarker.key && record.key != PartitionLayout.recordKey { latest[record.key] = record.value }
            for (key, value) in latest where value != nil {
                let user = String(decoding: key, as: UTF8.self)
                if layout.home(of: user) != Int32(partition) { away.insert(user) }
            }
        }
        return away.sorted()
    }

    // MARK: Growth

    /// The partition count grows to `count` as an operator does it: every relay stopped (a graceful hand-over), both
    /// topics grown in place (committed offsets kept), `apns-relay partitions migrate` run (its plan, each write
    /// stored), the relay started again over the new layout.
    mutating func grow(to count: Int32) {
        precondition(count > partitionCount)
        gracefulHandOver()
        let added = Int(count - partitionCount)
        logs += Array(repeating: [], count: added)
        changelogs += Array(repeating: [], count: added)
        nextOffsets += Array(repeating: 0, count: added)
        let layout = PartitionLayout(partitionCount: count)
        let plan = LayoutMigration(changelogs: (0..<count).map(restoredChangelog), layout: layout, committed: committed, now: now.epoch)
        for move in plan.moves {
            if !move.written { changelogs[Int(move.to)].append((Array(move.user.utf8), move.record.encoded())) }
            changelogs[Int(move.from)].append((Array(move.user.utf8), nil))
        }
        for partition in plan.layoutRecords { changelogs[Int(partition)].append((PartitionLayout.recordKey, plan.layoutRecordValue)) }
        configuration.layout = layout
        restart()
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
