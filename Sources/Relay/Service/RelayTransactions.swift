public import Kafka
import RelayCore

/// A transactional producer, through what the relay uses of it (``KafkaTransactionalProducer`` in production): the
/// relay's one, made and initialised as the relay starts.
public protocol RelayTransactionalProducer: RelayRecordProducing {
    func beginTransaction() async throws
    /// Waits until every record produced so far has its delivery report, at most `timeout`.
    func flush(timeout: Duration) async throws
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

/// The relay's Kafka transactions (`kafka.transactions: on`): one transactional producer for the whole relay and
/// one transaction at a time, which holds everything written for the events partitions it owns (badge state,
/// markers, layout records, results, failed tokens, dead letters, forwards) and commits with their input offsets,
/// sent with the consumer's group metadata. Pure: the driver performs the calls and reports their ends.
///
/// Fencing (Kafka's KIP-447, as Kafka Streams' exactly-once v2): every commit carries offsets of the partitions whose
/// records it holds, and the broker refuses a member's offsets once the group has moved to another generation, so a
/// relay that lost its partitions (cut off, frozen, expelled) cannot commit anything written for them; its
/// transaction is aborted. Its records reach the broker before its offsets are sent (a flush first), so a
/// transaction that commits had every record stored while its member still held the partitions: a new owner's restore,
/// which waits for every transaction open on its changelog partition to resolve, then sees all of it.
///
/// A commit starts at once while the transaction holds badge changes (their notifications wait for it) or the
/// engine's commit requests, else every ``RelayServiceConfiguration/TransactionSettings/interval``; records asked for
/// while one commits wait for the next transaction, so under load each commit carries what came while the last one
/// ran. A transaction that fails is aborted (or its producer replaced) and its records go into the next one, less any
/// the broker refused (their effects are handed back to the engine): nothing is redone. Only when the group moved on
/// (the broker refused the offsets for a stale member or generation) or a replay failed too do the partitions whose
/// records it held start again from what was committed; the others go on.
struct RelayTransactions {
    /// What a transaction holds.
    struct Contents: Equatable {
        /// The events partitions whose records it holds.
        var partitions: Set<TopicPartition> = []
        /// The changelog appends (their tokens) produced in it: their notifications go to APNs once it commits.
        var badgeChanges: [UInt64] = []
    }

    /// The engine's commit requests waiting for the next commit, with the offsets they ask for.
    struct Requests: Equatable {
        var offsets: [TopicPartition: Int64] = [:]
        var ids: [UInt64: [TopicPartition: Int64]] = [:]

        var isEmpty: Bool { ids.isEmpty && offsets.isEmpty }
    }

    /// A commit to start: the transaction's contents, and the offsets it sends (through `producer`), beginning a
    /// transaction first when `begin` (offsets alone).
    struct Commit: Equatable {
        var contents: Contents
        var offsets: [TopicPartition: Int64]
        var requests: [UInt64: [TopicPartition: Int64]]
        var begin: Bool
    }

    /// Where the relay's transaction is.
    enum State: Equatable {
        /// No producer yet: it is being made and initialised (at the start, or after one failed for good).
        case unready
        /// No transaction open.
        case idle
        /// A transaction began and holds these records.
        case open(Contents)
        /// This commit is under way; records asked for meanwhile wait for the next transaction.
        case committing(Commit)
        /// A transaction failed: it is being aborted (or its producer replaced) before the next one begins.
        case recovering
    }

    /// How a record of an events partition goes out.
    enum Route: Equatable {
        /// The partition is not the relay's (not assigned, or starting again): the record fails.
        case notOwned
        /// A commit or a recovery is under way, or the producer is not ready: it waits for the next transaction.
        case wait
        /// Produce it in the open transaction, beginning it first when `begin`.
        case produce(begin: Bool)
    }

    /// What a commit's end brings.
    struct Committed: Equatable {
        /// The engine's requests it answered, with their offsets (`nil`: not committed).
        var answered: [(request: UInt64, offsets: [TopicPartition: Int64]?)] = []
        /// The changelog appends it made visible (their tokens).
        var changelogged: [UInt64] = []
        /// The partitions whose records a failed transaction held: they start again from what was committed.
        var redo: Set<TopicPartition> = []

        static func == (lhs: Committed, rhs: Committed) -> Bool {
            lhs.answered.map(\.request) == rhs.answered.map(\.request) && lhs.answered.map(\.offsets) == rhs.answered.map(\.offsets)
                && lhs.changelogged == rhs.changelogged && lhs.redo == rhs.redo
        }
    }

    private(set) var state = State.unready
    /// The engine's requests for the next commit.
    private(set) var requests = Requests()
    /// The partitions the relay owns and serves: records of others fail.
    private(set) var owned: Set<TopicPartition> = []
    /// Per owned partition, the last offset the engine asked to commit for it in its current assignment: a commit
    /// holding the partition's records sends it again when nothing newer is asked, so that every commit carries the
    /// group metadata that fences it.
    private var knownOffsets: [TopicPartition: Int64] = [:]

    /// The producer is initialised: transactions may begin.
    mutating func ready() {
        guard state == .unready else { preconditionFailure("a producer made ready while the transactions are \(state)") }
        state = .idle
    }

    /// The partition is the relay's now (its restore starts), or no longer (handed over, lost, starting again).
    mutating func own(_ partition: TopicPartition) {
        owned.insert(partition)
    }

    mutating func release(_ partition: TopicPartition) {
        owned.remove(partition)
        knownOffsets[partition] = nil
        requests.offsets[partition] = nil
    }

    /// How a record of `partition` goes out now; `.produce` opens the transaction (or adds the partition to it).
    mutating func route(_ partition: TopicPartition) -> Route {
        guard owned.contains(partition) else { return .notOwned }
        switch state {
        case .unready, .committing, .recovering:
            return .wait
        case .idle:
            state = .open(Contents(partitions: [partition]))
            return .produce(begin: true)
        case .open(var contents):
            contents.partitions.insert(partition)
            state = .open(contents)
            return .produce(begin: false)
        }
    }

    /// The transaction ``route(_:)`` said to begin could not begin: none is open.
    mutating func beginFailed() {
        guard case .open = state else { return }
        state = .idle
    }

    /// Changelog append `token` was produced in the open transaction: its notifications wait for its commit.
    mutating func producedBadgeChange(_ token: UInt64) {
        guard case .open(var contents) = state else { return }
        contents.badgeChanges.append(token)
        state = .open(contents)
    }

    /// The engine asks for `offsets` to be committed (request `id`): the next commit carries them, and answers the
    /// request. A request naming a partition the relay does not own is answered at once as not committed (its
    /// owned partitions' offsets still go with the next commit).
    mutating func requestCommit(_ offsets: [TopicPartition: Int64], request id: UInt64) -> Committed {
        var refused = false
        for (partition, offset) in offsets {
            guard owned.contains(partition) else {
                refused = true
                continue
            }
            requests.offsets[partition] = max(requests.offsets[partition] ?? offset, offset)
            knownOffsets[partition] = max(knownOffsets[partition] ?? offset, offset)
        }
        guard !refused else { return Committed(answered: [(id, nil)]) }
        requests.ids[id] = offsets
        return Committed()
    }

    /// The commit to start now, if one is due: while the transaction holds badge changes, or requests wait, at once;
    /// else when `intervalPassed` and it holds anything. `nil` while a commit or recovery is under way.
    mutating func commitDue(intervalPassed: Bool) -> Commit? {
        let contents: Contents
        switch state {
        case .open(let open): contents = open
        case .idle: contents = Contents()
        case .unready, .committing, .recovering: return nil
        }
        let wanted = !contents.badgeChanges.isEmpty || !requests.ids.isEmpty
            || (intervalPassed && (!contents.partitions.isEmpty || !requests.offsets.isEmpty))
        guard wanted else { return nil }
        var offsets = requests.offsets
        for partition in contents.partitions where offsets[partition] == nil {
            offsets[partition] = knownOffsets[partition]
        }
        // A transaction whose partitions have no offset yet still carries the group's metadata.
        if offsets.isEmpty, !contents.partitions.isEmpty, let any = knownOffsets.min(by: { $0.key < $1.key }) {
            offsets[any.key] = any.value
        }
        let commit = Commit(contents: contents, offsets: offsets, requests: requests.ids, begin: state == .idle)
        requests = Requests()
        state = .committing(commit)
        return commit
    }

    /// The commit under way succeeded: its requests are answered with their offsets and its badge changes released.
    mutating func committed() -> Committed {
        guard case .committing(let commit) = state else { preconditionFailure("a commit ended while the transactions are \(state)") }
        state = .idle
        return Committed(answered: commit.requests.keys.sorted().map { ($0, commit.requests[$0]) }, changelogged: commit.contents.badgeChanges)
    }

    /// The transaction under way (committing, or still open) failed: the driver aborts it (or replaces its producer),
    /// then ``recovered(replaced:)``.
    ///
    /// `restart` `false`: the same records go into the next transaction (the driver replays them, less any the
    /// broker refused), and the commit's requests wait for the next commit; nothing is answered. `restart` `true`
    /// (the group moved on, or a replay failed too): the requests are answered as not committed and the partitions
    /// whose records it held start again from what was committed (``Committed/redo``).
    mutating func failed(restart: Bool) -> Committed {
        let contents: Contents
        var commitRequests: [UInt64: [TopicPartition: Int64]] = [:]
        switch state {
        case .committing(let commit):
            contents = commit.contents
            commitRequests = commit.requests
        case .open(let open):
            contents = open
        case .unready, .idle, .recovering:
            preconditionFailure("a transaction failed while the transactions are \(state)")
        }
        state = .recovering
        guard restart else {
            for (id, offsets) in commitRequests {
                requests.ids[id] = offsets
                for (partition, offset) in offsets where owned.contains(partition) {
                    requests.offsets[partition] = max(requests.offsets[partition] ?? offset, offset)
                }
            }
            return Committed()
        }
        var failed = Committed(answered: (Array(commitRequests.keys) + Array(requests.ids.keys)).sorted().map { ($0, nil) })
        failed.redo = contents.partitions.intersection(owned)
        for partition in failed.redo { release(partition) }
        requests.ids = [:]
        return failed
    }

    /// The failed transaction was aborted: the next may begin. `replaced`: its producer was replaced by a new one,
    /// not yet initialised (``ready()`` follows).
    mutating func recovered(replaced: Bool) {
        guard state == .recovering else { preconditionFailure("a recovery ended while the transactions are \(state)") }
        state = replaced ? .unready : .idle
    }

    /// Whether no transaction holding records of `partitions` is open or committing.
    func isSettled(_ partitions: [TopicPartition]) -> Bool {
        switch state {
        case .open(let contents): contents.partitions.isDisjoint(with: partitions)
        case .committing(let commit): commit.contents.partitions.isDisjoint(with: partitions)
        case .unready, .idle, .recovering: true
        }
    }

    /// Whether a transaction is open or committing (the relay's close commits it first when it stops gracefully).
    var isOpen: Bool {
        switch state {
        case .open, .committing: true
        case .unready, .idle, .recovering: false
        }
    }
}
