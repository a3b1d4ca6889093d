import Testing

@testable import RelayCore

@Suite("Commit requests: the periodic commit's schedule and the answers it waits for")
struct CommitRequestsTests {
    @Test("the periodic commit is due an interval after the start and after each one; not while one is in flight; at once when urgent")
    func periodicSchedule() {
        var commits = CommitRequests(intervalMilliseconds: 1_000)
        commits.start(now: 0)
        let early = commits.periodicDue(now: 999, urgent: false)
        let onTime = commits.periodicDue(now: 1_000, urgent: false)
        #expect(!early && onTime)
        let request = commits.request(at: 1_000, periodic: true)
        let whileInFlight = commits.periodicDue(now: 5_000, urgent: true)
        #expect(!whileInFlight, "one periodic commit at a time, urgent or not")
        let askedAt = commits.answered(request)
        #expect(askedAt == 1_000, "the answer gives when it was asked (the lease is confirmed as of then)")
        let urgent = commits.periodicDue(now: 1_500, urgent: true)
        #expect(urgent, "work waiting for the lease does not wait for the interval")
        let tooSoon = commits.periodicDue(now: 2_000, urgent: false)
        let next = commits.periodicDue(now: 2_500, urgent: false)
        #expect(!tooSoon && next, "the next is an interval after the last")
    }

    @Test("a periodic commit unanswered past the answer timeout is forgotten: the next one goes out, and its late answer confirms nothing")
    func unansweredCommitIsForgotten() {
        var commits = CommitRequests(intervalMilliseconds: 1_000)
        commits.start(now: 0)
        _ = commits.periodicDue(now: 1_000, urgent: false)
        let lost = commits.request(at: 1_000, periodic: true)
        let beforeTimeout = commits.periodicDue(now: 1_000 + CommitRequests.answerTimeoutMilliseconds - 1, urgent: false)
        let atTimeout = commits.periodicDue(now: 1_000 + CommitRequests.answerTimeoutMilliseconds, urgent: false)
        #expect(!beforeTimeout && atTimeout)
        let lateAnswer = commits.answered(lost)
        #expect(lateAnswer == nil && commits.waiting == 0)
    }

    @Test("a hand-over's request is not the periodic one: it does not hold the periodic commit back; requests are numbered apart")
    func handOverRequests() {
        var commits = CommitRequests(intervalMilliseconds: 1_000)
        commits.start(now: 0)
        let handOver = commits.request(at: 100, periodic: false)
        let due = commits.periodicDue(now: 1_000, urgent: false)
        #expect(due)
        let periodic = commits.request(at: 1_000, periodic: true)
        #expect(handOver != periodic && commits.waiting == 2)
        let handOverAskedAt = commits.answered(handOver)
        #expect(handOverAskedAt == 100)
        let stillWaiting = commits.periodicDue(now: 2_000, urgent: false)
        #expect(!stillWaiting, "the periodic one still waits for its answer")
        let periodicAskedAt = commits.answered(periodic)
        #expect(periodicAskedAt == 1_000 && commits.waiting == 0)
    }
}
