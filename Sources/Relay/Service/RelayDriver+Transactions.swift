import Kafka
import RelayCore

/// Why the relay's transaction failed, and what it takes to go on.
struct TransactionFailure: Error, Sendable, CustomStringConvertible {
    let description: String
    /// The producer can make no more transactions (a newer producer of its transactional id fenced it, or its error
    /// is fatal): it is closed and a new one made.
    let producerLost: Bool
    /// The group refused the offsets for a member it no longer has, or of another generation: the partitions may be
    /// another member's now, so what the transaction held is not written again.
    let groupMovedOn: Bool

    init(_ error: any Error) {
        let kafka = error as? KafkaError
        description = kafka.map { "\($0)" } ?? "\(error)"
        producerLost = kafka.map { $0.isFenced || $0.isFatal } ?? false
        groupMovedOn = kafka.map { Self.groupErrors.contains($0.code) } ?? (error is MembershipLost)
    }

    /// ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID.
    static let groupErrors: Set<Int32> = [22, 25, 27, 82]
}

/// The consumer lost its assignment while a transaction was built (or is no member any more): its offsets are not sent.
struct MembershipLost: Error, CustomStringConvertible {
    var description: String { "the consumer lost its partitions to the group while the transaction was built, or left the group" }
}

/// The driver's side of ``RelayTransactions``: the relay's producer made as it starts, commits due on the tick, at
/// once for badge changes and the engine's commit requests, a revoke acknowledged once its partitions' writes are
/// committed, and a failed transaction aborted (or its producer replaced) and its records written again in the next
/// (less those the broker refused, whose effects the engine gets back); when the group has moved on, or a replay
/// failed too, the partitions whose records it held start again from what was committed instead. Only a recovery that
/// keeps failing for `relay.failure_timeout_s` ends the relay (exit 1).
extension RelayDriver {
    /// The id of the revoke the driver hands the engine for partitions that start again: no consumer revoke has it,
    /// so its acknowledgement goes nowhere.
    static let restartRevokeID = UInt64.max

    /// Transactions that may fail in a row, each replayed, before the partitions of the last one start again from what
    /// was committed.
    static let replaysBeforeRestart = 3

    /// Makes and initialises the relay's producer (initialising aborts what an earlier process with the same
    /// transactional id left open); it comes back as an input.
    mutating func startTransactions(in group: inout DiscardingTaskGroup) {
        guard let make = clients.transactionalProducer else { return }
        let bound = configuration.engine.failureTimeout
        group.addTask { [input] in
            do {
                input.yield(.transactionsReady(try await make()))
            } catch {
                input.yield(.transactionsFailed("the transactional producer could not be initialised for \(bound): \(error)"))
            }
        }
    }

    /// The relay's producer is initialised: its delivery reports are followed, and the records that waited for it go.
    mutating func transactionsReady(_ producer: any RelayTransactionalProducer, in group: inout DiscardingTaskGroup) {
        transactionalProducer = producer
        transactions?.ready()
        group.addTask { [input] in
            for await reports in producer.deliveries { input.yield(.deliveries(reports)) }
        }
        outbox.release()
    }

    /// On the tick: the open transaction commits once `relay.transaction_interval_ms` has passed since the last time;
    /// before that, when it holds badge changes or requests.
    mutating func commitTransactionsDue(in group: inout DiscardingTaskGroup) {
        guard transactions != nil, let interval = configuration.transactions?.interval else { return }
        commitTransaction(intervalPassed: ContinuousClock.now - transactionsCommittedAt >= interval, in: &group)
    }

    /// Starts the commit due, if any, in a task of its own: every record delivered first, then the offsets with the
    /// consumer's group metadata, then the commit. While a revoke waits for its partitions' writes, whatever the
    /// transaction holds is due.
    mutating func commitTransaction(intervalPassed: Bool, in group: inout DiscardingTaskGroup) {
        guard let producer = transactionalProducer,
              let commit = transactions?.commitDue(intervalPassed: intervalPassed || !revokesCommitting.isEmpty) else { return }
        if intervalPassed { transactionsCommittedAt = .now }
        let deadline = ContinuousClock.now + configuration.engine.failureTimeout
        let lossesSeen = membershipLossesHandled
        group.addTask { [input, consumer = clients.consumer] in
            let started = ContinuousClock.now
            do {
                if commit.begin { try await producer.beginTransaction() }
                // Stored before the offsets go: a transaction whose offsets the group took had every record stored while
                // its member held the partitions, so a new owner's restore (which waits for open transactions) sees it.
                try await retryingTransactionCall(until: deadline) { try await producer.flush(timeout: $0) }
                if !commit.offsets.isEmpty {
                    // A loss the engine had not seen when the transaction was built: it may hold writes for partitions
                    // that are another member's now, and the consumer's metadata may be a new generation's already.
                    // No member (the consumer closed): nothing may be committed for the group.
                    guard consumer.membershipLosses == lossesSeen, let metadata = consumer.transactionGroupMetadata() else { throw MembershipLost() }
                    try await retryingTransactionCall(until: deadline) {
                        try await producer.sendOffsetsToTransaction(commit.offsets, groupMetadata: metadata, timeout: $0)
                    }
                }
                try await retryingTransactionCall(until: deadline) { try await producer.commitTransaction(timeout: $0) }
                input.yield(.transactionCommitted(failure: nil, took: .now - started))
            } catch {
                input.yield(.transactionCommitted(failure: TransactionFailure(error), took: .now - started))
            }
        }
    }

    /// The engine's commit request: its offsets go with the next commit, which starts now if none is under way.
    mutating func requestTransactionalCommit(_ offsets: [TopicPartition: Int64], request: UInt64, in group: inout DiscardingTaskGroup) {
        guard let refused = transactions?.requestCommit(offsets, request: request) else { return }
        answer(refused.answered, now: now(), in: &group)
        commitTransaction(intervalPassed: false, in: &group)
    }

    /// The commit under way ended: its records that waited go into the next transaction, the requests it completes are
    /// answered, its badge changes' notifications go out, and revokes waiting for it are acknowledged. A failure is
    /// recovered from.
    mutating func transactionCommitted(failure: TransactionFailure?, now: RelayTime, in group: inout DiscardingTaskGroup) {
        guard transactions != nil else { return }
        if let failure {
            recover(from: failure, now: now, in: &group)
            return
        }
        guard let committed = transactions?.committed() else { return }
        transactionFailuresInARow = 0
        transactionsFailingSince = nil
        outbox.transactionCommitted()
        outbox.release()
        answer(committed.answered, now: now, in: &group)
        for token in committed.changelogged {
            spans?.applied(token)
            engine.changelogged(token, now: now, into: &effects)
            executeEffects(in: &group)
        }
        acknowledgeSettledRevokes(now: now, in: &group)
        // Requests and badge changes that came while it committed.
        commitTransaction(intervalPassed: false, in: &group)
    }

    /// A record was refused because the open transaction must be aborted (or its producer was fenced): it is.
    mutating func openTransactionBroke(_ failure: TransactionFailure, now: RelayTime, in group: inout DiscardingTaskGroup) {
        guard case .open = transactions?.state else { return }
        metrics.recordBrokenTransaction()
        recover(from: failure, now: now, in: &group)
    }

    /// Aborts the failed transaction, or replaces its producer when it cannot go on. Its records go into the next
    /// transaction; when the group moved on (or this is a replay that failed too), its partitions start again from
    /// what was committed instead. The outcome comes back as an input.
    private mutating func recover(from failure: TransactionFailure, now: RelayTime, in group: inout DiscardingTaskGroup) {
        transactionFailuresInARow += 1
        let failingSince = transactionsFailingSince ?? .now
        transactionsFailingSince = failingSince
        if ContinuousClock.now - failingSince > configuration.engine.failureTimeout {
            execute([.exit(code: 1, reason: "no transaction committed for \(configuration.engine.failureTimeout) while they kept failing: \(failure)")],
                    in: &group)
            return
        }
        // A replay may fail once more without anything new being wrong: after a refused record, librdkafka bumps the
        // producer's epoch only at the abort that follows the next failure (its sequence numbers skip the refused one).
        let restart = failure.groupMovedOn || transactionFailuresInARow > Self.replaysBeforeRestart
        guard let failed = transactions?.failed(restart: restart) else { return }
        if restart {
            logger.warning("the relay's transaction failed: aborting it; the partitions it held start again from what was committed",
                           metadata: ["error": "\(failure)", "partitions": "\(failed.redo.sorted())"])
            outbox.dropTransaction()
            answer(failed.answered, now: now, in: &group)
            restartFromCommitted(failed.redo, now: now, in: &group)
        } else {
            logger.warning("the relay's transaction failed: aborting it; its records go into the next one", metadata: ["error": "\(failure)"])
            outbox.replayTransaction()
        }
        guard let producer = transactionalProducer else { preconditionFailure("a transaction failed without a producer") }
        let replace = failure.producerLost
        if replace { transactionalProducer = nil }
        let deadline = ContinuousClock.now + configuration.engine.failureTimeout
        let bound = configuration.engine.failureTimeout
        group.addTask { [input, make = clients.transactionalProducer] in
            if !replace {
                do {
                    try await retryingTransactionCall(until: deadline) { try await producer.abortTransaction(timeout: $0) }
                    input.yield(.transactionRecovered(replacement: nil))
                    return
                } catch {
                    // An abort that cannot be made: the producer is replaced, which aborts what it left open.
                }
            }
            await producer.close(timeout: .zero)
            do {
                guard let make else { preconditionFailure("transactions without a way to make their producer") }
                input.yield(.transactionRecovered(replacement: try await make()))
            } catch {
                input.yield(.transactionsFailed("the relay's transactional producer could not be made again for \(bound): \(error)"))
            }
        }
    }

    /// The failed transaction is over: aborted (`replacement` `nil`), or its producer replaced by `replacement`.
    mutating func transactionRecovered(replacement: (any RelayTransactionalProducer)?, in group: inout DiscardingTaskGroup) {
        transactions?.recovered(replaced: replacement != nil)
        if let replacement {
            transactionsReady(replacement, in: &group)
        } else {
            outbox.release()
        }
        commitTransaction(intervalPassed: false, in: &group)
    }

    /// These partitions start again from what was committed (their transaction failed): the engine drops their
    /// state as for a lost revoke, nothing of theirs is produced, and the consumer reads them again from their
    /// committed offsets, announcing it (``KafkaConsumerEvent/partitionsRewound(_:)``), when the engine restores them.
    private mutating func restartFromCommitted(_ partitions: Set<TopicPartition>, now: RelayTime, in group: inout DiscardingTaskGroup) {
        guard !partitions.isEmpty else { return }
        let leaving = partitions.sorted()
        outbox.forget(partitions, eventsTopic: configuration.eventsTopic)
        execute(engine.revokeRequested(leaving, id: Self.restartRevokeID, lost: true, now: now), in: &group)
        let deadline = ContinuousClock.now + configuration.engine.failureTimeout
        group.addTask { [input, consumer = clients.consumer, logger] in
            while true {
                do {
                    try await consumer.rewind(leaving)
                    return
                } catch {
                    guard ContinuousClock.now < deadline, !Task.isCancelled else {
                        input.yield(.transactionsFailed("\(leaving) could not be read again from their committed offsets: \(error)"))
                        return
                    }
                    logger.warning("reading partitions again from their committed offsets failed; trying again", metadata: ["error": "\(error)"])
                    try? await Task.sleep(for: .milliseconds(500))
                }
            }
        }
    }

    /// Lets the consumer give revoke `id`'s partitions to their next owner, once what was written for them is committed.
    mutating func acknowledgeWhenCommitted(_ id: UInt64, now: RelayTime, in group: inout DiscardingTaskGroup) {
        guard let revoke = revokes[id] else { return }
        // A lost revoke's partitions are gone already: nothing of theirs is to be committed.
        if transactions != nil && !revoke.lost && !transactionsSettled(revoke.partitions) {
            revokesCommitting.append(id)
            commitTransaction(intervalPassed: true, in: &group)
        } else {
            acknowledge(id, now: now, in: &group)
        }
    }

    private func transactionsSettled(_ partitions: [TopicPartition]) -> Bool {
        (transactions?.isSettled(partitions) ?? true) && !outbox.hasPending(for: partitions, eventsTopic: configuration.eventsTopic)
    }

    private mutating func acknowledgeSettledRevokes(now: RelayTime, in group: inout DiscardingTaskGroup) {
        let settled = revokesCommitting.filter { transactionsSettled(revokes[$0]?.partitions ?? []) }
        revokesCommitting.removeAll { settled.contains($0) }
        for id in settled { acknowledge(id, now: now, in: &group) }
        if !revokesCommitting.isEmpty { commitTransaction(intervalPassed: true, in: &group) }
    }

    /// Lets the consumer give revoke `id`'s partitions to their next owner.
    mutating func acknowledge(_ id: UInt64, now: RelayTime, in group: inout DiscardingTaskGroup) {
        guard let revoke = revokes.removeValue(forKey: id) else { return }
        releaseTransactions(of: revoke.partitions)
        logger.info("partitions handed over", metadata: ["partitions": "\(revoke.partitions)"])
        revoke.acknowledge()
    }

    /// The partitions are no longer this relay's: nothing more of theirs goes into a transaction.
    mutating func releaseTransactions(of partitions: [TopicPartition]) {
        guard transactions != nil else { return }
        for partition in partitions { transactions?.release(partition) }
        outbox.forget(Set(partitions), eventsTopic: configuration.eventsTopic)
    }

    private mutating func answer(_ answered: [(request: UInt64, offsets: [TopicPartition: Int64]?)], now: RelayTime,
                                 in group: inout DiscardingTaskGroup) {
        for (request, offsets) in answered { execute(engine.committed(request: request, offsets: offsets, now: now), in: &group) }
    }

    /// At the relay's end, what closes the producer within the time it is given: with `committing` (a graceful stop)
    /// an open transaction commits first; then the producer closes. `nil` without a producer.
    func closingTransactions(committing: Bool) -> (@Sendable (Duration) async -> Void)? {
        guard let producer = transactionalProducer else { return nil }
        var commitsFirst = false
        if committing, case .open = transactions?.state { commitsFirst = true }
        return { [commitsFirst] timeout in
            let deadline = ContinuousClock.now + min(timeout, transactionCallTimeout * 2)
            if commitsFirst { try? await producer.commitTransaction(timeout: max(.zero, deadline - .now)) }
            await producer.close(timeout: committing ? max(.zero, deadline - .now) : .zero)
        }
    }
}
