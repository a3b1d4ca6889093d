import Testing
@testable import RelayCore

private func note(_ device: String, _ event: String, badge: Int64?, badgeOnly: Bool) -> DeviceNotification<String> {
    DeviceNotification(token: device, eventID: event, badge: badge, isBadgeOnly: badgeOnly, payload: event)
}

@Suite struct DeviceDispatcherTests {
    let device = token(7)
    let other = token(8)

    @Test func oneInFlightPerToken() {
        var dispatcher = DeviceDispatcher<String>()
        let first = dispatcher.enqueue(note(device, "e1", badge: nil, badgeOnly: false))
        #expect(first.send.map(\.notification.eventID) == ["e1"])
        #expect(first.send.first?.attempt == 1)
        #expect(dispatcher.enqueue(note(device, "e2", badge: nil, badgeOnly: false)).send.isEmpty)
        #expect(dispatcher.enqueue(note(other, "e3", badge: nil, badgeOnly: false)).send.map(\.notification.eventID) == ["e3"])
        let next = dispatcher.complete(first.send[0].ticket, outcome: .finished)
        #expect(next.send.map(\.notification.eventID) == ["e2"])
        #expect(dispatcher.pendingCount == 2)
    }

    @Test func retryKeepsTheSlot() {
        var dispatcher = DeviceDispatcher<String>()
        let first = dispatcher.enqueue(note(device, "e1", badge: 1, badgeOnly: false)).send[0]
        _ = dispatcher.enqueue(note(device, "e2", badge: 2, badgeOnly: false))
        let retried = dispatcher.complete(first.ticket, outcome: .retry)
        #expect(retried.send.map(\.notification.eventID) == ["e1"])
        #expect(retried.send.first?.attempt == 2)
        // The first ticket is spent: completing it again does nothing.
        #expect(dispatcher.complete(first.ticket, outcome: .finished).send.isEmpty)
        #expect(dispatcher.complete(retried.send[0].ticket, outcome: .finished).send.map(\.notification.eventID) == ["e2"])
    }

    @Test func queuedBadgeOnlyIsSupersededByNewerBadge() {
        var dispatcher = DeviceDispatcher<String>()
        let inFlight = dispatcher.enqueue(note(device, "e1", badge: 1, badgeOnly: true)).send[0]
        _ = dispatcher.enqueue(note(device, "e2", badge: 2, badgeOnly: true))
        _ = dispatcher.enqueue(note(device, "e3", badge: 3, badgeOnly: false))
        let step = dispatcher.enqueue(note(device, "e4", badge: 4, badgeOnly: true))
        #expect(step.superseded.isEmpty)  // e2 was already superseded by e3
        #expect(dispatcher.queued(for: device).map(\.eventID) == ["e3", "e4"])
        let step5 = dispatcher.enqueue(note(device, "e5", badge: 5, badgeOnly: false))
        #expect(step5.superseded.map(\.eventID) == ["e4"])
        #expect(dispatcher.queued(for: device).map(\.eventID) == ["e3", "e5"])
        #expect(dispatcher.inFlightTicket(for: device) == inFlight.ticket)  // in flight is never superseded
    }

    @Test func alertsAreNeverSuperseded() {
        var dispatcher = DeviceDispatcher<String>()
        _ = dispatcher.enqueue(note(device, "e1", badge: 1, badgeOnly: false))
        _ = dispatcher.enqueue(note(device, "e2", badge: 2, badgeOnly: false))
        let step = dispatcher.enqueue(note(device, "e3", badge: 3, badgeOnly: true))
        #expect(step.superseded.isEmpty)
        #expect(dispatcher.queued(for: device).map(\.eventID) == ["e2", "e3"])
    }

    @Test func noBadgeNotificationDoesNotSupersede() {
        var dispatcher = DeviceDispatcher<String>()
        _ = dispatcher.enqueue(note(device, "e1", badge: 1, badgeOnly: true))
        _ = dispatcher.enqueue(note(device, "e2", badge: 2, badgeOnly: true))
        let step = dispatcher.enqueue(note(device, "e3", badge: nil, badgeOnly: false))
        #expect(step.superseded.isEmpty)
        #expect(dispatcher.queued(for: device).map(\.eventID) == ["e2", "e3"])
    }

    @Test func idleTokensAreForgottenAndOldTicketsStayStale() {
        var dispatcher = DeviceDispatcher<String>()
        let first = dispatcher.enqueue(note(device, "e1", badge: nil, badgeOnly: false)).send[0]
        _ = dispatcher.complete(first.ticket, outcome: .finished)
        #expect(dispatcher.activeTokenCount == 0)
        let second = dispatcher.enqueue(note(device, "e2", badge: nil, badgeOnly: false)).send[0]
        #expect(second.ticket != first.ticket)
        #expect(dispatcher.complete(first.ticket, outcome: .finished).send.isEmpty)
        #expect(dispatcher.inFlightTicket(for: device) == second.ticket)
    }

    /// A completion finds its token's queue by the ticket's slot, and a freed slot goes to the next new token: a
    /// ticket of the slot's previous token must not finish the new token's send.
    @Test func aReusedSlotDoesNotTakeTheTicketsOfItsPreviousToken() {
        var dispatcher = DeviceDispatcher<String>()
        let first = dispatcher.enqueue(note(device, "e1", badge: nil, badgeOnly: false)).send[0]
        _ = dispatcher.complete(first.ticket, outcome: .finished)
        let other = dispatcher.enqueue(note(self.other, "e2", badge: nil, badgeOnly: false)).send[0]
        _ = dispatcher.enqueue(note(self.other, "e3", badge: nil, badgeOnly: false))
        #expect(other.ticket.slot == first.ticket.slot)
        #expect(dispatcher.complete(first.ticket, outcome: .finished).send.isEmpty)
        #expect(dispatcher.complete(first.ticket, outcome: .retry).send.isEmpty)
        #expect(dispatcher.inFlightTicket(for: self.other) == other.ticket)
        #expect(dispatcher.inFlightTicket(for: device) == nil)
        #expect(dispatcher.queued(for: self.other).map(\.eventID) == ["e3"])
        #expect(dispatcher.complete(other.ticket, outcome: .finished).send.map(\.notification.eventID) == ["e3"])
        #expect(dispatcher.complete(DispatchTicket(slot: 99, serial: 1), outcome: .finished).send.isEmpty)
    }

    /// Thousands of tokens in flight at once, finished in an order unrelated to their arrival: each token keeps its
    /// own queue (found again after others around it left the index), and all of them leave.
    @Test func manyTokensComeAndGo() {
        var dispatcher = DeviceDispatcher<String>()
        let tokens = (0..<3_000).map { token($0) }
        var inFlight: [DeviceDispatch<String>] = []
        for (index, device) in tokens.enumerated() {
            inFlight += dispatcher.enqueue(note(device, "a\(index)", badge: nil, badgeOnly: false)).send
            #expect(dispatcher.enqueue(note(device, "b\(index)", badge: nil, badgeOnly: false)).send.isEmpty)
        }
        #expect(dispatcher.activeTokenCount == 3_000 && dispatcher.pendingCount == 6_000)
        var finished: [String: [String]] = [:]
        var order = 0
        while !inFlight.isEmpty {
            order = (order + 7_919) % inFlight.count
            let current = inFlight.remove(at: order)
            finished[current.notification.token, default: []].append(current.notification.eventID)
            inFlight += dispatcher.complete(current.ticket, outcome: .finished).send
        }
        #expect(finished.count == 3_000)
        #expect(tokens.enumerated().allSatisfy { finished[$1] == ["a\($0)", "b\($0)"] })
        #expect(dispatcher.activeTokenCount == 0 && dispatcher.pendingCount == 0)
    }

    @Test func drainQueuedReturnsWaitingNotifications() {
        var dispatcher = DeviceDispatcher<String>()
        _ = dispatcher.enqueue(note(device, "e1", badge: nil, badgeOnly: false))
        _ = dispatcher.enqueue(note(device, "e2", badge: nil, badgeOnly: false))
        #expect(dispatcher.drainQueued(for: device).map(\.eventID) == ["e2"])
        #expect(dispatcher.pendingCount == 1)
    }
}

@Suite struct DeviceDispatcherLongRunTests {
    /// A device whose queue never drains keeps order and keeps superseding correctly while the
    /// queue's storage is compacted behind it.
    @Test func steadyTrafficKeepsOrder() {
        var dispatcher = DeviceDispatcher<Int>()
        let device = token(9)
        var inFlight = dispatcher.enqueue(DeviceNotification(token: device, eventID: "e0", badge: 0, isBadgeOnly: false, payload: 0)).send
        var delivered: [Int] = []
        var superseded: [Int] = []
        for index in 1..<5_000 {
            let badgeOnly = index % 3 == 0
            let step = dispatcher.enqueue(DeviceNotification(token: device, eventID: "e\(index)", badge: Int64(index), isBadgeOnly: badgeOnly, payload: index))
            superseded += step.superseded.map(\.payload)
            inFlight += step.send
            if index % 2 == 0, let current = inFlight.popLast() {  // completes slower than it enqueues
                delivered.append(current.notification.payload)
                inFlight += dispatcher.complete(current.ticket, outcome: .finished).send
            }
        }
        while let current = inFlight.popLast() {
            delivered.append(current.notification.payload)
            inFlight += dispatcher.complete(current.ticket, outcome: .finished).send
        }
        #expect(zip(delivered, delivered.dropFirst()).allSatisfy { $0 < $1 })
        #expect(Set(delivered).union(superseded) == Set(0..<5_000))
        #expect(superseded.allSatisfy { $0 % 3 == 0 })
        #expect(dispatcher.pendingCount == 0 && dispatcher.activeTokenCount == 0)
    }
}
