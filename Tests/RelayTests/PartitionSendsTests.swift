import APNs
import APNsTestSupport
import Kafka
import NIOCore
import Synchronization
import Testing
import TestSupport

@testable import Relay

/// Keeps each send it is handed for the test to complete; records the batches' sizes and the cancellations whose
/// waiting sends it was asked to end (those it ends, as abandoned, when `endsWaiting`).
private final class HoldingSender: NotificationSending {
    private let state = Mutex<(held: [RelaySend], batches: [Int], cancelled: [APNsSendCancellation])>(([], [], []))
    private let endsWaiting: Bool

    init(endsWaiting: Bool = false) { self.endsWaiting = endsWaiting }

    var held: [RelaySend] { state.withLock { $0.held } }
    var batches: [Int] { state.withLock { $0.batches } }
    var cancelledQueues: [APNsSendCancellation] { state.withLock { $0.cancelled } }

    func submit(_ sends: [RelaySend]) {
        state.withLock {
            $0.batches.append(sends.count)
            $0.held += sends
        }
    }

    func cancelQueued(_ cancellation: APNsSendCancellation) {
        let ended = state.withLock { state -> [RelaySend] in
            state.cancelled.append(cancellation)
            guard endsWaiting else { return [] }
            defer { state.held.removeAll { $0.cancellation === cancellation } }
            return state.held.filter { $0.cancellation === cancellation }
        }
        for send in ended { send.complete(.abandoned()) }
    }
}

private func dispatch(partition: Int32, serial: UInt64) throws -> DeviceDispatch<PendingNotification> {
    let token = String(repeating: "ab", count: 32)
    let event = try PushEventDecoder().decode(Array("{\"id\":\"e\",\"tokens\":[\"\(token)\"],\"apns\":{\"payload\":{\"aps\":{\"alert\":\"hi\"}}}}".utf8))
    let notification = try event.render(for: token, badge: nil, defaultTopic: "com.example.app")
    let pending = PendingNotification(record: RecordReference(TopicPartition("push.events", partition), 0), eventID: "e", user: nil, seq: nil,
                                      badge: nil, token: token, notification: notification, environment: .production, consumedAt: 0)
    return DeviceDispatch(ticket: DispatchTicket(slot: 0, serial: serial),
                          notification: DeviceNotification(token: token, eventID: "e", badge: nil, isBadgeOnly: false, payload: pending), attempt: 1)
}

/// The outcomes of the `.sent` inputs waiting in `inbox`.
private func sentOutcomes(_ inbox: RelayInbox) async -> [APNsOutcome] {
    var batch = RelayInbox.Batch()
    _ = await inbox.take(into: &batch)
    return batch.compactMap { if case .sent(_, let outcome) = $0 { outcome } else { nil } }
}

@Suite("Partition sends: a batch to the sender in one call, each partition's gate, answers straight to the inbox")
struct PartitionSendsTests {
    @Test("a batch of sends reaches the sender in one call; each completes once into the inbox as .sent; one partition's sends share its gate")
    func batchInOneCall() async throws {
        let sender = HoldingSender()
        let inbox = RelayInbox()
        var sends = PartitionSends()
        let batch = try [0, 1, 0, 1].enumerated().map { try dispatch(partition: Int32($0.element), serial: UInt64($0.offset + 1)) }
        sends.send(batch, via: sender, answering: inbox)
        #expect(sender.batches == [4])
        let held = sender.held
        #expect(held.map(\.dispatch.ticket.serial) == [1, 2, 3, 4], "in the order the engine asked for them")
        #expect(held[0].cancellation === held[2].cancellation && held[1].cancellation === held[3].cancellation)
        #expect(held[0].cancellation !== held[1].cancellation, "each partition has its own gate")
        for send in held { send.complete(.delivered()) }
        var outcomes: [APNsOutcome] = []
        while outcomes.count < 4 { outcomes += await sentOutcomes(inbox) }
        #expect(outcomes.count == 4 && outcomes.allSatisfy { $0.deliveryStatus == .delivered })
    }

    @Test("stopping a partition's writes cancels its gate and ends its waiting sends in the sender; a send on the wire is still answered; another partition's sends go on")
    func stopWritesLeavesTheWire() async throws {
        let sender = HoldingSender()
        let inbox = RelayInbox()
        var sends = PartitionSends()
        sends.send([try dispatch(partition: 2, serial: 1), try dispatch(partition: 4, serial: 2)], via: sender, answering: inbox)
        sends.stopWrites([TopicPartition("push.events", 2)], via: sender)
        #expect(sender.cancelledQueues.count == 1 && sender.cancelledQueues[0] === sender.held[0].cancellation)
        #expect(sender.held[0].cancellation.isCancelled && !sender.held[1].cancellation.isCancelled)
        sender.held[0].complete(.delivered())
        #expect(await sentOutcomes(inbox).map(\.deliveryStatus) == [.delivered], "what was on the wire is answered as it is")
        sender.held[1].complete(.delivered())
        #expect(await sentOutcomes(inbox).map(\.deliveryStatus) == [.delivered])
    }

    @Test("cancelling a partition's sends: those waiting come back abandoned, one .sent each; its next sends start behind a new gate")
    func cancelThenSendAgain() async throws {
        let sender = HoldingSender(endsWaiting: true)
        let inbox = RelayInbox()
        var sends = PartitionSends()
        sends.send([try dispatch(partition: 3, serial: 7)], via: sender, answering: inbox)
        let first = sender.held[0].cancellation
        sends.cancel([TopicPartition("push.events", 3)], via: sender)
        #expect(await sentOutcomes(inbox).map(\.isAbandoned) == [true], "exactly one .sent for the dispatch, so the engine's count of sends in flight settles")
        #expect(first.isCancelled)
        sends.send([try dispatch(partition: 3, serial: 8)], via: sender, answering: inbox)
        let second = try #require(sender.held.last).cancellation
        #expect(second !== first && !second.isCancelled, "the partition assigned again sends behind a gate of its own")
    }

    @Test("the ownership lease bounds every gate's writes, a gate opened later too")
    func leaseBoundsEveryGate() async throws {
        let sender = HoldingSender()
        let inbox = RelayInbox()
        var sends = PartitionSends()
        sends.send([try dispatch(partition: 0, serial: 1)], via: sender, answering: inbox)
        sends.permitWrites(until: NIODeadline.now() - TimeAmount.seconds(1))
        sends.send([try dispatch(partition: 1, serial: 2)], via: sender, answering: inbox)
        #expect(sender.held.allSatisfy { $0.cancellation.isCancelled }, "past the lease nothing is written")
        sends.permitWrites(until: NIODeadline.now() + TimeAmount.seconds(60))
        #expect(sender.held.allSatisfy { !$0.cancellation.isCancelled }, "a renewed lease permits them again")
    }

    @Test("a send waiting out a retry's backoff in a real supervisor comes back abandoned while the backoff's timer still sleeps, when its partition's writes stop or its sends are cancelled; it is not written again",
          arguments: [false, true])
    func retryInItsBackoffEndsAtTheHandOver(cancelled: Bool) async throws {
        var setup = Harness.Setup(connections: 1)
        setup.retryBackoff = Backoff(base: .seconds(120), cap: .seconds(120))
        setup.maxRetry = .seconds(3_600)
        // The retry's backoff (60-120 s with its jitter) sleeps until the supervisor ends; every other timer sleeps
        // as it would. An outcome that arrives while the backoff sleeps came from the hand-over, not the timer.
        let backoffsSleeping = WaitableCount()
        setup.sleep = { amount in
            if amount >= .seconds(55) && amount <= .seconds(125) {
                backoffsSleeping.increment()
                try? await Task.sleep(for: .seconds(3_600))
            } else {
                try? await Task.sleep(nanoseconds: UInt64(max(0, amount.nanoseconds)))
            }
        }
        try await Harness.run(setup) { simulator, supervisor in
            let sender = APNsSupervisorSender(supervisor: supervisor)
            let inbox = RelayInbox()
            var sends = PartitionSends()
            let send = try dispatch(partition: 5, serial: 1)
            simulator.addFault(.status(503, reason: "ServiceUnavailable"), token: send.notification.token)
            sends.send([send], via: sender, answering: inbox)
            await backoffsSleeping.reached(1)
            #expect(simulator.requestCount == 1, "the first attempt, answered 503")
            let leaving = [TopicPartition("push.events", 5)]
            if cancelled { sends.cancel(leaving, via: sender) } else { sends.stopWrites(leaving, via: sender) }
            // Bounded only so that a broken run fails instead of hanging: the outcome is due at once.
            let outcomes = await withTaskGroup(of: [APNsOutcome]?.self) { group in
                group.addTask { await sentOutcomes(inbox) }
                group.addTask {
                    try? await Task.sleep(for: .seconds(60))
                    return nil
                }
                let first = await group.next() ?? nil
                group.cancelAll()
                return first
            }
            #expect(outcomes?.count == 1, "no outcome while the backoff slept")
            #expect(outcomes?.first?.isAbandoned == true, "\(String(describing: outcomes))")
            #expect(simulator.requestCount == 1 && simulator.deliveries(for: send.notification.token).isEmpty)
        }
    }
}
