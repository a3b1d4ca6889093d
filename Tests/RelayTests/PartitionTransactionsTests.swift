import Kafka
import Testing
@testable import Relay

/// The transactions of the owned partitions alone: when each commits, what a commit hands on, which requests it answers.
@Suite("PartitionTransactions: when a partition's transaction commits and what its commit releases")
struct PartitionTransactionsTests {
    /// A producer that does nothing: the state machine only passes it around.
    final class InertProducer: RelayTransactionalProducer {
        func produce(_ record: KafkaRecord, tag: UInt64) async throws {}
        func beginTransaction() async throws {}
        func sendOffsetsToTransaction(_ offsets: [TopicPartition: Int64], groupMetadata: KafkaConsumerGroupMetadata, timeout: Duration?) async throws {}
        func commitTransaction(timeout: Duration?) async throws {}
        func abortTransaction(timeout: Duration?) async throws {}
        var deliveries: any AsyncSequence<[KafkaTaggedDeliveryReport], Never> { AsyncStream { $0.finish() } }
        func close(timeout: Duration) async {}
    }

    static let zero = TopicPartition("push.events", 0)
    static let one = TopicPartition("push.events", 1)

    /// Partitions 0 and 1 owned (assignment 1), each with its producer.
    func owning() -> PartitionTransactions {
        var transactions = PartitionTransactions()
        transactions.ready(Self.zero, generation: 1, producer: InertProducer())
        transactions.ready(Self.one, generation: 1, producer: InertProducer())
        return transactions
    }

    /// Produces badge change `token` in `partition`'s transaction, as the outbox does.
    func produceBadgeChange(_ token: UInt64, of partition: TopicPartition, in transactions: inout PartitionTransactions) {
        guard case .produce = transactions.route(partition) else {
            Issue.record("\(partition) did not take the record")
            return
        }
        transactions.producedBadgeChange(token, of: partition)
    }

    @Test("a badge change is released by the commit of the transaction it was produced in, whenever its acknowledgement comes")
    func badgeChangeReleasedByItsCommit() {
        var transactions = owning()
        produceBadgeChange(7, of: Self.zero, in: &transactions)
        let commits = transactions.commitsDue(onlyRequested: true, now: 0)
        #expect(commits.map(\.partition) == [Self.zero])
        #expect(commits.first?.begin == false, "the transaction was begun by its first record")
        let committed = transactions.committed(Self.zero, generation: 1, succeeded: true)
        #expect(committed.changelogged == [7])
        // The record's report, coming after the commit, asks for nothing more: no second commit for it.
        #expect(transactions.commitsDue(onlyRequested: true, now: 1_000).isEmpty)
        #expect(transactions.isSettled([Self.zero, Self.one]))
    }

    @Test("a begin that failed leaves no transaction: the next record begins one, and only a transaction that began is due to commit")
    func failedBeginLeavesTheIdlePhase() {
        var transactions = owning()
        guard case .produce(_, begin: true) = transactions.route(Self.zero) else {
            Issue.record("the first record of a partition begins its transaction")
            return
        }
        transactions.beginFailed(Self.zero)
        #expect(transactions.commitsDue(now: 0).isEmpty, "nothing began, nothing to commit")
        guard case .produce(_, begin: true) = transactions.route(Self.zero) else {
            Issue.record("the next record begins a transaction again")
            return
        }
        #expect(transactions.commitsDue(now: 0).map(\.partition) == [Self.zero], "this one began: the interval commits it")
    }

    @Test("records asked for while their partition commits wait for its next transaction; other partitions produce")
    func recordsWaitWhileCommitting() {
        var transactions = owning()
        produceBadgeChange(1, of: Self.zero, in: &transactions)
        _ = transactions.commitsDue(onlyRequested: true, now: 0)
        guard case .wait = transactions.route(Self.zero) else {
            Issue.record("a record was produced into a committing transaction")
            return
        }
        guard case .produce(_, let begin) = transactions.route(Self.one) else {
            Issue.record("partition 1 did not take its record")
            return
        }
        #expect(begin, "partition 1 had no transaction open")
        #expect(transactions.committed(Self.zero, generation: 1, succeeded: true).changelogged == [1])
        guard case .produce(_, let beginAgain) = transactions.route(Self.zero) else {
            Issue.record("partition 0 did not take its record after the commit")
            return
        }
        #expect(beginAgain)
    }

    @Test("a partition commits for its badge changes at most once per spacing; the interval commits the rest")
    func badgeChangeCommitsAreSpaced() {
        var transactions = owning()
        let spacing = PartitionTransactions.badgeChangeCommitSpacingMilliseconds
        produceBadgeChange(1, of: Self.zero, in: &transactions)
        #expect(transactions.commitsDue(onlyRequested: true, now: 1_000).count == 1)
        _ = transactions.committed(Self.zero, generation: 1, succeeded: true)
        produceBadgeChange(2, of: Self.zero, in: &transactions)
        #expect(transactions.commitsDue(onlyRequested: true, now: 1_000 + spacing - 1).isEmpty)
        #expect(transactions.commitsDue(onlyRequested: true, now: 1_000 + spacing).map(\.partition) == [Self.zero])
        #expect(transactions.committed(Self.zero, generation: 1, succeeded: true).changelogged == [2])
        // A result alone waits for the interval's commit.
        guard case .produce = transactions.route(Self.one) else {
            Issue.record("partition 1 did not take its record")
            return
        }
        #expect(transactions.commitsDue(onlyRequested: true, now: 5_000).isEmpty)
        #expect(transactions.commitsDue(onlyRequested: false, now: 5_000).map(\.partition) == [Self.one])
    }

    @Test("an engine request is answered once every partition in it committed, with its offsets; a failed commit fails it")
    func requestsAnsweredByEveryPartition() {
        var transactions = owning()
        #expect(transactions.requestCommit([Self.zero: 10, Self.one: 20], request: 1).isEmpty)
        let commits = transactions.commitsDue(onlyRequested: true, now: 0)
        #expect(Set(commits.map(\.partition)) == [Self.zero, Self.one])
        #expect(commits.allSatisfy { $0.begin }, "offsets alone: no transaction was open")
        #expect(commits.first { $0.partition == Self.zero }?.offsets == [Self.zero: 10])
        #expect(transactions.committed(Self.zero, generation: 1, succeeded: true).answered.isEmpty)
        let answered = transactions.committed(Self.one, generation: 1, succeeded: true).answered
        #expect(answered.map(\.request) == [1] && answered.first?.offsets == [Self.zero: 10, Self.one: 20])

        produceBadgeChange(3, of: Self.zero, in: &transactions)
        _ = transactions.requestCommit([Self.zero: 11], request: 2)
        _ = transactions.commitsDue(onlyRequested: true, now: 1_000)
        let failed = transactions.committed(Self.zero, generation: 1, succeeded: false)
        #expect(failed.changelogged.isEmpty, "an aborted change is never sent")
        #expect(failed.answered.map(\.request) == [2] && failed.answered.first?.offsets == nil)
    }

    @Test("a replaced or dropped producer is retired; its commit's end answers nothing and releases nothing")
    func replacedProducersAnswerNothing() {
        var transactions = owning()
        produceBadgeChange(4, of: Self.zero, in: &transactions)
        _ = transactions.requestCommit([Self.zero: 5], request: 1)
        _ = transactions.commitsDue(onlyRequested: true, now: 0)
        transactions.ready(Self.zero, generation: 2, producer: InertProducer())
        #expect(transactions.takeRetired().count == 1)
        #expect(transactions.committed(Self.zero, generation: 1, succeeded: true).changelogged.isEmpty)
        // An initialisation of an older assignment that finishes late is retired at once.
        transactions.ready(Self.zero, generation: 1, producer: InertProducer())
        #expect(transactions.takeRetired().count == 1)

        _ = transactions.requestCommit([Self.one: 9], request: 2)
        let answered = transactions.drop([Self.one])
        #expect(answered.map(\.request) == [2] && answered.first?.offsets == nil)
        #expect(transactions.takeRetired().count == 1)
        guard case .notOwned = transactions.route(Self.one) else {
            Issue.record("a dropped partition still took a record")
            return
        }
    }
}
