// Per-device order and the window of sends handed to the sender.

import DequeModule

/// The notifications between fan-out and APNs' answer: per device one in flight, in the order
/// enqueued (``DeviceDispatcher``), and at most `capacity` sends handed to the sender at once (its
/// queue is sized by it, so a full queue is backpressure, never a result). Sends released beyond
/// the window, or while sending is not allowed (the ownership lease lapsed), wait here one per
/// device, so per-device order holds: urgent ones (``DeliveryClass``) in release order before bulk
/// ones in release order, so an alert never waits behind a flood of background pushes. Pure: the engine feeds it what happened and
/// performs the sends it answers.
package struct SendWindow<Payload: Sendable>: Sendable {
    /// What to do after an input. The caller passes one in and may keep it for the next input, emptied
    /// (``removeAll()``): its arrays keep their storage, so a step costs no allocation per notification.
    package struct Step: Sendable {
        /// Hand these to the sender now.
        package var send: [DeviceDispatch<Payload>] = []
        /// These will not be sent: a newer badge for the same device replaced them.
        package var superseded: [DeviceNotification<Payload>] = []

        /// An empty step.
        package init() {}

        /// Empties the step, keeping its storage.
        package mutating func removeAll() {
            send.removeAll(keepingCapacity: true)
            superseded.removeAll(keepingCapacity: true)
        }
    }

    /// Sends handed to the sender and not answered, at most, whatever the sender takes (`relay.max_in_flight`).
    package let limit: Int
    /// Sends handed to the sender and not answered, at most, now: the sender's streams and a tenth more (so that a
    /// stream freed by an answer finds a send waiting in the sender while the next ones come), within ``limit``;
    /// ``limit`` while the sender's streams are unknown. Sends beyond the sender's streams would only wait in its
    /// queue, where at the window's full size they cost the sender more per send than they do here.
    package private(set) var capacity: Int
    private var dispatcher = DeviceDispatcher<Payload>()
    /// Released by the dispatcher, not handed to the sender yet, in release order: urgent, bulk (``DeliveryClass``).
    private var ready: [Deque<DeviceDispatch<Payload>>] = [[], []]
    /// Sends handed to the sender and not answered.
    package private(set) var outstanding = 0
    /// Notifications enqueued and not answered or superseded (queued, ready or outstanding).
    package private(set) var inFlight = 0

    /// A window of `capacity` sends.
    package init(capacity: Int) {
        self.limit = max(1, capacity)
        self.capacity = limit
    }

    /// The sender can have `streams` sends on the wire at once now (`nil`: unknown): the window follows. A larger
    /// window hands the sends waiting here to the sender.
    package mutating func senderStreamsChanged(_ streams: Int?, maySend: Bool) -> [DeviceDispatch<Payload>] {
        capacity = streams.map { min(limit, max(1, $0 + $0 / 10)) } ?? limit
        return release(maySend: maySend)
    }

    /// Enqueues a notification; `maySend` says whether sends may go to the sender now. What follows is added to `step`.
    package mutating func enqueue(_ notification: DeviceNotification<Payload>, maySend: Bool, into step: inout Step) {
        inFlight += 1
        take(dispatcher.enqueue(notification), maySend: maySend, into: &step)
    }

    /// The sender answered `dispatch` (finally): the device's next notification may go. What follows is added to `step`.
    package mutating func answered(_ dispatch: DeviceDispatch<Payload>, maySend: Bool, into step: inout Step) {
        outstanding -= 1
        inFlight -= 1
        take(dispatcher.complete(dispatch.ticket, outcome: .finished), maySend: maySend, into: &step)
        release(maySend: maySend, into: &step.send)
    }

    /// The sender gave `dispatch` back unsent (refused past the lease): it waits again, first in
    /// line, keeping its device's slot, so nothing of the device overtakes it.
    package mutating func handedBack(_ dispatch: DeviceDispatch<Payload>, maySend: Bool) -> [DeviceDispatch<Payload>] {
        outstanding -= 1
        ready[Self.lane(of: dispatch)].prepend(dispatch)
        return release(maySend: maySend)
    }

    /// Drops what `leaving` selects and has not been handed to the sender (queued per device, or
    /// released and waiting here): their records stay unfinished for the next owner. Each dropped
    /// release frees its device's slot for the device's next notification (not selected).
    package mutating func drop(where leaving: (Payload) -> Bool, maySend: Bool) -> (dropped: [DeviceNotification<Payload>], step: Step) {
        var dropped = dispatcher.removeQueued { leaving($0.payload) }
        let releasedUnsent = ready.flatMap { $0.filter { leaving($0.notification.payload) } }
        for index in ready.indices { ready[index].removeAll { leaving($0.notification.payload) } }
        var step = Step()
        for dispatch in releasedUnsent {
            dropped.append(dispatch.notification)
            take(dispatcher.complete(dispatch.ticket, outcome: .finished), maySend: maySend, into: &step)
        }
        inFlight -= dropped.count
        return (dropped, step)
    }

    /// Hands waiting sends to the sender while the window has room and sending is allowed.
    package mutating func release(maySend: Bool) -> [DeviceDispatch<Payload>] {
        var sends: [DeviceDispatch<Payload>] = []
        release(maySend: maySend, into: &sends)
        return sends
    }

    private mutating func release(maySend: Bool, into sends: inout [DeviceDispatch<Payload>]) {
        guard maySend else { return }
        while outstanding < capacity, let next = ready[0].popFirst() ?? ready[1].popFirst() {
            sends.append(next)
            outstanding += 1
        }
    }

    /// Whether sends wait here (beyond the window or for the lease).
    package var hasWaiting: Bool { !ready[0].isEmpty || !ready[1].isEmpty }

    private static func lane(of dispatch: DeviceDispatch<Payload>) -> Int { Int(dispatch.notification.deliveryClass.rawValue) }

    /// The dispatcher's sends go out while the window has room, none overtaking one of its class
    /// or a more urgent one already waiting; superseded notifications leave the count.
    private mutating func take(_ dispatched: consuming DispatchStep<Payload>, maySend: Bool, into step: inout Step) {
        if !dispatched.superseded.isEmpty {
            inFlight -= dispatched.superseded.count
            step.superseded += dispatched.superseded
        }
        guard let dispatch = dispatched.dispatch.take() else { return }
        let lane = Self.lane(of: dispatch)
        if maySend && outstanding < capacity && ready[0].isEmpty && (lane == 0 || ready[1].isEmpty) {
            outstanding += 1
            step.send.append(dispatch)
        } else {
            ready[lane].append(dispatch)
        }
    }
}
