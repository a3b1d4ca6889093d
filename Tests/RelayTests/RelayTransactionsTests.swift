import Kafka
import Testing

@testable import Relay

/// The relay's transactions alone: when its one transaction commits, what the commit carries and releases, which
/// requests it answers, and what a failure starts again.
@Suite("RelayTransactions: the relay's one transaction at a time, what it commits and what a failure starts again")
struct RelayTransactionsTests {
    static let zero = TopicPartition("push.events", 0)
    static let one = TopicPartition("push.events", 1)
    static let two = TopicPartition("push.events", 2)

    /// Ready, owning partitions 0 and 1.
    func owning() -> RelayTransactions {
        var transactions = RelayTransactions()
        transactions.ready()
        transactions.own(Self.zero)
        transactions.own(Self.one)
        return transactions
    }

    /// Produces badge change `token` of `partition`, as the outbox does.
    func produceBadgeChange(_ token: UInt64, of partition: TopicPartition, in transactions: inout RelayTransactions) {
        guard case .produce = transactions.route(partition) else {
            Issue.record("\(partition) did not take its record")
            return
        }
        transactions.producedBadgeChange(token)
    }

    @Test("records wait until the producer is ready; a partition the relay does not own takes none")
    func readyAndOwned() {
        var transactions = RelayTransactions()
        transactions.own(Self.zero)
        #expect(transactions.route(Self.zero) == .wait)
        #expect(transactions.commitDue(intervalPassed: true) == nil)
        transactions.ready()
        #expect(transactions.route(Self.zero) == .produce(begin: true))
        #expect(transactions.route(Self.zero) == .produce(begin: false))
        #expect(transactions.route(Self.two) == .notOwned)
    }

    @Test("a badge change commits at once, releasing it; records asked for meanwhile wait for the next transaction, whichever their partition")
    func badgeChangeCommitsAtOnce() {
        var transactions = owning()
        produceBadgeChange(7, of: Self.zero, in: &transactions)
        let commit = transactions.commitDue(intervalPassed: false)
        #expect(commit?.begin == false, "begun by its first record")
        #expect(commit?.contents.partitions == [Self.zero])
        #expect(transactions.route(Self.one) == .wait, "one transaction at a time")
        #expect(transactions.commitDue(intervalPassed: true) == nil, "one commit at a time")
        #expect(transactions.committed().changelogged == [7])
        #expect(transactions.route(Self.one) == .produce(begin: true))
    }

    @Test("a result alone waits for the interval; a begin that failed leaves no transaction")
    func resultsWaitForTheInterval() {
        var transactions = owning()
        #expect(transactions.route(Self.one) == .produce(begin: true))
        #expect(transactions.commitDue(intervalPassed: false) == nil)
        #expect(transactions.commitDue(intervalPassed: true)?.contents.partitions == [Self.one])
        _ = transactions.committed()
        #expect(transactions.route(Self.zero) == .produce(begin: true))
        transactions.beginFailed()
        #expect(transactions.commitDue(intervalPassed: true) == nil, "nothing began, nothing to commit")
        #expect(transactions.route(Self.zero) == .produce(begin: true), "the next record begins one again")
    }

    @Test("every commit of a partition's records carries an offset of it, the engine's newest or the last one it asked for, so the group metadata fences it")
    func offsetsFenceEveryCommit() {
        var transactions = owning()
        #expect(transactions.requestCommit([Self.zero: 10, Self.one: 20], request: 1) == .init())
        let first = transactions.commitDue(intervalPassed: false)
        #expect(first?.begin == true, "offsets alone: no transaction was open")
        #expect(first?.offsets == [Self.zero: 10, Self.one: 20])
        let answered = transactions.committed().answered
        #expect(answered.map(\.request) == [1] && answered.first?.offsets == [Self.zero: 10, Self.one: 20])

        produceBadgeChange(3, of: Self.zero, in: &transactions)
        #expect(transactions.commitDue(intervalPassed: false)?.offsets == [Self.zero: 10], "the last offset asked for, sent again")
        _ = transactions.committed()
        var fresh = RelayTransactions()
        fresh.ready()
        fresh.own(Self.two)
        _ = fresh.route(Self.two)
        #expect(fresh.commitDue(intervalPassed: true)?.offsets == [:], "nothing consumed yet: no offset to send")
    }

    @Test("a request naming a partition the relay does not own is answered at once as not committed")
    func requestForAnotherPartition() {
        var transactions = owning()
        let refused = transactions.requestCommit([Self.zero: 4, Self.two: 9], request: 5)
        #expect(refused.answered.map(\.request) == [5] && refused.answered.first?.offsets == nil)
        #expect(transactions.commitDue(intervalPassed: true)?.offsets == [Self.zero: 4], "its owned partition's offset still goes")
    }

    @Test("a failed commit the group refused answers its requests and those waiting as not committed, releases none of its badge changes, and starts again the partitions it held; the others go on after the recovery")
    func failedCommitRestarts() {
        var transactions = owning()
        produceBadgeChange(1, of: Self.zero, in: &transactions)
        _ = transactions.requestCommit([Self.zero: 3], request: 1)
        _ = transactions.commitDue(intervalPassed: false)
        _ = transactions.requestCommit([Self.one: 8], request: 2)
        let failed = transactions.failed(restart: true)
        #expect(failed.changelogged.isEmpty, "an aborted change is never sent")
        #expect(failed.answered.map(\.request) == [1, 2] && failed.answered.allSatisfy { $0.offsets == nil })
        #expect(failed.redo == [Self.zero])
        #expect(transactions.route(Self.zero) == .notOwned, "starting again: not the relay's until restored")
        #expect(transactions.route(Self.one) == .wait, "the abort is under way")
        transactions.recovered(replaced: false)
        #expect(transactions.route(Self.one) == .produce(begin: true))
        transactions.own(Self.zero)
        #expect(transactions.route(Self.zero) == .produce(begin: false))
    }

    @Test("a failed commit replayed answers nothing: its requests and offsets go with the next commit, and its badge changes with the records produced again")
    func failedCommitReplays() {
        var transactions = owning()
        produceBadgeChange(1, of: Self.zero, in: &transactions)
        _ = transactions.requestCommit([Self.zero: 3], request: 1)
        _ = transactions.commitDue(intervalPassed: false)
        #expect(transactions.failed(restart: false) == .init(), "nothing answered, nothing started again")
        #expect(transactions.route(Self.zero) == .wait, "the abort is under way")
        transactions.recovered(replaced: false)
        produceBadgeChange(1, of: Self.zero, in: &transactions)
        let replay = transactions.commitDue(intervalPassed: false)
        #expect(replay?.offsets == [Self.zero: 3] && replay?.requests.keys.sorted() == [1] && replay?.contents.badgeChanges == [1])
        let committed = transactions.committed()
        #expect(committed.answered.map(\.request) == [1] && committed.changelogged == [1])
    }

    @Test("an open transaction that broke is replayed or started again like a commit; a replaced producer must be ready again first")
    func brokenOpenTransaction() {
        var transactions = owning()
        produceBadgeChange(1, of: Self.zero, in: &transactions)
        #expect(transactions.route(Self.one) == .produce(begin: false))
        let failed = transactions.failed(restart: true)
        #expect(failed.redo == [Self.zero, Self.one] && failed.changelogged.isEmpty)
        transactions.recovered(replaced: true)
        transactions.own(Self.one)
        #expect(transactions.route(Self.one) == .wait, "no producer until the new one is initialised")
        transactions.ready()
        #expect(transactions.route(Self.one) == .produce(begin: true))
    }

    @Test("settled: no transaction open or committing holds the partitions' records; a released partition's offsets go nowhere")
    func settledAndReleased() {
        var transactions = owning()
        #expect(transactions.isSettled([Self.zero, Self.one]))
        _ = transactions.route(Self.zero)
        #expect(!transactions.isSettled([Self.zero]) && transactions.isSettled([Self.one]))
        _ = transactions.commitDue(intervalPassed: true)
        #expect(!transactions.isSettled([Self.zero]))
        _ = transactions.committed()
        #expect(transactions.isSettled([Self.zero]))
        _ = transactions.requestCommit([Self.one: 4], request: 1)
        transactions.release(Self.one)
        #expect(transactions.commitDue(intervalPassed: true)?.offsets == [:], "its offsets left with it")
    }
}
