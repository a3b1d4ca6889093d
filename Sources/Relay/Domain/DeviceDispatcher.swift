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

    /// Creates a notification.
    package init(token: String, eventID: String, badge: Int64?, isBadgeOnly: Bool, payload: Payload) {
        self.token = token
        self.eventID = eventID
        self.badge = badge
        self.isBadgeOnly = isBadgeOnly
        self.payload = payload
    }
}

extension DeviceNotification: Equatable where Payload: Equatable {}

/// Identifies one send of one notification; a completion must present it, so a late or repeated
/// completion cannot release the device's next notification twice.
package struct DispatchTicket: Sendable, Hashable {
    /// The device token.
    package let token: String
    /// Increases with every send to the token.
    package let serial: UInt64
}

/// A notification to send now.
package struct DeviceDispatch<Payload: Sendable>: Sendable {
    /// Present it to ``DeviceDispatcher/complete(_:outcome:)`` when the send ends.
    package let ticket: DispatchTicket
    /// What to send.
    package let notification: DeviceNotification<Payload>
    /// 1 for the first send, 2 for the first retry…
    package let attempt: Int
}

extension DeviceDispatch: Equatable where Payload: Equatable {}

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
        var inFlight: InFlight?
        var queued: Deque<DeviceNotification<Payload>> = []
        // Badge-only notifications among the queued ones (at most one after any enqueue), so
        // alert-heavy queues are not scanned on every enqueue.
        var queuedBadgeOnly = 0

        var queuedCount: Int { queued.count }

        mutating func start(_ notification: DeviceNotification<Payload>, attempt: Int, serial: UInt64) -> DeviceDispatch<Payload> {
            inFlight = InFlight(notification: notification, serial: serial, attempt: attempt)
            return DeviceDispatch(ticket: DispatchTicket(token: notification.token, serial: serial), notification: notification, attempt: attempt)
        }

        /// Supersedes queued badge-only notifications when `notification` carries a badge, then
        /// queues it, or sends it when nothing is in flight.
        mutating func enqueue(_ notification: DeviceNotification<Payload>, serial: UInt64) -> DispatchStep<Payload> {
            var step = DispatchStep<Payload>()
            if notification.badge != nil, queuedBadgeOnly > 0 {
                step.superseded = queued.filter(\.isBadgeOnly)
                queued.removeAll(where: \.isBadgeOnly)
                queuedBadgeOnly = 0
            }
            queued.append(notification)
            if notification.isBadgeOnly { queuedBadgeOnly += 1 }
            if inFlight == nil, let next = popFirst() {
                step.dispatch = start(next, attempt: 1, serial: serial)
            }
            return step
        }

        mutating func popFirst() -> DeviceNotification<Payload>? {
            guard let first = queued.popFirst() else { return nil }
            if first.isBadgeOnly { queuedBadgeOnly -= 1 }
            return first
        }
    }

    // Idle tokens have no entry, so the dispatcher's memory follows the traffic, not the user count.
    private var devices: [String: DeviceQueue] = [:]
    // One counter for all tokens: an idle token's entry is removed, and a per-token counter
    // would restart and let a stale ticket match a newer send.
    private var nextSerial: UInt64 = 1
    /// Notifications queued or in flight, over all tokens.
    package private(set) var pendingCount = 0

    /// An empty dispatcher.
    package init() {}

    /// Tokens with something queued or in flight.
    package var activeTokenCount: Int { devices.count }

    /// Queued (not in flight) notifications of `token`, oldest first.
    package func queued(for token: String) -> [DeviceNotification<Payload>] {
        guard let queue = devices[token] else { return [] }
        return Array(queue.queued)
    }

    /// The ticket of the send in flight to `token`, if any.
    package func inFlightTicket(for token: String) -> DispatchTicket? {
        guard let inFlight = devices[token]?.inFlight else { return nil }
        return DispatchTicket(token: token, serial: inFlight.serial)
    }

    /// Queues `notification` for its token; returns it to send at once when the token is idle,
    /// and the queued badge-only notifications it supersedes.
    package mutating func enqueue(_ notification: DeviceNotification<Payload>) -> DispatchStep<Payload> {
        // A serial is reserved up front so the queue can be changed in place inside the table
        // (copying it out would make its storage shared and copy it on every change).
        let serial = takeSerial()
        pendingCount += 1
        // One lookup of the token (hashing it twice, to find and then to insert, showed in profiles).
        func enqueue(into queue: inout DeviceQueue) -> DispatchStep<Payload> {
            // A new queue is an idle token (idle tokens have no entry), the common case: send at once, nothing queued.
            guard queue.inFlight != nil || queue.queuedCount > 0 else {
                return DispatchStep(dispatch: queue.start(notification, attempt: 1, serial: serial), superseded: [])
            }
            return queue.enqueue(notification, serial: serial)
        }
        let step = enqueue(into: &devices[notification.token, default: DeviceQueue()])
        pendingCount -= step.superseded.count
        return step
    }

    /// Ends the send identified by `ticket`. `.retry` sends the same notification again (next
    /// attempt); `.finished` releases the token's next notification. A ticket that is not the
    /// token's current send (late, repeated) changes nothing and returns an empty step.
    package mutating func complete(_ ticket: DispatchTicket, outcome: DispatchOutcome) -> DispatchStep<Payload> {
        guard let index = devices.index(forKey: ticket.token),
              let inFlight = devices.values[index].inFlight, inFlight.serial == ticket.serial else {
            return DispatchStep()
        }
        let serial = takeSerial()
        var step = DispatchStep<Payload>()
        switch outcome {
        case .retry:
            step.dispatch = devices.values[index].start(inFlight.notification, attempt: inFlight.attempt + 1, serial: serial)
        case .finished:
            pendingCount -= 1
            devices.values[index].inFlight = nil
            if let next = devices.values[index].popFirst() {
                step.dispatch = devices.values[index].start(next, attempt: 1, serial: serial)
            } else {
                devices.remove(at: index)  // idle tokens take no memory
            }
        }
        return step
    }

    /// Removes everything queued for `token` (e.g. it was unregistered); an in-flight send still
    /// completes normally. Returns the removed notifications so their results can be published.
    package mutating func drainQueued(for token: String) -> [DeviceNotification<Payload>] {
        guard var queue = devices[token] else { return [] }
        let removed = Array(queue.queued)
        queue.queued = []
        queue.queuedBadgeOnly = 0
        pendingCount -= removed.count
        devices[token] = queue.inFlight == nil ? nil : queue
        return removed
    }

    /// Removes every queued (not in flight) notification that `shouldRemove` picks, across all
    /// tokens (e.g. those of a partition being handed over); in-flight sends still complete
    /// normally. Returns the removed notifications.
    package mutating func removeQueued(where shouldRemove: (DeviceNotification<Payload>) -> Bool) -> [DeviceNotification<Payload>] {
        var removed: [DeviceNotification<Payload>] = []
        for token in Array(devices.keys) {
            guard var queue = devices[token], queue.queuedCount > 0 else { continue }
            let taken = queue.queued.filter(shouldRemove)
            guard !taken.isEmpty else { continue }
            removed += taken
            queue.queued.removeAll(where: shouldRemove)
            queue.queuedBadgeOnly = queue.queued.filter(\.isBadgeOnly).count
            devices[token] = queue.inFlight == nil && queue.queued.isEmpty ? nil : queue
        }
        pendingCount -= removed.count
        return removed
    }

    private mutating func takeSerial() -> UInt64 {
        defer { nextSerial += 1 }
        return nextSerial
    }
}
