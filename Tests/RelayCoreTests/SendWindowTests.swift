import KafkaCore
import Testing

@testable import RelayCore

@Suite("The send window")
struct SendWindowTests {
    static func note(_ token: String, _ id: String, badge: Int64? = nil, badgeOnly: Bool = false) -> DeviceNotification<String> {
        DeviceNotification(token: token, eventID: id, badge: badge, isBadgeOnly: badgeOnly, payload: id)
    }

    @Test("at most `capacity` sends outstanding; the rest wait in release order and go as answers come")
    func capacity() {
        var window = SendWindow<String>(capacity: 2)
        var sent: [String] = []
        for device in 0..<4 { sent += window.enqueue(Self.note("t\(device)", "e\(device)"), maySend: true).send.map(\.notification.eventID) }
        #expect(sent == ["e0", "e1"] && window.outstanding == 2 && window.inFlight == 4 && window.hasWaiting)
        let first = DeviceDispatch(ticket: DispatchTicket(slot: 0, serial: 1), notification: Self.note("t0", "e0"), attempt: 1)
        #expect(window.answered(first, maySend: true).send.map(\.notification.eventID) == ["e2"])
        #expect(window.outstanding == 2 && window.inFlight == 3)
    }

    @Test("while writing is not allowed (the lease lapsed) nothing goes out; a send handed back waits first in line; all go once allowed")
    func leaseGate() {
        var window = SendWindow<String>(capacity: 10)
        let step = window.enqueue(Self.note("t", "a"), maySend: true)
        #expect(step.send.count == 1)
        #expect(window.enqueue(Self.note("u", "b"), maySend: false).send.isEmpty)
        #expect(window.handedBack(step.send[0], maySend: false).isEmpty)
        #expect(window.outstanding == 0 && window.inFlight == 2)
        #expect(window.release(maySend: true).map(\.notification.eventID) == ["a", "b"])
    }

    @Test("one device: one in flight, in order; a newer badge supersedes a queued badge-only one")
    func perDevice() {
        var window = SendWindow<String>(capacity: 10)
        let first = window.enqueue(Self.note("t", "1", badge: 1, badgeOnly: true), maySend: true).send
        #expect(window.enqueue(Self.note("t", "2", badge: 2, badgeOnly: true), maySend: true).send.isEmpty)
        let third = window.enqueue(Self.note("t", "3", badge: 3, badgeOnly: true), maySend: true)
        #expect(third.superseded.map(\.eventID) == ["2"] && window.inFlight == 2)
        #expect(window.answered(first[0], maySend: true).send.map(\.notification.eventID) == ["3"])
    }

    @Test("dropping a partition's unsent notifications frees their devices for what follows, and leaves the rest")
    func drop() {
        var window = SendWindow<String>(capacity: 1)
        let going = window.enqueue(Self.note("t", "keep-1"), maySend: true).send
        _ = window.enqueue(Self.note("u", "leave-1"), maySend: true)  // released, waits for room
        _ = window.enqueue(Self.note("u", "keep-2"), maySend: true)  // queued behind it on the same device
        _ = window.enqueue(Self.note("t", "leave-2"), maySend: true)  // queued behind keep-1
        let (dropped, step) = window.drop(where: { $0.hasPrefix("leave") }, maySend: true)
        #expect(Set(dropped.map(\.payload)) == ["leave-1", "leave-2"] && step.send.isEmpty && window.inFlight == 2)
        #expect(window.answered(going[0], maySend: true).send.map(\.notification.eventID) == ["keep-2"])
    }

    @Test("the window follows the sender's streams, a tenth over them, within its limit; unknown streams: the limit")
    func followsSenderStreams() {
        var window = SendWindow<String>(capacity: 100)
        #expect(window.senderStreamsChanged(20, maySend: true).isEmpty)
        #expect(window.capacity == 22)
        var sent: [String] = []
        for device in 0..<30 { sent += window.enqueue(Self.note("t\(device)", "e\(device)"), maySend: true).send.map(\.notification.eventID) }
        #expect(sent.count == 22 && window.outstanding == 22 && window.hasWaiting)
        // Fewer streams: nothing is taken back; nothing more goes until answers bring the outstanding under it.
        #expect(window.senderStreamsChanged(10, maySend: true).isEmpty)
        #expect(window.capacity == 11)
        let first = DeviceDispatch(ticket: DispatchTicket(slot: 0, serial: 1), notification: Self.note("t0", "e0"), attempt: 1)
        #expect(window.answered(first, maySend: true).send.isEmpty)
        // More streams hand the waiting sends over at once, in release order; while writing is not allowed, none.
        #expect(window.senderStreamsChanged(200, maySend: false).isEmpty)
        #expect(window.capacity == 100)
        #expect(window.senderStreamsChanged(nil, maySend: true).map(\.notification.eventID) == (22..<30).map { "e\($0)" })
        #expect(window.capacity == 100 && window.outstanding == 29)
        #expect(window.senderStreamsChanged(0, maySend: true).isEmpty && window.capacity == 1)
    }
}
