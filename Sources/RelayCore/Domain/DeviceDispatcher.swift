// Per-device ordering: one notification in flight per token, sent in the order enqueued.

import DequeModule

/// A notification waiting for or in delivery to one device.
package struct DeviceNotification<Payload: Sendable>: Sendable {
    /// The device token (lower-case hex).
    package var token: String
    /// The event the notification comes from.
    package var eventID: String
    /// The badge it carries, if any.
    package var badge: Int64?
    /// True for a badge-only notification: the only kind that a newer badge may supersede.
    package var isBadgeOnly: Bool
    /// Whatever the sender needs (rendered payload, headers…).
    package var payload: Payload
    /// Which of the sends waiting for the sender it goes before (``SendWindow``): urgent ones pass bulk ones.
    package var deliveryClass: DeliveryClass

    /// Creates a notification.
    package init(token: String, eventID: String, badge: Int64?, isBadgeOnly: Bool, payload: Payload, deliveryClass: DeliveryClass = .bulk) {
        self.token = token
        self.eventID = eventID
        self.badge = badge
        self.isBadgeOnly = isBadgeOnly
        self.payload = payload
        self.deliveryClass = deliveryClass
    }
}

extension DeviceNotification: Equatable where Payload: Equatable {}

/// Identifies one send of one notification; a completion must present it, so a late or repeated
/// completion cannot release the device's next notification twice.
package struct DispatchTicket: Sendable, Hashable {
    /// Where the token's queue is in the dispatcher: a completion finds it without hashing the token.
    package let slot: Int32
    /// Increases with every send, over all tokens: a ticket matches only the send it was issued for,
    /// even after its slot went to another token.
    package let serial: UInt64

    /// A ticket for `serial` at `slot`.
    package init(slot: Int32, serial: UInt64) {
        self.slot = slot
        self.serial = serial
    }
}

/// A notification to send now. One immutable object: a send is handed on several times (to the window, the
/// sender, its completion on an event loop, the answer in the inbox), and each hand-over then retains one
/// reference rather than each of the notification's.
package final class DeviceDispatch<Payload: Sendable>: Sendable {
    /// Present it to ``DeviceDispatcher/complete(_:outcome:)`` when the send ends.
    package let ticket: DispatchTicket
    /// What to send.
    package let notification: DeviceNotification<Payload>
    /// 1 for the first send, 2 for the first retry…
    package let attempt: Int

    /// A send of `notification`.
    package init(ticket: DispatchTicket, notification: DeviceNotification<Payload>, attempt: Int) {
        self.ticket = ticket
        self.notification = notification
        self.attempt = attempt
    }
}

extension DeviceDispatch: Equatable where Payload: Equatable {
    package static func == (lhs: DeviceDispatch, rhs: DeviceDispatch) -> Bool {
        lhs.ticket == rhs.ticket && lhs.notification == rhs.notification && lhs.attempt == rhs.attempt
    }
}

/// What the dispatcher decided after an enqueue or completion.
package struct DispatchStep<Payload: Sendable>: Sendable {
    /// Send this now. One at most: an enqueue or a completion concerns one token, which has one send in flight.
    package var dispatch: DeviceDispatch<Payload>?
    /// These will not be sent: a newer badge for the same device replaced them (result `superseded`).
    package var superseded: [DeviceNotification<Payload>] = []
}

extension DispatchStep: Equatable where Payload: Equatable {}

/// How a send ended.
package enum DispatchOutcome: Sendable, Equatable {
    /// Final (delivered, rejected, unregistered, failed…): the token's next notification may go.
    case finished
    /// Send the same notification again; it keeps the slot, so nothing newer overtakes it.
    case retry
}

/// Per device token: a FIFO queue in the order notifications are enqueued (the ledger's apply
/// order, hence seq order), at most one in flight. Before a notification carrying a badge is
/// queued, queued (not in flight) badge-only notifications of the token are superseded: the
/// device then goes straight to the newer count. Alerts are never dropped. Because a token's
/// next notification is released only when the previous one finished, a device never receives
/// an older badge after a newer one, whatever order completions arrive in.
package struct DeviceDispatcher<Payload: Sendable>: Sendable {
    private struct InFlight: Sendable {
        var notification: DeviceNotification<Payload>
        var serial: UInt64
        var attempt: Int
    }

    private struct DeviceQueue: Sendable {
        /// The token; empty while the slot is free.
        var token: String
        /// The token's hash bits in `index`, kept so removing the token never hashes it again.
        var hashBits: UInt32
        var inFlight: InFlight?
        var queued: Deque<DeviceNotification<Payload>> = []
        // Badge-only notifications among the queued ones (at most one after any enqueue), so
        // alert-heavy queues are not scanned on every enqueue.
        var queuedBadgeOnly = 0

        var isIdle: Bool { inFlight == nil && queued.isEmpty }

        mutating func start(_ notification: DeviceNotification<Payload>, attempt: Int, serial: UInt64, slot: Int32) -> DeviceDispatch<Payload> {
            inFlight = InFlight(notification: notification, serial: serial, attempt: attempt)
            return DeviceDispatch(ticket: DispatchTicket(slot: slot, serial: serial), notification: notification, attempt: attempt)
        }

        /// Supersedes queued badge-only notifications when `notification` carries a badge, then
        /// queues it, or sends it when nothing is in flight.
        mutating func enqueue(_ notification: DeviceNotification<Payload>, serial: UInt64, slot: Int32) -> DispatchStep<Payload> {
            var step = DispatchStep<Payload>()
            if notification.badge != nil, queuedBadgeOnly > 0 {
                step.superseded = queued.filter(\.isBadgeOnly)
                queued.removeAll(where: \.isBadgeOnly)
                queuedBadgeOnly = 0
            }
            queued.append(notification)
            if notification.isBadgeOnly { queuedBadgeOnly += 1 }
            if inFlight == nil, let next = popFirst() {
                step.dispatch = start(next, attempt: 1, serial: serial, slot: slot)
            }
            return step
        }

        mutating func popFirst() -> DeviceNotification<Payload>? {
            guard let first = queued.popFirst() else { return nil }
            if first.isBadgeOnly { queuedBadgeOnly -= 1 }
            return first
        }

        /// Ends the send in flight if `ticketSerial` is its ticket's (else `matched` is false and nothing
        /// changes): `.retry` sends it again, `.finished` sends the next queued notification, as `serial`.
        mutating func complete(_ ticketSerial: UInt64, outcome: DispatchOutcome, serial: UInt64, slot: Int32)
            -> (matched: Bool, dispatch: DeviceDispatch<Payload>?) {
            guard inFlight?.serial == ticketSerial else { return (false, nil) }
            switch outcome {
            case .retry:
                let current = inFlight.take()!
                return (true, start(current.notification, attempt: current.attempt + 1, serial: serial, slot: slot))
            case .finished:
                inFlight = nil
                guard let next = popFirst() else { return (true, nil) }
                return (true, start(next, attempt: 1, serial: serial, slot: slot))
            }
        }
    }

    // A token with something queued or in flight has a slot; an idle token has none, so memory
    // follows the traffic (its peak: freed slots are reused, not returned), not the user count.
    // The token is hashed once per enqueue; a completion goes straight to its ticket's slot.
    private var queues: [DeviceQueue] = []
    private var freeSlots: [Int32] = []
    private var index = SlotIndex()
    // One counter for all tokens: a slot is reused by other tokens, and a per-slot counter would
    // restart and let a stale ticket match a newer send.
    private var nextSerial: UInt64 = 1
    /// Notifications queued or in flight, over all tokens.
    package private(set) var pendingCount = 0

    /// An empty dispatcher.
    package init() {}

    /// Tokens with something queued or in flight.
    package var activeTokenCount: Int { index.count }

    /// Queued (not in flight) notifications of `token`, oldest first.
    package func queued(for token: String) -> [DeviceNotification<Payload>] {
        guard let slot = slot(of: token, hashBits: SlotIndex.hashBits(of: token)) else { return [] }
        return Array(queues[Int(slot)].queued)
    }

    /// The ticket of the send in flight to `token`, if any.
    package func inFlightTicket(for token: String) -> DispatchTicket? {
        guard let slot = slot(of: token, hashBits: SlotIndex.hashBits(of: token)),
              let inFlight = queues[Int(slot)].inFlight else { return nil }
        return DispatchTicket(slot: slot, serial: inFlight.serial)
    }

    /// Queues `notification` for its token; returns it to send at once when the token is idle,
    /// and the queued badge-only notifications it supersedes.
    package mutating func enqueue(_ notification: DeviceNotification<Payload>) -> DispatchStep<Payload> {
        let serial = takeSerial()
        pendingCount += 1
        let hashBits = SlotIndex.hashBits(of: notification.token)
        guard let slot = slot(of: notification.token, hashBits: hashBits) else {
            // An idle token, the common case: send at once, nothing queued.
            let slot = occupySlot(token: notification.token, hashBits: hashBits)
            return DispatchStep(dispatch: queues[Int(slot)].start(notification, attempt: 1, serial: serial, slot: slot), superseded: [])
        }
        let step = queues[Int(slot)].enqueue(notification, serial: serial, slot: slot)
        pendingCount -= step.superseded.count
        return step
    }

    /// Ends the send identified by `ticket`. `.retry` sends the same notification again (next
    /// attempt); `.finished` releases the token's next notification. A ticket that is not the
    /// token's current send (late, repeated) changes nothing and returns an empty step.
    package mutating func complete(_ ticket: DispatchTicket, outcome: DispatchOutcome) -> DispatchStep<Payload> {
        let slot = ticket.slot
        guard slot >= 0, Int(slot) < queues.count else { return DispatchStep() }
        // In place: reading the slot's send in flight through the array's getter copied the whole queue.
        let (matched, dispatch) = queues[Int(slot)].complete(ticket.serial, outcome: outcome, serial: takeSerial(), slot: slot)
        guard matched else { return DispatchStep() }
        if outcome == .finished {
            pendingCount -= 1
            if dispatch == nil { freeSlot(slot) }  // idle tokens take no slot
        }
        return DispatchStep(dispatch: dispatch, superseded: [])
    }

    /// Removes everything queued for `token` (e.g. it was unregistered); an in-flight send still
    /// completes normally. Returns the removed notifications so their results can be published.
    package mutating func drainQueued(for token: String) -> [DeviceNotification<Payload>] {
        guard let slot = slot(of: token, hashBits: SlotIndex.hashBits(of: token)) else { return [] }
        let removed = Array(queues[Int(slot)].queued)
        queues[Int(slot)].queued = []
        queues[Int(slot)].queuedBadgeOnly = 0
        pendingCount -= removed.count
        if queues[Int(slot)].isIdle { freeSlot(slot) }
        return removed
    }

    /// Removes every queued (not in flight) notification that `shouldRemove` picks, across all
    /// tokens (e.g. those of a partition being handed over); in-flight sends still complete
    /// normally. Returns the removed notifications.
    package mutating func removeQueued(where shouldRemove: (DeviceNotification<Payload>) -> Bool) -> [DeviceNotification<Payload>] {
        var removed: [DeviceNotification<Payload>] = []
        for position in queues.indices where !queues[position].queued.isEmpty {
            let taken = queues[position].queued.filter(shouldRemove)
            guard !taken.isEmpty else { continue }
            removed += taken
            queues[position].queued.removeAll(where: shouldRemove)
            queues[position].queuedBadgeOnly = queues[position].queued.filter(\.isBadgeOnly).count
            if queues[position].isIdle { freeSlot(Int32(position)) }
        }
        pendingCount -= removed.count
        return removed
    }

    /// Queues are read through the buffer, as ``DeviceRegistry`` reads its entries: `queues[i].token` went through
    /// the array's element getter, which copies the whole queue to read one field.
    private func slot(of token: String, hashBits: UInt32) -> Int32? {
        queues.withUnsafeBufferPointer { queues in index.first(hash: hashBits) { queues[Int($0)].token == token } }
    }

    private mutating func occupySlot(token: String, hashBits: UInt32) -> Int32 {
        let slot: Int32
        if let free = freeSlots.popLast() {
            slot = free
            queues[Int(slot)].token = token
            queues[Int(slot)].hashBits = hashBits
        } else {
            slot = Int32(queues.count)
            queues.append(DeviceQueue(token: token, hashBits: hashBits))
        }
        index.insert(hash: hashBits, slot: slot)
        return slot
    }

    private mutating func freeSlot(_ slot: Int32) {
        index.remove(hash: queues[Int(slot)].hashBits, slot: slot)
        queues[Int(slot)].token = ""
        // The queue's storage goes with the token: a slot kept for reuse must not hold a burst's deep queue.
        queues[Int(slot)].queued = []
        freeSlots.append(slot)
    }

    private mutating func takeSerial() -> UInt64 {
        defer { nextSerial += 1 }
        return nextSerial
    }
}
