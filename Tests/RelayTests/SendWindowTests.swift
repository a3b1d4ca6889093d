import Kafka
import Testing

@testable import Relay

@Suite("The send window")
struct SendWindowTests {
    static func note(_ token: String, _ id: String, badge: Int64? = nil, badgeOnly: Bool = false) -> DeviceNotification<String> {
        DeviceNotification(token: token, eventID: id, badge: badge, isBadgeOnly: badgeOnly, payload: id)
    }

    @Test("at most `capacity` sends outstanding; the rest wait in release order and go as answers come")
    func capacity() {
        var window = SendWindow<String>(capacity: 2)
        var sent: [String] = []
        for device in 0..<4 { sent += window.enqueue(Self.note("t\(device)", "e\(device)"), mayWrite: true).send.map(\.notification.eventID) }
        #expect(sent == ["e0", "e1"] && window.outstanding == 2 && window.inFlight == 4 && window.hasWaiting)
        let first = DeviceDispatch(ticket: DispatchTicket(token: "t0", serial: 1), notification: Self.note("t0", "e0"), attempt: 1)
        #expect(window.answered(first, mayWrite: true).send.map(\.notification.eventID) == ["e2"])
        #expect(window.outstanding == 2 && window.inFlight == 3)
    }

    @Test("while writing is not allowed (the lease lapsed) nothing goes out; a send handed back waits first in line; all go once allowed")
    func leaseGate() {
        var window = SendWindow<String>(capacity: 10)
        let step = window.enqueue(Self.note("t", "a"), mayWrite: true)
        #expect(step.send.count == 1)
        #expect(window.enqueue(Self.note("u", "b"), mayWrite: false).send.isEmpty)
        #expect(window.handedBack(step.send[0], mayWrite: false).isEmpty)
        #expect(window.outstanding == 0 && window.inFlight == 2)
        #expect(window.release(mayWrite: true).map(\.notification.eventID) == ["a", "b"])
    }

    @Test("one device: one in flight, in order; a newer badge supersedes a queued badge-only one")
    func perDevice() {
        var window = SendWindow<String>(capacity: 10)
        let first = window.enqueue(Self.note("t", "1", badge: 1, badgeOnly: true), mayWrite: true).send
        #expect(window.enqueue(Self.note("t", "2", badge: 2, badgeOnly: true), mayWrite: true).send.isEmpty)
        let third = window.enqueue(Self.note("t", "3", badge: 3, badgeOnly: true), mayWrite: true)
        #expect(third.superseded.map(\.eventID) == ["2"] && window.inFlight == 2)
        #expect(window.answered(first[0], mayWrite: true).send.map(\.notification.eventID) == ["3"])
    }

    @Test("dropping a partition's unsent notifications frees their devices for what follows, and leaves the rest")
    func drop() {
        var window = SendWindow<String>(capacity: 1)
        let going = window.enqueue(Self.note("t", "keep-1"), mayWrite: true).send
        _ = window.enqueue(Self.note("u", "leave-1"), mayWrite: true)  // released, waits for room
        _ = window.enqueue(Self.note("u", "keep-2"), mayWrite: true)  // queued behind it on the same device
        _ = window.enqueue(Self.note("t", "leave-2"), mayWrite: true)  // queued behind keep-1
        let (dropped, step) = window.drop(where: { $0.hasPrefix("leave") }, mayWrite: true)
        #expect(Set(dropped) == ["leave-1", "leave-2"] && step.send.isEmpty && window.inFlight == 2)
        #expect(window.answered(going[0], mayWrite: true).send.map(\.notification.eventID) == ["keep-2"])
    }
}

@Suite("The retry schedule")
struct RetryScheduleTests {
    @Test("delays double from the base to the cap, each jittered to between half and all of it; a streak past the bound says so; a success ends it")
    func backoffAndBound() {
        var schedule = RetrySchedule(base: 250, cap: 5_000, bound: 60_000, seed: 7)
        for failures in 1...8 {
            schedule.schedule(.loadDeviceRegistry, afterFailures: failures, now: 0)
            let delay = min(5_000, Int64(250) << (failures - 1))
            #expect(schedule.takeDue(now: delay / 2 - 1).isEmpty, "failure \(failures): not before half the delay")
            #expect(schedule.takeDue(now: delay).count == 1, "failure \(failures): by the whole delay")
        }
        #expect(schedule.failed(.deviceRegistry, now: 1_000).pastBound == false)
        #expect(schedule.failed(.deviceRegistry, now: 60_999).streak == .init(since: 1_000, failures: 2))
        #expect(schedule.failed(.deviceRegistry, now: 61_000).pastBound)
        schedule.succeeded(.deviceRegistry)
        #expect(schedule.failed(.deviceRegistry, now: 70_000).streak == .init(since: 70_000, failures: 1))
        #expect(schedule.failed(.publishing(.records), now: 70_000).streak.failures == 1, "each source has its own streak")
    }

    @Test("waiting effects a revoke selects are dropped; the others stay due")
    func removal() {
        var schedule = RetrySchedule(base: 100, cap: 100, bound: 1_000, seed: 1)
        schedule.schedule(.loadDeviceRegistry, afterFailures: 1, now: 0)
        schedule.schedule(.restore(TopicPartition("push.events", 0), generation: 1), afterFailures: 1, now: 0)
        schedule.removeAll { if case .restore = $0 { true } else { false } }
        #expect(schedule.waiting == 1)
        #expect(schedule.takeDue(now: 100).count == 1 && schedule.waiting == 0)
    }
}
