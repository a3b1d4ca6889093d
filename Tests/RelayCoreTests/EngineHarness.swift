import APNsCore
import KafkaCore
import Testing

@testable import RelayCore

/// Plays the driver's part: runs the engine's effects, completing them in a seeded random
/// order (as Kafka acknowledgements and APNs answers may arrive), and records what a real
/// system would have seen.
struct EngineHarness {
    var engine: RelayEngine
    var random: SeededGenerator
    var now: RelayTime = 1_000_000
    /// Completions not delivered yet.
    var pending: [Completion] = []
    var changelog: [(user: String, record: BadgeStateRecord)] = []
    var changelogQueue: [UInt64] = []
    /// Per token, the badges APNs received, in order.
    var received: [String: [Int64?]] = [:]
    /// Every notification handed to APNs, in send order.
    var sent: [PendingNotification] = []
    var results: [ResultRecord] = []
    var deadLetters: [String] = []
    var failedTokens: [FailedTokenRecord] = []
    var wrongEnvironment: [WrongEnvironmentRecord] = []
    var committed: [TopicPartition: Int64] = [:]
    var progress: [Int32: ProgressMarker] = [:]
    var deadTokens: Set<String> = []
    /// The `timestamp` APNs' 410 for a dead token carries (epoch ms), if any.
    var deadTokenTimestamp: Int64?
    /// Tokens APNs refuses in their own environment and delivers in the other (sandbox).
    var otherEnvironmentTokens: Set<String> = []
    /// The revokes the engine acknowledged (their ids), and the stops it finished (handed over or not).
    var acknowledgedRevokes: [UInt64] = []
    var stops: [Bool] = []
    var cancelled: [TopicPartition] = []
    /// Partitions whose writes the engine stopped (`.stopWrites`), in order.
    var writesStopped: [TopicPartition] = []
    var exits: [(code: Int32, reason: String)] = []
    var registryLoads = 0
    /// Events forwarded to their users' home partitions: the input, the user, the home.
    var forwarded: [(message: KafkaMessage, user: String, home: Int32)] = []
    /// Layout records written, by events partition.
    var layoutsWritten: [(partition: TopicPartition, layout: PartitionLayout)] = []
    /// What a read of changelog partition 0 finds (for an empty partition's layout).
    var changelogOfPartitionZero = RestoredChangelog()

    /// Decides whether a publish fails (and how); `nil` publishes it.
    var failPublish: (RelayEffect) -> PublishFailure? = { _ in nil }
    /// Sends handed to APNs and not answered, and the most there ever were.
    var sendsOutstanding = 0
    var maxSendsOutstanding = 0
    /// APNs does not answer while set (a slow APNs): sends stay outstanding.
    var apnsSilent = false
    /// Kafka acknowledges no result or dead letter while set: they stay pending.
    var holdPublishes = false
    /// The group coordinator refuses commits (this member is gone) while set.
    var refuseCommits = false
    /// The group coordinator never answers commits while set (they are recorded, not answered).
    var commitsUnanswered = false
    /// Commit requests the coordinator did not answer, and every commit asked for.
    var unansweredCommits: [UInt64] = []
    var commitRequests = 0

    enum Completion {
        case published(RecordReference)
        case sent(DeviceDispatch<PendingNotification>)
        case publishFailed(RelayEffect, PublishFailure)
    }

    init(configuration: RelayEngine.Configuration = .init(), seed: UInt64) {
        engine = RelayEngine(configuration: configuration.withTestTopic)
        random = SeededGenerator(seed: seed)
    }

    mutating func run(_ effects: [RelayEffect]) {
        for effect in effects {
            switch effect {
            case .publishResult, .publishDeadLetter, .publishDeadLetterReference, .appendChangelog, .publishFailedToken, .forwardEvent:
                if let failure = failPublish(effect) {
                    pending.append(.publishFailed(effect, failure))
                    continue
                }
            default:
                break
            }
            switch effect {
            case .publishResult(let record, let reference):
                results.append(record)
                pending.append(.published(reference))
            case .publishDeadLetter(_, let error, let reference):
                deadLetters.append(error)
                pending.append(.published(reference))
            case .publishFailedToken(let record, _):
                failedTokens.append(record)
            case .publishWrongEnvironment(let record, _):
                wrongEnvironment.append(record)
            case .appendChangelog(let user, let record, _, let changelogToken):
                changelog.append((user, record))
                // Acknowledged in order, as one producer's deliveries to one partition are.
                changelogQueue.append(changelogToken)
            case .send(let dispatch):
                sendsOutstanding += 1
                maxSendsOutstanding = max(maxSendsOutstanding, sendsOutstanding)
                received[dispatch.notification.token, default: []].append(dispatch.notification.badge)
                sent.append(dispatch.notification.payload)
                pending.append(.sent(dispatch))
            case .writeProgress(let marker, let partition, _, let handOver):
                if let failure = failPublish(effect) {
                    pending.append(.publishFailed(effect, failure))
                    continue
                }
                progress[partition] = marker
                if handOver != nil { run(engine.progressStored(handOver: handOver, now: now)) }
            case .restore(let partition, let generation):
                run(engine.restored(partition, generation: generation, records: [], now: now))
            case .commit(let offsets, let request):
                commitRequests += 1
                if commitsUnanswered {
                    unansweredCommits.append(request)
                    continue
                }
                if !refuseCommits { committed.merge(offsets) { max($0, $1) } }
                run(engine.committed(request: request, offsets: refuseCommits ? nil : offsets, now: now))
            case .publishDeadLetterReference(let reference):
                deadLetters.append(reference.error)
                pending.append(.published(reference.source))
            case .forwardEvent(let message, let user, let home, let reference):
                forwarded.append((message, user, home))
                pending.append(.published(reference))
            case .writeLayout(let layout, let partition, let generation):
                layoutsWritten.append((partition, layout))
                run(engine.layoutStored(partition, generation: generation, now: now))
            case .readLayoutOfPartitionZero(let partition, let generation):
                run(engine.layoutProbed(partition, generation: generation, partitionZero: changelogOfPartitionZero, now: now))
            case .acknowledgeRevoke(let id):
                acknowledgedRevokes.append(id)
            case .stopped(let handedOver):
                stops.append(handedOver)
            case .cancelSends(let partitions):
                cancelled += partitions
            case .stopWrites(let partitions):
                writesStopped += partitions
            case .exit(let code, let reason):
                exits.append((code, reason))
            case .loadDeviceRegistry:
                registryLoads += 1
            case .pause, .resume, .permitSends:
                break
            }
        }
    }

    /// Delivers pending completions in random order until nothing is left.
    mutating func settle() {
        while !deliverable.isEmpty || !changelogQueue.isEmpty {
            if !changelogQueue.isEmpty && (deliverable.isEmpty || random.next() % 2 == 0) {
                let changelogToken = changelogQueue.removeFirst()
                run(engine.changelogged(changelogToken, now: now))
                continue
            }
            let candidates = deliverable
            let index = candidates[Int(random.next() % UInt64(candidates.count))]
            let completion = pending.remove(at: index)
            switch completion {
            case .published(let reference):
                run(engine.published(reference, now: now))
            case .publishFailed(let effect, let failure):
                run(engine.publishFailed(effect, failure: failure, now: now))
            case .sent(let dispatch):
                sendsOutstanding -= 1
                let deviceToken = dispatch.notification.token
                let outcome = deadTokens.contains(deviceToken)
                    ? APNsOutcome.refused(410, .unregistered, timestamp: deadTokenTimestamp)
                    : otherEnvironmentTokens.contains(deviceToken)
                    ? APNsOutcome.delivered(attempts: 2, uniqueID: "log-1", in: .sandbox)
                    : .delivered()
                run(engine.sent(dispatch, outcome: outcome, now: now))
            }
        }
        run(engine.commitDue(now: now))
        // Bulk's share of the records in process is the partitions' started bulk records, never more or fewer: a
        // finish missed would keep bulk set aside for good.
        var started = 0
        for partition in engine.partitions.keys { started += engine.read(partition) { $0.bulkStarted.count } ?? 0 }
        #expect(engine.bulkInProcess == started && started >= 0, "bulk in process \(engine.bulkInProcess), started and unfinished \(started)")
    }

    /// Sends handed to APNs and not answered yet.
    var sendsOnTheWire: [DeviceDispatch<PendingNotification>] {
        pending.compactMap { if case .sent(let dispatch) = $0 { dispatch } else { nil } }
    }

    /// Indices of the completions that may happen now (none of APNs' while it is silent).
    var deliverable: [Int] {
        pending.indices.filter { index in
            if apnsSilent, case .sent = pending[index] { return false }
            if holdPublishes, case .published = pending[index] { return false }
            return true
        }
    }

    /// Lets `milliseconds` pass in ticks of 100 ms, settling after each.
    mutating func advance(by milliseconds: Int64) {
        var left = milliseconds
        while left > 0 {
            let step = min(100, left)
            now += step
            left -= step
            run(engine.tick(now: now))
            settle()
        }
    }

    /// APNs answers `dispatch` (a cancelled send, say) now.
    mutating func answer(_ dispatch: DeviceDispatch<PendingNotification>, _ outcome: APNsOutcome) {
        if let index = pending.firstIndex(where: { if case .sent(let pendingDispatch) = $0 { pendingDispatch.ticket == dispatch.ticket } else { false } }) {
            pending.remove(at: index)
            sendsOutstanding -= 1
        }
        run(engine.sent(dispatch, outcome: outcome, now: now))
    }
}

extension RelayEngine.Configuration {
    /// The configured topic the tests' events fall back on (they name none; a notification without
    /// a topic is refused at fan-out).
    var withTestTopic: Self {
        var configuration = self
        if configuration.defaultTopic == nil { configuration.defaultTopic = "com.example.app" }
        return configuration
    }
}
