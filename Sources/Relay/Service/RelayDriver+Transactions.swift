import Kafka
import RelayCore

/// Why a partition's transaction failed.
struct TransactionFailure: Error, Sendable, CustomStringConvertible {
    let description: String
    /// A newer producer of the partition's transactional id took over: another relay owns the partition now.
    let fenced: Bool

    init(_ error: any Error) {
        let kafka = error as? KafkaError
        description = kafka.map { "\($0)" } ?? "\(error)"
        fenced = kafka?.isFenced ?? false
    }
}

/// The driver's side of ``PartitionTransactions``: producers as their restores initialise them, commits every
/// `relay.transaction_interval_ms` and for the engine's commit requests, a revoke acknowledged once its
/// partitions' writes are committed. A transaction that fails (fenced, or refused) ends the relay (exit 1):
/// what it carried is redone by the partition's next owner from what was committed.
extension RelayDriver {
    /// The producer of `partition`'s assignment `generation` is initialised: kept when that assignment is the
    /// partition's current one, its delivery reports followed; else closed.
    mutating func transactionReady(_ partition: TopicPartition, generation: UInt64, producer: any RelayTransactionalProducer,
                                   in group: inout DiscardingTaskGroup) {
        if transactions != nil, engine.generation(of: partition) == generation {
            transactions?.ready(partition, generation: generation, producer: producer)
            group.addTask { [input] in
                for await reports in producer.deliveries { input.yield(.deliveries(reports)) }
            }
        } else {
            group.addTask { await producer.close(timeout: .seconds(5)) }
        }
        closeRetiredProducers(in: &group)
    }

    /// On the tick: the open transactions commit once `relay.transaction_interval_ms` has passed since the last time;
    /// before that, those holding badge changes that waited out their spacing, or requests.
    mutating func commitTransactionsDue(in group: inout DiscardingTaskGroup) {
        guard transactions != nil, let interval = configuration.transactions?.interval else { return }
        let intervalPassed = ContinuousClock.now - transactionsCommittedAt >= interval
        if intervalPassed { transactionsCommittedAt = .now }
        commitTransactions(onlyRequested: !intervalPassed, in: &group)
    }

    /// Starts the commits due (`onlyRequested`: only those the engine asked for), each in a task of its own.
    mutating func commitTransactions(onlyRequested: Bool, in group: inout DiscardingTaskGroup) {
        let monotonic = now().monotonic
        guard let commits = transactions?.commitsDue(onlyRequested: onlyRequested, now: monotonic), !commits.isEmpty else { return }
        let metadata = clients.consumer.transactionGroupMetadata() ?? KafkaConsumerGroupMetadata(groupID: configuration.groupID)
        let deadline = ContinuousClock.now + configuration.engine.failureTimeout
        for commit in commits {
            group.addTask { [input] in
                let started = ContinuousClock.now
                do {
                    if commit.begin { try await commit.producer.beginTransaction() }
                    if !commit.offsets.isEmpty {
                        try await retryingTransactionCall(until: deadline) {
                            try await commit.producer.sendOffsetsToTransaction(commit.offsets, groupMetadata: metadata, timeout: $0)
                        }
                    }
                    try await retryingTransactionCall(until: deadline) { try await commit.producer.commitTransaction(timeout: $0) }
                    input.yield(.transactionCommitted(commit.partition, generation: commit.generation, failure: nil, took: .now - started))
                } catch {
                    input.yield(.transactionCommitted(commit.partition, generation: commit.generation, failure: TransactionFailure(error),
                                                      took: .now - started))
                }
            }
        }
    }

    /// The engine's commit request: its offsets go with their partitions' next transactions, which commit now.
    mutating func requestTransactionalCommit(_ offsets: [TopicPartition: Int64], request: UInt64, in group: inout DiscardingTaskGroup) {
        guard let answered = transactions?.requestCommit(offsets, request: request) else { return }
        answer(answered, now: now(), in: &group)
        commitTransactions(onlyRequested: true, in: &group)
    }

    /// A commit of `partition` ended: its records that waited go into the next transaction, the engine's requests
    /// it completes are answered, and revokes waiting for it are acknowledged. A failure of the partition's current
    /// producer ends the relay.
    mutating func transactionCommitted(_ partition: TopicPartition, generation: UInt64, failure: TransactionFailure?, now: RelayTime,
                                       in group: inout DiscardingTaskGroup) {
        guard let committed = transactions?.committed(partition, generation: generation, succeeded: failure == nil) else { return }
        if let failure, engine.generation(of: partition) == generation {
            let reason = failure.fenced
                ? "the transactions of \(partition) were fenced: another relay owns the partition now (\(failure))"
                : "a transaction of \(partition) failed: \(failure)"
            execute([.exit(code: 1, reason: reason)], in: &group)
            return
        }
        outbox.release(partition)
        answer(committed.answered, now: now, in: &group)
        for token in committed.changelogged {
            spans?.applied(token)
            engine.changelogged(token, now: now, into: &effects)
            executeEffects(in: &group)
        }
        let settled = revokesCommitting.filter { transactions?.isSettled(revokes[$0]?.partitions ?? []) ?? true }
        revokesCommitting.removeAll { settled.contains($0) }
        for id in settled { acknowledge(id, now: now, in: &group) }
        // Requests that came while it committed.
        commitTransactions(onlyRequested: true, in: &group)
    }

    /// Lets the consumer give revoke `id`'s partitions to their next owner; their producers are closed.
    mutating func acknowledge(_ id: UInt64, now: RelayTime, in group: inout DiscardingTaskGroup) {
        guard let revoke = revokes.removeValue(forKey: id) else { return }
        dropTransactions(of: revoke.partitions, now: now, in: &group)
        logger.info("partitions handed over", metadata: ["partitions": "\(revoke.partitions)"])
        revoke.acknowledge()
    }

    /// The partitions are no longer this relay's: their producers close (a transaction left open is aborted), their
    /// records that waited fail, the requests waiting for them fail.
    mutating func dropTransactions(of partitions: [TopicPartition], now: RelayTime, in group: inout DiscardingTaskGroup) {
        guard let answered = transactions?.drop(partitions) else { return }
        for partition in partitions {
            for effect in outbox.dropWaiting(partition) {
                execute(engine.publishFailed(effect, failure: .other("\(partition) is no longer this relay's"), now: now), in: &group)
            }
        }
        answer(answered, now: now, in: &group)
        closeRetiredProducers(in: &group)
    }

    private mutating func answer(_ answered: [PartitionTransactions.AnsweredRequest], now: RelayTime,
                                 in group: inout DiscardingTaskGroup) {
        for (request, offsets) in answered { execute(engine.committed(request: request, offsets: offsets, now: now), in: &group) }
    }

    /// Closes the producers no longer used, aborting what they left open.
    private mutating func closeRetiredProducers(in group: inout DiscardingTaskGroup) {
        guard let retired = transactions?.takeRetired(), !retired.isEmpty else { return }
        group.addTask {
            for producer in retired {
                try? await producer.abortTransaction(timeout: transactionCallTimeout)
                await producer.close(timeout: transactionCallTimeout)
            }
        }
    }

    /// At the relay's end: with `committing` (a graceful stop) an open transaction commits first, within `timeout`;
    /// then every producer closes.
    mutating func closeTransactions(committing: Bool, timeout: Duration) async {
        guard let transactions else { return }
        let deadline = ContinuousClock.now + min(timeout, transactionCallTimeout * 2)
        // Together: each may first wait for a call under way on its blocking queue.
        await withDiscardingTaskGroup { group in
            for (_, producer, open) in transactions.producers {
                group.addTask {
                    if committing && open { try? await producer.commitTransaction(timeout: max(.zero, deadline - .now)) }
                    await producer.close(timeout: committing ? max(.zero, deadline - .now) : .zero)
                }
            }
            for producer in transactions.retired {
                group.addTask { await producer.close(timeout: .zero) }
            }
        }
    }
}
