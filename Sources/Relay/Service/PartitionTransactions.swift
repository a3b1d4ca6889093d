public import Kafka
import RelayCore

/// A transactional producer, through what the relay uses of it (``KafkaTransactionalProducer`` in production):
/// one per events partition the relay owns, initialised (which fences the partition's previous owner) before the
/// partition's badge state is read.
public protocol RelayTransactionalProducer: RelayRecordProducing {
    func beginTransaction() async throws
    /// Makes committing `offsets` for the group part of the current transaction, waiting at most `timeout`.
    func sendOffsetsToTransaction(_ offsets: [TopicPartition: Int64], groupMetadata: KafkaConsumerGroupMetadata, timeout: Duration?) async throws
    /// Delivers what is queued, then commits: the transaction's records become visible with its offsets. Waits at
    /// most `timeout` (a retriable timeout goes on where it stopped when called again).
    func commitTransaction(timeout: Duration?) async throws
    func abortTransaction(timeout: Duration?) async throws
    var deliveries: any AsyncSequence<[KafkaTaggedDeliveryReport], Never> { get }
    func close(timeout: Duration) async
}

extension KafkaTransactionalProducer: RelayTransactionalProducer {
    public var deliveries: any AsyncSequence<[KafkaTaggedDeliveryReport], Never> { deliveryReports }
}

/// How long one transactional call of librdkafka may block: a call runs on its producer's blocking queue and
/// cannot be cancelled, so a stop waits for the one under way (and must fit it in the last 5% of its budget); a
/// call that times out is made again (librdkafka goes on where it stopped) until the caller's deadline or its
/// task's cancellation.
let transactionCallTimeout: Duration = .milliseconds(250)

/// Makes `call` (given ``transactionCallTimeout``) again while it fails retriably, until `deadline` or the task's
/// cancellation.
func retryingTransactionCall(until deadline: ContinuousClock.Instant, _ call: (Duration) async throws -> Void) async throws {
    while true {
        do {
            try await call(transactionCallTimeout)
            return
        } catch let error as KafkaError where error.isRetriable && !Task.isCancelled && ContinuousClock.now < deadline {
            continue
        }
    }
}

/// The transactions of the events partitions the relay owns (`kafka.transactions: on`): what each partition's
/// producer is doing, which of the engine's commit requests its next commit answers, and what to do next. Pure:
/// the driver performs the calls and reports their ends.
///
/// Everything the relay writes for a partition (badge state, markers, layout, results, failed tokens, dead letters,
/// forwards) goes through that partition's producer, and the partition's input offsets are committed in the same
/// transaction: a relay that lost the partition (its producer fenced by the next owner's initialisation) can make
/// none of it visible. A transaction commits every ``interval`` while it holds records, and at once for an engine
/// commit request (a hand-over's). Records asked for while their partition commits wait for the next transaction.
struct PartitionTransactions {
    enum Phase: Equatable {
        /// No transaction open.
        case idle
        /// A transaction holds records (or offsets) not committed yet.
        case open
        /// A commit is under way.
        case committing
    }

    struct Partition {
        /// The assignment (the engine's generation) whose restore initialised the producer.
        let generation: UInt64
        let producer: any RelayTransactionalProducer
        var phase = Phase.idle
        /// The offset to commit with the next transaction, and the engine requests its commit answers.
        var offset: Int64?
        var requests: [UInt64] = []
        /// What the commit under way carries.
        var committing: (offset: Int64?, requests: [UInt64]) = (nil, [])
        /// The changelog appends (their tokens) produced in the open transaction, and in the one committing: their
        /// notifications go to APNs once that transaction commits, whenever each record's acknowledgement comes (a
        /// commit's flush delivers its records first, so their reports often arrive after it).
        var badgeChanges: [UInt64] = []
        var committingBadgeChanges: [UInt64] = []
        /// When its last commit began (monotonic milliseconds).
        var commitStartedAt: Int64?
    }

    /// The least time between the starts of two commits of a partition made for its badge changes: under load
    /// the changes that come meanwhile share the next commit (each commit costs broker round trips and a
    /// producer's transactional calls), at the price of at most this much more latency.
    static let badgeChangeCommitSpacingMilliseconds: Int64 = 20

    /// An engine commit request answered: its offsets once every partition in it committed, `nil` when one failed.
    typealias AnsweredRequest = (request: UInt64, offsets: [TopicPartition: Int64]?)

    /// What a commit's end brings: the engine's requests it answered, and the changelog appends it made visible (their
    /// tokens).
    struct Committed {
        var answered: [AnsweredRequest] = []
        var changelogged: [UInt64] = []
    }

    /// An engine commit request (``RelayEffect/commit(_:request:)``) and the partitions whose commit it waits for.
    private struct Request {
        var offsets: [TopicPartition: Int64]
        var left: Set<TopicPartition>
        var failed = false
    }

    /// A commit to start: through `producer`, beginning a transaction first when `begin` (offsets alone).
    struct Commit {
        let partition: TopicPartition
        let generation: UInt64
        let producer: any RelayTransactionalProducer
        let offsets: [TopicPartition: Int64]
        let begin: Bool
    }

    /// How a record for a partition goes out.
    enum Route {
        /// Nobody produces for the partition here (not owned, or not restored yet): the record fails.
        case notOwned
        /// Its partition commits: it waits for the next transaction.
        case wait
        /// Produce it through this producer, after beginning a transaction when `begin`.
        case produce(any RelayTransactionalProducer, begin: Bool)
    }

    private var partitions: [TopicPartition: Partition] = [:]
    private var requests: [UInt64: Request] = [:]

    /// Partitions whose producers were replaced or dropped: the driver closes them.
    private(set) var retired: [any RelayTransactionalProducer] = []

    /// The producer of `partition`'s assignment `generation` is initialised. One of an earlier assignment is
    /// retired; one of an earlier assignment than the partition's current producer is retired at once.
    mutating func ready(_ partition: TopicPartition, generation: UInt64, producer: any RelayTransactionalProducer) {
        if let current = partitions[partition] {
            guard current.generation < generation else {
                retired.append(producer)
                return
            }
            retired.append(current.producer)
        }
        partitions[partition] = Partition(generation: generation, producer: producer)
    }

    /// The partitions' producers are no longer wanted (handed over, lost): retired, and their pending requests failed.
    mutating func drop(_ leaving: [TopicPartition]) -> [AnsweredRequest] {
        for partition in leaving {
            guard let dropped = partitions.removeValue(forKey: partition) else { continue }
            retired.append(dropped.producer)
            for request in dropped.requests + dropped.committing.requests { requests[request]?.failed = true }
        }
        return settle(leaving)
    }

    /// Hands over the retired producers (to close) and forgets them.
    mutating func takeRetired() -> [any RelayTransactionalProducer] {
        defer { retired.removeAll() }
        return retired
    }

    /// How a record of `partition` goes out now.
    mutating func route(_ partition: TopicPartition) -> Route {
        guard let state = partitions[partition] else { return .notOwned }
        switch state.phase {
        case .committing:
            return .wait
        case .open:
            return .produce(state.producer, begin: false)
        case .idle:
            partitions[partition]?.phase = .open
            return .produce(state.producer, begin: true)
        }
    }

    /// `partition`'s transaction could not begin (``route(_:)`` said to begin it): none is open, so nothing is due to
    /// commit for it and the partition's next record begins one again.
    mutating func beginFailed(_ partition: TopicPartition) {
        guard partitions[partition]?.phase == .open else { return }
        partitions[partition]?.phase = .idle
    }

    /// Changelog append `token` was produced in `partition`'s open transaction (after ``route(_:)`` said so): its
    /// notifications wait for that transaction's commit (``committed(_:generation:succeeded:)`` hands it on), which
    /// comes as soon as the badge-change spacing allows, not at the next interval. A notification goes to APNs only
    /// once its badge change is committed, so a change that an aborted transaction took back never shows on a device.
    mutating func producedBadgeChange(_ token: UInt64, of partition: TopicPartition) {
        guard partitions[partition]?.phase == .open else { return }
        partitions[partition]?.badgeChanges.append(token)
    }

    /// The engine asks for `offsets` to be committed (request `request`): each partition's next commit carries its
    /// offset. A partition with no producer fails the request.
    mutating func requestCommit(_ offsets: [TopicPartition: Int64], request: UInt64) -> [AnsweredRequest] {
        var entry = Request(offsets: offsets, left: [])
        for (partition, offset) in offsets {
            guard partitions[partition] != nil else {
                entry.failed = true
                continue
            }
            let highest = max(partitions[partition]?.offset ?? offset, offset)
            partitions[partition]?.offset = highest
            partitions[partition]?.requests.append(request)
            entry.left.insert(partition)
        }
        requests[request] = entry
        return settle([])
    }

    /// The commits to start now: every partition not committing whose transaction holds records, offsets,
    /// requests or badge changes (`onlyRequested`: only those with requests or badge changes).
    ///
    /// A partition commits for its badge changes at most every ``badgeChangeCommitSpacingMilliseconds`` (`now`:
    /// monotonic milliseconds).
    mutating func commitsDue(onlyRequested: Bool = false, now: Int64) -> [Commit] {
        var commits: [Commit] = []
        for (partition, state) in partitions where state.phase != .committing {
            let badgeChangesDue = !state.badgeChanges.isEmpty
                && state.commitStartedAt.map { now - $0 >= Self.badgeChangeCommitSpacingMilliseconds } ?? true
            let wanted = !state.requests.isEmpty || badgeChangesDue
                || (!onlyRequested && (state.phase == .open || state.offset != nil))
            guard wanted else { continue }
            commits.append(Commit(partition: partition, generation: state.generation, producer: state.producer,
                                  offsets: state.offset.map { [partition: $0] } ?? [:], begin: state.phase == .idle))
            partitions[partition]?.committing = (state.offset, state.requests)
            partitions[partition]?.committingBadgeChanges = state.badgeChanges
            partitions[partition]?.badgeChanges = []
            partitions[partition]?.offset = nil
            partitions[partition]?.requests = []
            partitions[partition]?.phase = .committing
            partitions[partition]?.commitStartedAt = now
        }
        return commits
    }

    /// The commit of `partition` (assignment `generation`) ended: the requests it answers, each with its offsets
    /// once all its partitions committed (`nil` when one failed). A commit of a dropped or replaced producer
    /// answers nothing.
    mutating func committed(_ partition: TopicPartition, generation: UInt64, succeeded: Bool) -> Committed {
        guard let state = partitions[partition], state.generation == generation, state.phase == .committing else { return Committed() }
        partitions[partition]?.phase = .idle
        partitions[partition]?.committing = (nil, [])
        partitions[partition]?.committingBadgeChanges = []
        for request in state.committing.requests {
            requests[request]?.left.remove(partition)
            if !succeeded { requests[request]?.failed = true }
        }
        return Committed(answered: settle([]), changelogged: succeeded ? state.committingBadgeChanges : [])
    }

    /// Whether none of `partitions` has a transaction open or committing.
    func isSettled(_ partitions: [TopicPartition]) -> Bool {
        partitions.allSatisfy { self.partitions[$0].map { $0.phase == .idle && $0.offset == nil } ?? true }
    }

    /// Every producer, for the relay's close.
    var producers: [(partition: TopicPartition, producer: any RelayTransactionalProducer, open: Bool)] {
        partitions.map { ($0.key, $0.value.producer, $0.value.phase != .idle) }
    }

    /// The requests now answered (every partition committed, or one failed or left), forgotten once answered.
    private mutating func settle(_ leaving: [TopicPartition]) -> [AnsweredRequest] {
        var answered: [AnsweredRequest] = []
        for (id, var request) in requests {
            request.left.subtract(leaving)
            guard request.left.isEmpty || request.failed else {
                requests[id] = request
                continue
            }
            requests[id] = nil
            answered.append((id, request.failed ? nil : request.offsets))
        }
        return answered.sorted { $0.request < $1.request }
    }
}
