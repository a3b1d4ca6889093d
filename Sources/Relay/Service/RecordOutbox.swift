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
    }

    /// What a produced record's report finishes.
    struct Awaiting: Sendable {
        /// The effect the record carries out (handed back to the engine when it fails).
        var effect: RelayEffect
        /// What its delivery tells the engine.
        var onSuccess: RelayService.Delivery
    }

    /// Records asked for while the inbox's batch is handled, in order: produced at its end.
    private var queued = Deque<Queued>()
    /// Records of partitions whose transaction was committing when they were to be produced, in order: they go
    /// into the partition's next transaction (``release(_:)``).
    private var waiting: [TopicPartition: Deque<Queued>] = [:]
    /// Produced records awaiting their reports; a record's tag is its slot. A slot is used again once its report
    /// is in (librdkafka reports each record once), so the table holds at most the records in flight at the
    /// busiest moment, and a report finds its record with no hashing, whatever order the partitions answer in.
    private var awaiting: [Awaiting?] = []
    private var freeSlots: [Int] = []

    /// Queues `record` for the batch's end (``produceQueued(via:failed:)``).
    mutating func queue(_ record: KafkaRecord, for effect: RelayEffect, onSuccess: RelayService.Delivery) {
        queued.append(Queued(record: record, effect: effect, onSuccess: onSuccess))
    }

    /// Hands the queued records to their producers, in the order the engine asked for them; `failed` gets
    /// each one a producer refused outright (it never gets a report).
    ///
    /// With `transactions`, a record of an events partition (``RelayEffect/transactionPartition(eventsTopic:)``) goes
    /// into that partition's transaction (begun first when none is open), or waits while the partition commits;
    /// one of a partition without a producer here fails. Records of no partition go through `clients.producer`.
    mutating func produceQueued(via clients: RelayKafkaClients, transactions: inout PartitionTransactions?, eventsTopic: String,
                                failed: (RelayEffect, PublishFailure) -> Void) async {
        // Each moved out, not copied (a copy retains what it carries); the storage serves the next batch.
        while let next = queued.popFirst() {
            var producer: any RelayRecordProducing = Self.producer(of: next.effect, in: clients)
            var transaction: TopicPartition?
            if transactions != nil, let partition = next.effect.transactionPartition(eventsTopic: eventsTopic) {
                switch transactions!.route(partition) {
                case .notOwned where next.effect.isTokenFact:
                    break  // a token's fact, true whoever owns the partition now: the plain producer carries it
                case .notOwned:
                    failed(next.effect, .other("no transaction of \(partition) here: the partition is not this relay's"))
                    continue
                case .wait:
                    waiting[partition, default: []].append(next)
                    continue
                case .produce(let transactional, let begin):
                    if begin {
                        do {
                            try await transactional.beginTransaction()
                        } catch {
                            transactions!.beginFailed(partition)
                            failed(next.effect, (error as? KafkaError).map(PublishFailure.init) ?? .other("\(error)"))
                            continue
                        }
                    }
                    producer = transactional
                    transaction = partition
                }
            }
            let tag = hold(Awaiting(effect: next.effect, onSuccess: next.onSuccess))
            do {
                try await producer.produce(next.record, tag: tag)
                if let transaction, case .appendChangelog(_, _, _, let token) = next.effect {
                    transactions?.producedBadgeChange(token, of: transaction)
                }
            } catch {
                _ = reported(tag)
                failed(next.effect, (error as? KafkaError).map(PublishFailure.init) ?? .other("\(error)"))
            }
        }
    }

    /// The records that waited for `partition`'s commit go out first at the next ``produceQueued(via:transactions:eventsTopic:failed:)``.
    mutating func release(_ partition: TopicPartition) {
        guard let released = waiting.removeValue(forKey: partition) else { return }
        queued.insert(contentsOf: released, at: 0)
    }

    /// The records that waited for `partition`'s commit, when the partition is no longer this relay's: each fails.
    mutating func dropWaiting(_ partition: TopicPartition) -> [RelayEffect] {
        waiting.removeValue(forKey: partition)?.map(\.effect) ?? []
    }

    /// What the report of `tag` finishes; `nil` for a tag not awaited.
    mutating func reported(_ tag: UInt64) -> Awaiting? {
        guard tag < UInt64(awaiting.count), let finished = awaiting[Int(tag)].take() else { return nil }
        freeSlots.append(Int(tag))
        return finished
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

    /// The events partition whose transaction carries this effect's record (``PartitionTransactions``); `nil` for
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
