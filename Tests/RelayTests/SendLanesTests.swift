import APNs
import Kafka
import Synchronization
import Testing

@testable import Relay

/// A sender whose task-free path is under the test's control: it keeps each begun send's
/// completion for the test to call, and counts the sends it made in a task.
private final class StartingSender: NotificationSending {
    private let startsAtOnce: Bool
    private let completions = Mutex<[@Sendable (StartedSend) -> Void]>([])
    private let sendsInTasks = Mutex(0)
    private let cancellations = Mutex<[APNsSendCancellation]>([])

    init(startsAtOnce: Bool) { self.startsAtOnce = startsAtOnce }

    var begun: [@Sendable (StartedSend) -> Void] { completions.withLock { $0 } }
    var sentInTasks: Int { sendsInTasks.withLock { $0 } }
    var cancelledQueues: [APNsSendCancellation] { cancellations.withLock { $0 } }

    func cancelQueued(_ cancellation: APNsSendCancellation) {
        cancellations.withLock { $0.append(cancellation) }
    }

    func send(_ notification: PendingNotification) async -> APNsOutcome {
        sendsInTasks.withLock { $0 += 1 }
        return .delivered()
    }

    func sendWithoutTask(_ sends: [TasklessSend]) -> [Int] {
        guard startsAtOnce else { return Array(sends.indices) }
        completions.withLock { $0 += sends.map { send in { send.complete($0) } } }
        return []
    }
}

/// Starts the sends at even positions of each batch it is handed and refuses the others; records
/// the batches' sizes.
private final class AlternatingSender: NotificationSending {
    private let batchSizes = Mutex<[Int]>([])
    private let completions = Mutex<[@Sendable (StartedSend) -> Void]>([])
    private let sendsInTasks = Mutex(0)

    var batches: [Int] { batchSizes.withLock { $0 } }
    var begun: [@Sendable (StartedSend) -> Void] { completions.withLock { $0 } }
    var sentInTasks: Int { sendsInTasks.withLock { $0 } }

    func send(_ notification: PendingNotification) async -> APNsOutcome {
        sendsInTasks.withLock { $0 += 1 }
        return .delivered()
    }

    func sendWithoutTask(_ sends: [TasklessSend]) -> [Int] {
        batchSizes.withLock { $0.append(sends.count) }
        completions.withLock { $0 += sends.indices.filter { $0 % 2 == 0 }.map { index in { sends[index].complete($0) } } }
        return sends.indices.filter { $0 % 2 == 1 }
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

/// Sends `dispatch` through `lanes`, runs the lanes it opened while `body` runs, then closes its partition.
private func runLanes(of dispatch: DeviceDispatch<PendingNotification>, in lanes: inout SendLanes, via sender: StartingSender,
                      answering inbox: RelayInbox, _ body: () async -> Void) async {
    let streams = lanes.send(dispatch, via: sender, answering: inbox)
    await withDiscardingTaskGroup { group in
        for stream in streams { group.addTask { await SendLanes.run(stream, sender: sender, input: inbox) } }
        await body()
        lanes.close([dispatch.notification.payload.record.partition])
    }
}

@Suite("Send lanes: sends without a task, retries and the rest in lanes")
struct SendLanesTests {
    @Test("a send that can begin at once crosses no lane: its outcome comes back by its callback")
    func beginsAtOnce() async throws {
        let sender = StartingSender(startsAtOnce: true)
        let inbox = RelayInbox()
        var lanes = SendLanes()
        let started = lanes.send(try dispatch(partition: 0, serial: 1), via: sender, answering: inbox)
        #expect(started.count == SendLanes.lanesPerPartition, "the partition's lanes exist for its retries")
        #expect(sender.begun.count == 1)
        sender.begun[0](.finished(.delivered()))
        #expect(await sentOutcomes(inbox).map(\.deliveryStatus) == [.delivered])
        #expect(sender.sentInTasks == 0)
        lanes.cancelAll(via: sender)
    }

    @Test("a send that cannot begin at once, and a retry of one that did, run in their partition's lane")
    func lanesCarryTheRest() async throws {
        let sender = StartingSender(startsAtOnce: false)
        let inbox = RelayInbox()
        var lanes = SendLanes()
        await runLanes(of: try dispatch(partition: 0, serial: 1), in: &lanes, via: sender, answering: inbox) {
            #expect(await sentOutcomes(inbox).map(\.deliveryStatus) == [.delivered])
            #expect(sender.sentInTasks == 1)
        }

        let starting = StartingSender(startsAtOnce: true)
        await runLanes(of: try dispatch(partition: 1, serial: 2), in: &lanes, via: starting, answering: inbox) {
            starting.begun[0](.unfinished { .refused(400, .badDeviceToken, attempts: 2) })
            #expect(await sentOutcomes(inbox).map(\.resultReason) == ["BadDeviceToken"])
        }
    }

    @Test("a batch of sends reaches the sender in one call; those it cannot start run in their partition's lanes; each brings one .sent")
    func batchInOneCall() async throws {
        let sender = AlternatingSender()
        let inbox = RelayInbox()
        var lanes = SendLanes()
        let batch = try [0, 1, 0, 1].enumerated().map { try dispatch(partition: Int32($0.element), serial: UInt64($0.offset + 1)) }
        let streams = lanes.send(batch, via: sender, answering: inbox)
        #expect(streams.count == 2 * SendLanes.lanesPerPartition, "both partitions' lanes opened")
        #expect(sender.batches == [4])
        #expect(sender.begun.count == 2)
        await withDiscardingTaskGroup { group in
            for stream in streams { group.addTask { await SendLanes.run(stream, sender: sender, input: inbox) } }
            for completion in sender.begun { completion(.finished(.delivered())) }
            var outcomes: [APNsOutcome] = []
            while outcomes.count < 4 { outcomes += await sentOutcomes(inbox) }
            #expect(outcomes.count == 4 && outcomes.allSatisfy { $0.deliveryStatus == .delivered })
            lanes.close([TopicPartition("push.events", 0), TopicPartition("push.events", 1)])
        }
        #expect(sender.sentInTasks == 2)
    }

    @Test("stopping a partition's writes takes its queued sends out of the sender and stops their writes; a send on the wire is still answered")
    func stopWritesLeavesTheWire() async throws {
        let sender = StartingSender(startsAtOnce: true)
        let inbox = RelayInbox()
        var lanes = SendLanes()
        _ = lanes.send([try dispatch(partition: 2, serial: 1), try dispatch(partition: 4, serial: 2)], via: sender, answering: inbox)
        lanes.stopWrites([TopicPartition("push.events", 2)], via: sender)
        #expect(sender.cancelledQueues.count == 1 && sender.cancelledQueues[0].isCancelled, "its sends still queued are taken out")
        sender.begun[0](.finished(.delivered()))
        #expect(await sentOutcomes(inbox).map(\.deliveryStatus) == [.delivered], "what was on the wire is answered as it is")
        sender.begun[1](.finished(.delivered()))
        #expect(await sentOutcomes(inbox).map(\.deliveryStatus) == [.delivered])
        #expect(sender.cancelledQueues.count == 1, "another partition's sends go on")
        lanes.cancelAll(via: sender)
    }

    @Test("a retry that comes after its partition's sends were cancelled is abandoned, never run")
    func retryAfterCancelIsAbandoned() async throws {
        let sender = StartingSender(startsAtOnce: true)
        let inbox = RelayInbox()
        var lanes = SendLanes()
        _ = lanes.send(try dispatch(partition: 3, serial: 7), via: sender, answering: inbox)
        lanes.cancel([TopicPartition("push.events", 3)], via: sender)
        let ran = Mutex(false)
        sender.begun[0](.unfinished {
            ran.withLock { $0 = true }
            return .delivered(attempts: 2)
        })
        #expect(await sentOutcomes(inbox).map(\.isAbandoned) == [true], "exactly one .sent for the dispatch, so the engine's count of sends in flight settles")
        #expect(ran.withLock { $0 } == false)
        #expect(sender.cancelledQueues.count == 1 && sender.cancelledQueues[0].isCancelled, "its sends still queued were taken out")
    }
}
