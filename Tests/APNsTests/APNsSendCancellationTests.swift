import NIOCore
import Testing

@testable import APNs

/// The cancellation object alone: cancel, write permits, parents. The supervisor's handling of a cancellation set
/// after a send was submitted is in APNsSupervisorAttemptsTests; here, one that stands before the send is submitted.
@Suite("A send's cancellation: cancelled for good, write permits, parents and children")
struct APNsSendCancellationTests {
    /// Deadlines no test run reaches or has left behind: the permit's check against the monotonic clock is then
    /// certain, with no timing involved.
    static let past = NIODeadline.uptimeNanoseconds(0)
    static let future = NIODeadline.distantFuture

    @Test("a new cancellation, without a permit limit or a parent, lets every write happen")
    func fresh() {
        let cancellation = APNsSendCancellation()
        #expect(!cancellation.isCancelled)
        #expect(!cancellation.isCancelledOutright)
        #expect(!APNsSendCancellation(writableUntil: Self.future).isCancelled)
    }

    @Test("cancel is for good: cancelled outright, and no later permit undoes it")
    func cancelIsForGood() {
        let cancellation = APNsSendCancellation()
        cancellation.cancel()
        #expect(cancellation.isCancelled && cancellation.isCancelledOutright)
        cancellation.permitWrites(until: Self.future)
        #expect(cancellation.isCancelled && cancellation.isCancelledOutright)
        cancellation.cancel()
        #expect(cancellation.isCancelled)
    }

    @Test("a permit that ran out stops writes without cancelling outright; the next permit moves it either way")
    func permits() {
        let cancellation = APNsSendCancellation(writableUntil: Self.past)
        #expect(cancellation.isCancelled)
        #expect(!cancellation.isCancelledOutright, "a permit may be renewed")
        cancellation.permitWrites(until: Self.future)
        #expect(!cancellation.isCancelled)
        cancellation.permitWrites(until: Self.past)
        #expect(cancellation.isCancelled && !cancellation.isCancelledOutright)
        // The moment the permit ends is already past it.
        let now = NIODeadline.now()
        cancellation.permitWrites(until: now)
        #expect(cancellation.isCancelled)
    }

    @Test("a child is cancelled with its parent, at any depth; cancelling a child leaves its parent and its siblings")
    func cancelledWithParent() {
        let parent = APNsSendCancellation()
        let child = APNsSendCancellation(parent: parent)
        let sibling = APNsSendCancellation(parent: parent)
        let grandchild = APNsSendCancellation(parent: child)

        child.cancel()
        #expect(child.isCancelledOutright && grandchild.isCancelledOutright)
        #expect(!parent.isCancelled && !sibling.isCancelled, "one send's cancellation ends that send alone")

        parent.cancel()
        #expect(sibling.isCancelled && sibling.isCancelledOutright)
        #expect(grandchild.isCancelled)
    }

    @Test("a parent's permit that ran out stops its children's writes (not outright), whatever their own permits; renewed, it frees them")
    func parentPermit() {
        let parent = APNsSendCancellation(writableUntil: Self.past)
        let child = APNsSendCancellation(writableUntil: Self.future, parent: parent)
        let grandchild = APNsSendCancellation(parent: child)
        #expect(child.isCancelled && grandchild.isCancelled)
        #expect(!child.isCancelledOutright && !grandchild.isCancelledOutright)
        parent.permitWrites(until: Self.future)
        #expect(!child.isCancelled && !grandchild.isCancelled)
        // The child's own permit still counts: the stricter of the two wins.
        child.permitWrites(until: Self.past)
        #expect(child.isCancelled && grandchild.isCancelled && !parent.isCancelled)
    }

    @Test("a cancellation stems from itself and its ancestors, never from its children, its siblings or a stranger")
    func stems() {
        let parent = APNsSendCancellation()
        let child = APNsSendCancellation(parent: parent)
        let sibling = APNsSendCancellation(parent: parent)
        let grandchild = APNsSendCancellation(parent: child)
        #expect(grandchild.stems(from: grandchild) && grandchild.stems(from: child) && grandchild.stems(from: parent))
        #expect(!parent.stems(from: child), "a parent is not made from its child")
        #expect(!grandchild.stems(from: sibling) && !sibling.stems(from: child))
        #expect(!child.stems(from: APNsSendCancellation()))
    }

    @Test("a send's progress is stopped exactly when its cancellation is, whichever way; without one it never is")
    func progressStops() {
        let started = NIODeadline.uptimeNanoseconds(1_000_000_000)
        #expect(!APNsSendProgress(policy: APNsRetryPolicy(), started: started, expiry: nil).isStopped)
        let parent = APNsSendCancellation()
        let cancellation = APNsSendCancellation(parent: parent)
        let progress = APNsSendProgress(policy: APNsRetryPolicy(), started: started, expiry: nil, cancellation: cancellation)
        #expect(!progress.isStopped)
        cancellation.permitWrites(until: Self.past)
        #expect(progress.isStopped)
        cancellation.permitWrites(until: Self.future)
        #expect(!progress.isStopped)
        parent.cancel()
        #expect(progress.isStopped)
    }

    /// A supervisor never run: no connection comes, so a send either ends at once or waits in its queue.
    static func idleSupervisor() -> APNsSupervisor {
        APNsSupervisor(configuration: APNsSupervisorConfiguration(pool: .init(connections: 1)), factory: ScriptedFactory(script: ScriptedAPNs()))
    }

    @Test("a send submitted already cancelled outright (its own or an ancestor's) ends at once unsent; one whose permit ran out waits in the queue")
    func cancelledBeforeSubmit() async throws {
        let supervisor = Self.idleSupervisor()
        let (outcomes, answered) = AsyncStream.makeStream(of: (Int, APNsOutcome).self)
        var iterator = outcomes.makeAsyncIterator()
        let grandparent = APNsSendCancellation()
        grandparent.cancel()
        let own = APNsSendCancellation()
        own.cancel()
        supervisor.submit(try APNsSupervisorAttemptsTests.notification(1), cancellation: own) { answered.yield((1, $0)) }
        supervisor.submit(try APNsSupervisorAttemptsTests.notification(2),
                          cancellation: APNsSendCancellation(parent: APNsSendCancellation(parent: grandparent))) { answered.yield((2, $0)) }
        let permitGone = APNsSendCancellation(writableUntil: Self.past)
        supervisor.submit(try APNsSupervisorAttemptsTests.notification(3), cancellation: permitGone) { answered.yield((3, $0)) }

        var ended: [Int: APNsOutcome] = [:]
        for _ in 0..<2 { if case let (index, outcome)? = await iterator.next() { ended[index] = outcome } }
        #expect(Set(ended.keys) == [1, 2])
        #expect(ended.values.allSatisfy { $0.lastAttempt == .failure(.cancelled) && $0.attempts == 0 })
        #expect(supervisor.queuedCount == 1, "the send whose permit ran out waits: a renewed permit would let it be written")

        // Its turn would find it stopped; ending its wait is cancelQueued's.
        supervisor.cancelQueued(permitGone)
        let last = await iterator.next()
        #expect(last?.0 == 3 && last?.1.lastAttempt == .failure(.cancelled) && last?.1.attempts == 0)
        #expect(supervisor.queuedCount == 0)
    }

    @Test("cancelQueued with a parent ends the waiting sends made from it at any depth, and leaves the others waiting")
    func cancelQueuedByParent() async throws {
        let supervisor = Self.idleSupervisor()
        let (outcomes, answered) = AsyncStream.makeStream(of: Int.self)
        var iterator = outcomes.makeAsyncIterator()
        let partition = APNsSendCancellation()
        let other = APNsSendCancellation()
        let child = APNsSendCancellation(parent: partition)
        supervisor.submit(try APNsSupervisorAttemptsTests.notification(1), cancellation: child) { _ in answered.yield(1) }
        supervisor.submit(try APNsSupervisorAttemptsTests.notification(2), cancellation: APNsSendCancellation(parent: child)) { _ in answered.yield(2) }
        supervisor.submit(try APNsSupervisorAttemptsTests.notification(3), cancellation: APNsSendCancellation(parent: other)) { _ in answered.yield(3) }
        supervisor.submit(try APNsSupervisorAttemptsTests.notification(4)) { _ in answered.yield(4) }
        #expect(supervisor.queuedCount == 4)

        // A child's cancelQueued does not reach its parent's other sends.
        supervisor.cancelQueued(APNsSendCancellation(parent: partition))
        #expect(supervisor.queuedCount == 4)

        supervisor.cancelQueued(partition)
        var ended: Set<Int> = []
        for _ in 0..<2 { if let index = await iterator.next() { ended.insert(index) } }
        #expect(ended == [1, 2])
        #expect(supervisor.queuedCount == 2)
        #expect(!partition.isCancelled, "cancelQueued ends the waiting sends; it does not cancel the object itself")
    }
}
