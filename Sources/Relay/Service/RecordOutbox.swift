import DequeModule
import Kafka
import RelayCore

/// The records the engine asked for, on their way to their producers, and what each one's delivery report
/// finishes. A record is produced under a tag (a slot of this table) and waits here, a few words, until its
/// report comes back in a batch of its producer's ``RelayRecordProducer/deliveries``: nothing is allocated per
/// record for its report, and a poll's reports reach the loop as one input.
struct RecordOutbox {
    /// A record for a producer, with the effect it carries out and the input its delivery brings.
    private struct Queued {
        var record: KafkaRecord
        var effect: RelayEffect
        var onSuccess: RelayService.Delivery
        /// Produced in an aborted transaction whose report had told the engine already: a replay's report tells it
        /// nothing more.
        var reportedBefore = false
        /// Its report failed: the engine has its effect back (a substitute, or a retry), so a replay leaves it out.
        var failed = false
    }

    /// What a produced record's report finishes.
    struct Awaiting: Sendable {
        /// The effect the record carries out (handed back to the engine when it fails).
        var effect: RelayEffect
        /// What its delivery tells the engine.
        var onSuccess: RelayService.Delivery
        /// Its partition starts again from what was committed: its report finishes nothing.
        var forgotten = false
        /// Its place among the records of the relay's transaction (``transactionRecords``), if it is in it.
        var transactionIndex: Int?
        /// A replayed record whose first report told the engine already (``Queued/reportedBefore``).
        var reportedBefore = false
    }

    /// Records asked for while the inbox's batch is handled, in order: produced at its end.
    private var queued = Deque<Queued>()
    /// Records of events partitions asked for while the relay's transaction committed (or recovered), in order: they
    /// go into the next transaction (``release()``).
    private var waiting = Deque<Queued>()
    /// Produced records awaiting their reports; a record's tag is its slot. A slot is used again once its report
    /// is in (librdkafka reports each record once), so the table holds at most the records in flight at the
    /// busiest moment, and a report finds its record with no hashing, whatever order the partitions answer in.
    private var awaiting: [Awaiting?] = []
    private var freeSlots: [Int] = []
    /// The records produced in the relay's transaction (open or committing), kept until it commits: an aborted one's
    /// go into the next (``replayTransaction()``).
    private var transactionRecords: [Queued] = []

    /// Queues `record` for the batch's end (``produceQueued(via:transactions:producer:eventsTopic:failed:)``).
    mutating func queue(_ record: KafkaRecord, for effect: RelayEffect, onSuccess: RelayService.Delivery) {
        queued.append(Queued(record: record, effect: effect, onSuccess: onSuccess))
    }

    /// Hands the queued records to their producers, in the order the engine asked for them; `failed` gets
    /// each one a producer refused outright (it never gets a report).
    ///
    /// With `transactions`, a record of an events partition (``RelayEffect/transactionPartition(eventsTopic:)``) goes
    /// into the relay's transaction through `producer` (begun first when none is open), or waits while it commits;
    /// one of a partition the relay does not own fails. Records of no partition go through `clients.producer`.
    /// Returns the error that broke the open transaction, if one did (a record refused because the transaction must be
    /// aborted, or the producer fenced): the records refused from then on wait for the next transaction, and the
    /// driver aborts this one.
    mutating func produceQueued(via clients: RelayKafkaClients, transactions: inout RelayTransactions?,
                                producer transactional: (any RelayTransactionalProducer)?, eventsTopic: String,
                                failed: (RelayEffect, PublishFailure) -> Void) async -> (any Error)? {
        var broken: (any Error)?
        // Each moved out, not copied (a copy retains what it carries); the storage serves the next batch.
        while let next = queued.popFirst() {
            var producer: any RelayRecordProducing = Self.producer(of: next.effect, in: clients)
            var inTransaction = false
            if transactions != nil, let partition = next.effect.transactionPartition(eventsTopic: eventsTopic) {
                if broken != nil {
                    waiting.append(next)
                    continue
                }
                switch transactions!.route(partition) {
                case .notOwned where next.effect.isTokenFact:
                    break  // a token's fact, true whoever owns the partition now: the plain producer carries it
                case .notOwned:
                    failed(next.effect, .other("\(partition) is not this relay's (not assigned, or starting again from what was committed)"))
                    continue
                case .wait:
                    waiting.append(next)
                    continue
                case .produce(let begin):
                    guard let transactional else { preconditionFailure("a transaction routed without a producer") }
                    if begin {
                        do {
                            try await transactional.beginTransaction()
                        } catch {
                            transactions!.beginFailed()
                            failed(next.effect, (error as? KafkaError).map(PublishFailure.init) ?? .other("\(error)"))
                            continue
                        }
                    }
                    producer = transactional
                    inTransaction = true
                }
            }
            let tag = hold(Awaiting(effect: next.effect, onSuccess: next.onSuccess, transactionIndex: inTransaction ? transactionRecords.count : nil,
                                    reportedBefore: next.reportedBefore))
            do {
                try await producer.produce(next.record, tag: tag)
                if inTransaction {
                    transactionRecords.append(next)
                    if case .appendChangelog(_, _, _, let token) = next.effect { transactions?.producedBadgeChange(token) }
                }
            } catch let error as KafkaError where inTransaction && (error.transactionRequiresAbort || error.isFenced || error.isFatal) {
                _ = reported(tag)
                waiting.append(next)
                broken = error
            } catch {
                _ = reported(tag)
                failed(next.effect, (error as? KafkaError).map(PublishFailure.init) ?? .other("\(error)"))
            }
        }
        return broken
    }

    /// The records that waited for the transaction's commit go out first at the next
    /// ``produceQueued(via:transactions:producer:eventsTopic:failed:)``.
    mutating func release() {
        guard !waiting.isEmpty else { return }
        queued.insert(contentsOf: waiting, at: 0)
        waiting.removeAll()
    }

    /// Whether records of these partitions are still to be produced: queued for the batch's end, or waiting for the
    /// next transaction.
    func hasPending(for partitions: [TopicPartition], eventsTopic: String) -> Bool {
        func isTheirs(_ queued: Queued) -> Bool { queued.effect.transactionPartition(eventsTopic: eventsTopic).map(partitions.contains) ?? false }
        return waiting.contains(where: isTheirs) || queued.contains(where: isTheirs)
    }

    /// Forgets what is waiting for, or was produced in, a transaction for these partitions, which start again from
    /// what was committed: nothing of theirs is produced, and the reports of what was produced (purged by the
    /// abort) finish nothing.
    mutating func forget(_ partitions: Set<TopicPartition>, eventsTopic: String) {
        guard !partitions.isEmpty else { return }
        func isTheirs(_ effect: RelayEffect) -> Bool { effect.transactionPartition(eventsTopic: eventsTopic).map(partitions.contains) ?? false }
        waiting.removeAll { isTheirs($0.effect) }
        queued.removeAll { isTheirs($0.effect) }
        for slot in awaiting.indices where awaiting[slot].map({ isTheirs($0.effect) }) ?? false {
            awaiting[slot]?.forgotten = true
        }
    }

    /// What the report of `tag` finishes; `nil` for a tag not awaited, or forgotten. `failed`: the report is an
    /// error (the effect goes back to the engine; a replay of its transaction leaves it out).
    mutating func reported(_ tag: UInt64, failed: Bool = false) -> Awaiting? {
        guard tag < UInt64(awaiting.count), let finished = awaiting[Int(tag)].take() else { return nil }
        freeSlots.append(Int(tag))
        guard !finished.forgotten else { return nil }
        if let index = finished.transactionIndex, index < transactionRecords.count {
            if failed { transactionRecords[index].failed = true } else { transactionRecords[index].reportedBefore = true }
        }
        return finished
    }

    /// The relay's transaction committed: its records are done with.
    mutating func transactionCommitted() {
        transactionRecords.removeAll(keepingCapacity: true)
    }

    /// The relay's transaction was aborted: its records go into the next one, first and in order, less those whose
    /// report failed (the engine has their effects back); the reports still to come of the aborted ones finish nothing.
    mutating func replayTransaction() {
        forgetTransactionReports()
        let replayed = transactionRecords.filter { !$0.failed }
        transactionRecords.removeAll(keepingCapacity: true)
        waiting.insert(contentsOf: replayed, at: 0)
    }

    /// The relay's transaction was aborted and its partitions start again: none of its records is produced again.
    mutating func dropTransaction() {
        forgetTransactionReports()
        transactionRecords.removeAll(keepingCapacity: true)
    }

    private mutating func forgetTransactionReports() {
        for slot in awaiting.indices where awaiting[slot]?.transactionIndex != nil { awaiting[slot]?.forgotten = true }
    }

    private mutating func hold(_ record: Awaiting) -> UInt64 {
        if let slot = freeSlots.popLast() {
            awaiting[slot] = record
            return UInt64(slot)
        }
        awaiting.append(record)
        return UInt64(awaiting.count - 1)
    }

    /// Badge changes, progress markers and layout records go through the changelog's producer, forwarded events
    /// through their own, the rest through the results'.
    private static func producer(of effect: RelayEffect, in clients: RelayKafkaClients) -> any RelayRecordProducer {
        switch effect {
        case .appendChangelog, .writeProgress, .writeLayout: clients.changelogProducer
        case .forwardEvent: clients.forwardProducer
        default: clients.producer
        }
    }
}

extension RelayEffect {
    /// A failed-token or wrong-environment record: a fact about a token, published whoever owns its partition.
    var isTokenFact: Bool {
        switch self {
        case .publishFailedToken, .publishWrongEnvironment: true
        default: false
        }
    }

    /// The events partition whose offsets the transaction carrying this effect's record commits (``RelayTransactions``); `nil` for
    /// a record of no partition (a failed token the feedback service reported).
    func transactionPartition(eventsTopic: String) -> TopicPartition? {
        switch self {
        case .publishResult(_, let reference), .publishDeadLetter(_, _, let reference), .forwardEvent(_, _, _, let reference): reference.partition
        case .publishDeadLetterReference(let reference): reference.source.partition
        case .appendChangelog(_, _, let partition, _), .writeProgress(_, let partition, _, _): TopicPartition(eventsTopic, partition)
        case .writeLayout(_, let partition, _): partition
        case .publishFailedToken(_, let source): source
        case .publishWrongEnvironment(_, let source): source
        default: nil
        }
    }
}
