import Synchronization
import Testing

@testable import Kafka

/// The consumer's state machine alone: inputs in, actions out, no librdkafka, threads or clocks.
@Suite struct ConsumerStateMachineTests {
    let a = TopicPartition("events", 0)
    let b = TopicPartition("events", 1)
    let configuration = ConsumerStateMachine.Configuration(
        bufferLimit: 4, batchSize: 10, longestPollPause: .seconds(5), revokeTimeout: .seconds(3)
    )

    func machine(assigned partitions: [TopicPartition]) -> ConsumerStateMachine {
        var machine = ConsumerStateMachine(configuration: configuration)
        _ = machine.assigned(partitions)
        _ = machine.take(limit: 100)
        return machine
    }

    func messages(_ partition: TopicPartition, _ offsets: ClosedRange<Int64>) -> [KafkaMessage] {
        offsets.map { KafkaMessage(topic: partition.topic, partition: partition.partition, offset: $0, key: nil, value: nil) }
    }

    /// What the iterator takes, as text: `0:5` for a message, `assigned [..]`, `revoked [..]`.
    func taken(_ machine: inout ConsumerStateMachine, limit: Int = 100) -> [String] {
        guard case .events(let events, _) = machine.take(limit: limit).0 else { return [] }
        return events.map(Self.describe)
    }

    static func describe(_ event: KafkaConsumerEvent) -> String {
        switch event {
        case .message(let message): "\(message.partition):\(message.offset)"
        case .partitionsAssigned(let partitions, _): "assigned \(partitions)"
        case .partitionsRevoked(let revoke): "revoked \(revoke.partitions)"
        case .partitionsRewound(let partitions): "rewound \(partitions)"
        }
    }

    /// Asks for the next poll step and checks it (the machine's inputs are mutating, which `#expect` cannot call).
    func expectStep(
        _ machine: inout ConsumerStateMachine, _ expected: ConsumerStateMachine.PollStep, _ comment: Comment? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let step = machine.nextPollStep()
        #expect(step == expected, comment, sourceLocation: sourceLocation)
    }

    /// Takes what the iterator would and checks it.
    func expectTaken(
        _ machine: inout ConsumerStateMachine, _ expected: [String], _ comment: Comment? = nil, limit: Int = 100,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let events = taken(&machine, limit: limit)
        #expect(events == expected, comment, sourceLocation: sourceLocation)
    }

    /// Asks whether the revoke `id` may give its partitions up and checks the answer.
    func expectRevokeWait(
        _ machine: inout ConsumerStateMachine, _ id: UInt64, givesUp: Bool, _ comment: Comment? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let done = machine.revokeWait(id)
        #expect(done == givesUp, comment, sourceLocation: sourceLocation)
    }

    /// The revoke in the next event taken.
    func takeRevoke(_ machine: inout ConsumerStateMachine) -> KafkaRevoke? {
        guard case .events(let events, _) = machine.take(limit: 100).0 else { return nil }
        for case .partitionsRevoked(let revoke) in events { return revoke }
        return nil
    }

    // MARK: Buffer and backpressure

    @Test("an assignment is dated no later than the read before the one that served it: a poll thread held up between the group's answer and the callback does not date the membership after the hold-up")
    func assignmentDatedByTheReadBefore() {
        var machine = ConsumerStateMachine(configuration: configuration)
        let readReturned = ContinuousClock.now
        machine.readReturned(at: readReturned)
        // The callback runs 45 s later (the process was frozen in between).
        _ = machine.assigned([a], at: readReturned + .seconds(45))
        guard case .events(let events, _) = machine.take(limit: 10).0, case .partitionsAssigned(_, let at)? = events.first else {
            Issue.record("no assignment event")
            return
        }
        #expect(at == readReturned)
    }

    @Test func anAssignmentPrecedesItsMessagesAndWakesTheWaitingIterator() {
        var machine = ConsumerStateMachine(configuration: configuration)
        let waits = machine.iteratorWillWait()
        #expect(waits)
        let assignedNow = machine.assigned([a])
        #expect(assignedNow.iterator)
        _ = machine.batchRead(messages(a, 0...1))
        expectTaken(&machine, ["assigned [events[0]]", "0:0", "0:1"])
        let waitsAgain = machine.iteratorWillWait()
        #expect(waitsAgain)
        let read = machine.batchRead(messages(a, 2...2))
        #expect(read.iterator)
        let nextRead = machine.batchRead(messages(a, 3...3))
        #expect(!nextRead.iterator, "woken once")
    }

    @Test func aFullBufferMakesThePollThreadWaitAndTakingBelowHalfWakesIt() {
        var machine = machine(assigned: [a])
        expectStep(&machine, .perform(seeks: [], flowChanges: [], then: .read(limit: 10)))
        _ = machine.batchRead(messages(a, 0...4))
        #expect(machine.bufferedCount == 5, "a batch is taken whole; the limit stops the next read")
        expectStep(&machine, .waitForRoom(timeout: .seconds(5)))
        expectTaken(&machine, ["0:0"], limit: 1)
        expectStep(&machine, .waitForRoom(timeout: .seconds(5)), "4 left: still full")
        let took = machine.take(limit: 1)
        #expect(!took.1.poller, "3 left")
        let tookAgain = machine.take(limit: 1)
        #expect(!tookAgain.1.poller, "2 left: not below half of 4")
        let (_, wakes) = machine.take(limit: 1)
        #expect(wakes.poller, "1 left: below half")
        expectStep(&machine, .perform(seeks: [], flowChanges: [], then: .read(limit: 10)))
    }

    @Test func aWaitForRoomThatRunsOutReadsOneMessageToKeepTheMembership() {
        var machine = machine(assigned: [a])
        _ = machine.batchRead(messages(a, 0...3))
        expectStep(&machine, .waitForRoom(timeout: .seconds(5)))
        machine.roomWaitExpired()
        expectStep(&machine, .perform(seeks: [], flowChanges: [], then: .read(limit: 1)))
        _ = machine.batchRead(messages(a, 4...4))
        expectStep(&machine, .waitForRoom(timeout: .seconds(5)), "one message, then waiting again")
    }

    @Test func aBatchWithAGapIsHandedOutWholeAndARepeatDropped() {
        var machine = machine(assigned: [a])
        _ = machine.batchRead(messages(a, 0...1))
        _ = machine.batchRead(messages(a, 5...6))  // 2...4: markers, aborted or compacted records
        _ = machine.batchRead(messages(a, 6...7))  // 6 again: delivered once
        expectTaken(&machine, ["0:0", "0:1", "0:5", "0:6", "0:7"])
    }

    // MARK: Pause, resume, seek

    @Test func pauseParksAndResumeHandsOutAgainInOrder() {
        var machine = machine(assigned: [a, b])
        _ = machine.batchRead(messages(a, 0...1) + messages(b, 0...0))
        let generation = machine.generation
        _ = machine.pauseRequested([a])
        #expect(machine.generation != generation, "the iterator re-filters what it holds")
        _ = machine.batchRead(messages(a, 2...2) + messages(b, 1...1))
        expectTaken(&machine, ["1:0", "1:1"])
        expectStep(&machine, .perform(seeks: [], flowChanges: [.init(pause: true, partitions: [a])], then: .read(limit: 10)))

        let waits = machine.iteratorWillWait()
        #expect(waits)
        let wakes = machine.resumeRequested([a])
        #expect(wakes.iterator && wakes.read, "parked messages are back, and a waiting read is cut short for librdkafka's resume")
        expectTaken(&machine, ["0:0", "0:1", "0:2"])
        expectStep(&machine, .perform(seeks: [], flowChanges: [.init(pause: false, partitions: [a])], then: .read(limit: 10)))
    }

    @Test func eventsGivenBackAreFilteredByTheRulesNowAndGoBeforeWhatWasParkedSince() {
        var machine = machine(assigned: [a, b])
        _ = machine.batchRead(messages(a, 0...1) + messages(b, 0...0))
        guard case .events(let chunk, _) = machine.take(limit: 100).0 else { Issue.record("no events"); return }
        _ = machine.batchRead(messages(a, 2...2))
        _ = machine.pauseRequested([a])
        machine.giveBack(chunk[1...])  // handed out 0:0 only
        expectTaken(&machine, ["1:0"])
        _ = machine.resumeRequested([a])
        expectTaken(&machine, ["0:1", "0:2"])
    }

    @Test func pausesAndResumesOfUnassignedPartitionsAskNothingOfLibrdkafka() {
        var machine = machine(assigned: [a])
        _ = machine.pauseRequested([b])
        let resumed = machine.resumeRequested([b])
        #expect(!resumed.read)
        expectStep(&machine, .perform(seeks: [], flowChanges: [], then: .read(limit: 10)))
    }

    @Test func aSeekDropsWhatIsBufferedAndParkedOfItsPartitionBeforeTheNextRead() {
        var machine = machine(assigned: [a, b])
        _ = machine.batchRead(messages(a, 0...2) + messages(b, 0...0))
        _ = machine.pauseRequested([b])
        _ = machine.batchRead(messages(b, 1...1))
        guard let (id, _) = machine.seekRequested(b, to: 0) else { Issue.record("seek refused"); return }
        expectTaken(&machine, ["0:0"], "nothing dropped until the poll thread makes the seek", limit: 1)
        expectStep(&machine, .perform(seeks: [.init(id: id, partition: b, offset: 0)], flowChanges: [.init(pause: true, partitions: [b])], then: .read(limit: 10)))
        _ = machine.resumeRequested([b])
        expectTaken(&machine, ["0:1", "0:2"])
        _ = machine.batchRead(messages(b, 0...0))
        expectTaken(&machine, ["1:0"], "the offset check starts afresh after a seek: 1:0 again is no repeat")
    }

    @Test func aSeekWakesThePollThreadWaitingForRoom() {
        var machine = machine(assigned: [a])
        _ = machine.batchRead(messages(a, 0...3))
        expectStep(&machine, .waitForRoom(timeout: .seconds(5)))
        let seek = machine.seekRequested(a, to: 0)
        #expect(seek?.1.poller == true)
        guard case .perform(let seeks, _, .read) = machine.nextPollStep() else { Issue.record("no seek"); return }
        #expect(seeks.map(\.partition) == [a])
        #expect(machine.bufferedCount == 0)
    }

    // MARK: Revoke

    @Test func aRevokeWaitsForItsAcknowledgementValue() {
        var machine = machine(assigned: [a, b])
        let acknowledgements = RecordedAcknowledgements()
        let at = ContinuousClock.now
        let (handshake, wakes) = machine.revokeRequested([a], lost: false, acknowledger: acknowledgements, at: at)
        #expect(handshake == .waitForAcknowledgement(id: 1, timeout: .seconds(3)))
        #expect(!wakes.iterator)
        expectRevokeWait(&machine, 1, givesUp: false, "not acknowledged: the poll thread waits")
        guard let revoke = takeRevoke(&machine) else { Issue.record("no revoke event"); return }
        #expect(revoke.partitions == [a])
        #expect(revoke.deadline == at + .seconds(3), "the application knows when the consumer stops waiting")
        expectRevokeWait(&machine, 1, givesUp: false, "taking the event, or asking for the next, acknowledges nothing")
        revoke.acknowledge()
        #expect(acknowledgements.ids == [1], "the value reports its own id")
        let acknowledgement = machine.acknowledged(revoke: 1)
        #expect(acknowledgement.poller)
        expectRevokeWait(&machine, 1, givesUp: true)
        #expect(machine.assignment == [b])
    }

    @Test func anAcknowledgementBeforeThePollThreadWaitsIsKept() {
        var machine = machine(assigned: [a])
        _ = machine.revokeRequested([a], lost: false, acknowledger: nil)
        let acknowledgement = machine.acknowledged(revoke: 1)
        #expect(!acknowledgement.poller, "no one waits yet")
        expectRevokeWait(&machine, 1, givesUp: true)
    }

    @Test func theRevokeWaitIsCappedAndALateAcknowledgementWakesNoOne() {
        var consumer = KafkaConsumerConfiguration(
            kafka: KafkaConfiguration(bootstrapServers: "localhost:9092", properties: ["max.poll.interval.ms": "4000"]),
            groupID: "g", topics: ["events"], revokeTimeout: .seconds(10))
        var machine = ConsumerStateMachine(configuration: .init(consumer))
        _ = machine.assigned([a, b])
        let revoke = machine.revokeRequested([a], lost: false, acknowledger: nil)
        #expect(revoke.0 == .waitForAcknowledgement(id: 1, timeout: .seconds(2)), "half of max.poll.interval.ms, below the revoke timeout")
        expectRevokeWait(&machine, 1, givesUp: false)
        let acknowledgedInTime = machine.revokeWaitExpired(1).acknowledged
        #expect(!acknowledgedInTime, "given up unacknowledged")
        let acknowledgement = machine.acknowledged(revoke: 1)
        #expect(!acknowledgement.poller)

        consumer.revokeTimeout = .milliseconds(500)
        #expect(ConsumerStateMachine.Configuration(consumer).revokeTimeout == .milliseconds(500))
        let secondRevoke = machine.revokeRequested([b], lost: false, acknowledger: nil)
        #expect(secondRevoke.0 == .waitForAcknowledgement(id: 2, timeout: .seconds(2)))
        expectRevokeWait(&machine, 2, givesUp: false)
        let olderAcknowledgement = machine.acknowledged(revoke: 1)
        #expect(!olderAcknowledgement.poller, "an older revoke's acknowledgement is not this one's")
        expectRevokeWait(&machine, 2, givesUp: false)
    }

    @Test func lostPartitionsAndLeavingTheGroupDoNotWait() {
        var machine = machine(assigned: [a, b])
        let revoke = machine.revokeRequested([a], lost: true, acknowledger: nil)
        #expect(revoke.0 == .giveUpNow)
        let lost = takeRevoke(&machine)
        #expect(lost?.partitions == [a] && lost?.deadline == nil, "no wait: no deadline")
        machine.leavingGroup()
        let secondRevoke = machine.revokeRequested([b], lost: false, acknowledger: nil)
        #expect(secondRevoke.0 == .giveUpNow)
        let leaving = takeRevoke(&machine)
        #expect(leaving?.partitions == [b] && leaving?.deadline == nil, "the application hears of both")
    }

    @Test func closingEndsAWaitingRevoke() {
        var machine = machine(assigned: [a])
        _ = machine.revokeRequested([a], lost: false, acknowledger: nil)
        expectRevokeWait(&machine, 1, givesUp: false)
        let close = machine.closeRequested()
        #expect(close.1.poller)
        expectRevokeWait(&machine, 1, givesUp: true)
    }

    @Test func messagesOfRevokedPartitionsAreDroppedBufferedParkedAndLate() {
        var machine = machine(assigned: [a, b])
        _ = machine.batchRead(messages(a, 0...1) + messages(b, 0...0))
        _ = machine.pauseRequested([a])
        _ = machine.batchRead(messages(a, 2...2))
        let generation = machine.generation
        _ = machine.revokeRequested([a], lost: false, acknowledger: nil)
        #expect(machine.generation != generation, "the iterator drops what it holds of them")
        _ = machine.batchRead(messages(a, 3...3) + messages(b, 1...1))  // read while the revoke waited
        expectTaken(&machine, ["1:0", "revoked [events[0]]", "1:1"])
        expectStep(&machine, .perform(seeks: [], flowChanges: [], then: .read(limit: 10)), "the pause of a revoked partition is not made: it would outlive the revoke in librdkafka 2.0.2")
        _ = machine.resumeRequested([a])
        expectTaken(&machine, [], "nothing parked comes back")
    }

    @Test func aPartitionAssignedAgainStartsUnpausedWithAFreshOffsetCheck() {
        var machine = machine(assigned: [a])
        _ = machine.batchRead(messages(a, 0...4))
        _ = machine.pauseRequested([a])
        _ = machine.revokeRequested([a], lost: false, acknowledger: nil)
        _ = machine.assigned([a])
        _ = machine.batchRead(messages(a, 2...3))
        expectTaken(&machine, ["revoked [events[0]]", "assigned [events[0]]", "0:2", "0:3"])
    }

    // MARK: Close

    @Test func closeWakesThePollThreadLeavesTheGroupRefusesSeeksAndEndsAfterTheBufferedEvents() {
        var machine = machine(assigned: [a, b])
        _ = machine.batchRead(messages(a, 0...1) + messages(b, 0...1))
        expectStep(&machine, .waitForRoom(timeout: .seconds(5)))
        let (alreadyFinished, wakes) = machine.closeRequested()
        #expect(!alreadyFinished && wakes.poller)
        let seek = machine.seekRequested(a, to: 1)
        #expect(seek == nil)
        expectStep(&machine, .perform(seeks: [], flowChanges: [], then: .leaveGroup), "full, but closing")
        machine.leavingGroup()
        let revoke = machine.revokeRequested([a], lost: false, acknowledger: nil)
        #expect(revoke.0 == .giveUpNow)
        let end = machine.finished(failure: nil)
        #expect(end.unmadeSeeks.isEmpty)
        expectTaken(&machine, ["1:0", "1:1", "revoked [events[0]]"], "what is buffered is still handed out")
        guard case .finished(.none) = machine.take(limit: 100).0 else { Issue.record("not finished"); return }
        let close = machine.closeRequested()
        #expect(close.alreadyFinished)
    }

    @Test func seeksAskedForBeforeTheCloseAreStillMade() {
        var machine = machine(assigned: [a])
        guard let (id, _) = machine.seekRequested(a, to: 0) else { Issue.record("seek refused"); return }
        _ = machine.closeRequested()
        expectStep(&machine, .perform(seeks: [.init(id: id, partition: a, offset: 0)], flowChanges: [], then: .leaveGroup))
    }

    @Test func aFailureEndsTheEventsWithItsErrorAndFailsSeeksNotMade() {
        var machine = machine(assigned: [a])
        guard let (id, _) = machine.seekRequested(a, to: 0) else { Issue.record("seek refused"); return }
        let waits = machine.iteratorWillWait()
        #expect(waits)
        let failure = KafkaError.client("_FATAL", "fenced", operation: "consume")
        let (unmade, wakes) = machine.finished(failure: failure)
        #expect(unmade == [id] && wakes.iterator)
        guard case .finished(let error) = machine.take(limit: 100).0 else { Issue.record("not finished"); return }
        #expect(error == failure)
        let waitsAfterEnd = machine.iteratorWillWait()
        #expect(!waitsAfterEnd)
    }
}

/// Records the revoke ids acknowledged through a ``KafkaRevoke``.
final class RecordedAcknowledgements: KafkaRevokeAcknowledging {
    private let recorded = Mutex<[UInt64]>([])
    var ids: [UInt64] { recorded.withLock { $0 } }
    func acknowledge(revoke id: UInt64) { recorded.withLock { $0.append(id) } }

    @Test("a revoke given up unacknowledged is told as lost: a second revoke of its partitions, lost, that needs no acknowledgement")
    func unacknowledgedRevokeToldAsLost() {
        var machine = ConsumerStateMachine(configuration: .init(bufferLimit: 100, batchSize: 10, longestPollPause: .seconds(1), revokeTimeout: .seconds(2)))
        let a = TopicPartition("t", 0)
        _ = machine.assigned([a])
        _ = machine.revokeRequested([a], lost: false, acknowledger: nil)
        let (acknowledged, wakes) = machine.revokeWaitExpired(1, partitions: [a])
        #expect(!acknowledged && !wakes.poller)
        guard case .events(let events, _) = machine.take(limit: 10).0 else {
            Issue.record("nothing to take")
            return
        }
        let revokes = events.compactMap { event -> KafkaRevoke? in if case .partitionsRevoked(let revoke) = event { revoke } else { nil } }
        #expect(revokes.map(\.lost) == [false, true] && revokes.map(\.partitions) == [[a], [a]] && revokes.last?.deadline == nil)
        // One acknowledged in time tells nothing more.
        _ = machine.assigned([a])
        _ = machine.revokeRequested([a], lost: false, acknowledger: nil)
        _ = machine.acknowledged(revoke: 3)
        #expect(machine.revokeWaitExpired(3, partitions: [a]).acknowledged)
    }
}
