import DequeModule
package import NIOCore

/// The connection pool of one endpoint and credential, as a pure, deterministic state machine.
///
/// The machine owns no I/O: every event (time is an input too) returns ``Actions`` that the supervisor
/// executes. A device token's hash picks a slot; each slot holds at most one live connection, so a device's
/// notifications share a connection while it lives. Connections open at most one per
/// `minimumConnectSpacing`, reconnect with exponential backoff and jitter, and never exceed the peer's
/// SETTINGS_MAX_CONCURRENT_STREAMS. Waiting requests are bounded by `maxQueued`; each waits for a stream, also
/// through connect failures, until its own deadline.
package struct APNsPoolStateMachine: Sendable {
    package typealias Configuration = APNsPoolConfiguration

    /// The pool's lifecycle.
    package enum Lifecycle: Sendable, Hashable { case idle, running, draining, shutDown }

    package let configuration: Configuration
    /// The current lifecycle.
    package private(set) var lifecycle: Lifecycle = .idle
    private(set) var slots: [Slot]
    private(set) var connections = ConnectionTable<Connection>()
    private var closedBeforeEstablished: Set<APNsConnectionID> = []
    /// Limits announced between the handshake and `connectionEstablished` (the events race across threads).
    private var earlyLimits: [APNsConnectionID: Int] = [:]
    private var nextConnectionID = 0
    /// The slots were asked to connect (at start, or at the first request when connecting on demand).
    private var connectionsOpened = false
    private var lastConnectStart: NIODeadline?
    /// Requests waiting for a stream, by id.
    private var waiting: [APNsRequestID: WaitingRequest] = [:]
    /// The wait deadlines of waiting requests, earliest first (with entries of requests no longer waiting).
    private var deadlines = WaitDeadlines<APNsRequestID>()
    /// Waiting requests that have a deadline.
    private var waitingWithDeadline = 0
    /// Wait timers handed out and not yet fired, earliest first.
    private var waitTimers: [NIODeadline] = []

    /// Changes whenever a slot changes state or a connection goes away or closes: the supervisor recounts
    /// ``connectionStateCounts`` only then, not on each of the several events per notification.
    package private(set) var connectionStatesVersion: UInt64 = 0

    /// Requests waiting for a stream.
    package var queuedCount: Int { waiting.count }

    /// Creates the machine.
    package init(configuration: Configuration) {
        self.configuration = configuration
        self.slots = Array(repeating: Slot(), count: configuration.connections)
    }

    // MARK: events

    /// Starts the pool: opens the connections, spaced apart; with `connectsOnDemand`, only if requests already wait.
    package mutating func start(now: NIODeadline) -> Actions {
        var actions = Actions()
        guard lifecycle == .idle else { return actions }
        lifecycle = .running
        if !configuration.connectsOnDemand || queuedCount > 0 { openConnections(now: now, actions: &actions) }
        return actions
    }

    /// A caller wants to send a notification whose token hashes to `hash`.
    ///
    /// Without a free stream the request waits, also while no connection can be opened (APNs unreachable): a
    /// connect failure costs it nothing. It waits until `deadline` at most; then
    /// ``waitDeadlinePassed(now:)`` fails it with `.noConnection`.
    package mutating func enqueue(_ request: APNsRequestID, hash: UInt64, waitingUntil deadline: NIODeadline? = nil, now: NIODeadline) -> Actions {
        var actions = Actions()
        guard lifecycle == .running || lifecycle == .idle else {
            actions.fail.append(.init(request: request, reason: .shuttingDown))
            return actions
        }
        if let id = dispatchImmediately(hash: hash) {
            actions.dispatch.append(.init(request: request, connection: id))
            return actions
        }
        if let deadline, deadline <= now {
            actions.fail.append(.init(request: request, reason: .noConnection))
            return actions
        }
        let slot = targetSlot(hash: hash)
        guard queuedCount < configuration.maxQueued else {
            actions.fail.append(.init(request: request, reason: .overloaded))
            return actions
        }
        slots[slot].queue.append(request)
        waiting[request] = WaitingRequest(slot: slot, deadline: deadline)
        if let deadline {
            waitingWithDeadline += 1
            deadlines.insert(deadline, request)
            armWaitTimer(actions: &actions)
        }
        if lifecycle == .running && !connectionsOpened { openConnections(now: now, actions: &actions) }
        return actions
    }

    /// Takes a request for the connection its hash maps to when that connection is ready, has room, and nobody is
    /// queued ahead (so per-token order holds); returns `nil` otherwise, and then the request must be `enqueue`d.
    /// The common case of ``enqueue(_:hash:now:)`` without a request id: the caller need not wait to be dispatched.
    package mutating func dispatchImmediately(hash: UInt64) -> APNsConnectionID? {
        guard lifecycle == .running || lifecycle == .idle else { return nil }
        let slot = targetSlot(hash: hash)
        guard case .ready(let id) = slots[slot].state, !slots[slot].hasWaiting, let index = connections.index(of: id),
            connections[at: index].inFlight < connections[at: index].maxStreams
        else { return nil }
        connections[at: index].inFlight += 1
        return id
    }

    /// A dispatched request finished on `connection` (with any result).
    package mutating func requestFinished(connection id: APNsConnectionID, delivered: Bool) -> Actions {
        var actions = Actions()
        // Changed in place: one lookup per answer.
        guard let index = connections.index(of: id) else { return actions }
        connections[at: index].inFlight -= 1
        let connection = connections[at: index]
        if connection.goingAway {
            if connection.inFlight == 0 { actions.close.append(.init(connection: id, graceful: false)) }
        } else {
            if delivered { slots[connection.slot].failures = 0 }
            dispatchQueued(slot: connection.slot, actions: &actions)
        }
        checkDrained(actions: &actions)
        return actions
    }

    /// A connection finished its handshake.
    package mutating func connectionEstablished(slot: Int, id: APNsConnectionID, maxStreams: Int, now: NIODeadline) -> Actions {
        var actions = Actions()
        if closedBeforeEstablished.remove(id) != nil {
            earlyLimits[id] = nil
            return connectFailed(slot: slot, id: id, now: now, jitter: 0.5)
        }
        guard slots.indices.contains(slot), slots[slot].state == .connecting(id), lifecycle != .shutDown else {
            actions.close.append(.init(connection: id, graceful: true))
            return actions
        }
        setState(.ready(id), of: slot)
        let limit = earlyLimits.removeValue(forKey: id) ?? maxStreams
        connections[id] = Connection(slot: slot, maxStreams: max(0, limit), inFlight: 0, goingAway: false)
        // Requests stranded on slots without a live connection move here.
        for other in slots.indices where other != slot && !isReady(other) && slots[other].hasWaiting {
            moveWaiting(from: other, to: slot)
        }
        dispatchQueued(slot: slot, actions: &actions)
        return actions
    }

    /// A connection attempt failed.
    package mutating func connectFailed(slot: Int, id: APNsConnectionID, now: NIODeadline, jitter: Double) -> Actions {
        var actions = Actions()
        guard slots.indices.contains(slot), slots[slot].state == .connecting(id) else { return actions }
        setState(.idle, of: slot)
        slots[slot].failures += 1
        slotLost(slot: slot, now: now, jitter: jitter, actions: &actions)
        return actions
    }

    /// The peer changed SETTINGS_MAX_CONCURRENT_STREAMS.
    package mutating func maxStreamsChanged(connection id: APNsConnectionID, limit: Int) -> Actions {
        var actions = Actions()
        guard var connection = connections[id] else {
            if slots.contains(where: { $0.state == .connecting(id) }) { earlyLimits[id] = limit }
            return actions
        }
        connection.maxStreams = max(0, limit)
        connections[id] = connection
        if !connection.goingAway { dispatchQueued(slot: connection.slot, actions: &actions) }
        return actions
    }

    /// The peer sent GOAWAY: no new streams on this connection; its slot gets a new connection.
    package mutating func connectionGoingAway(_ id: APNsConnectionID, now: NIODeadline) -> Actions {
        var actions = Actions()
        guard var connection = connections[id], !connection.goingAway else { return actions }
        connection.goingAway = true
        connections[id] = connection
        connectionStatesVersion &+= 1
        if connection.inFlight == 0 { actions.close.append(.init(connection: id, graceful: false)) }
        let slot = connection.slot
        if slots[slot].state == .ready(id) {
            setState(.idle, of: slot)
            slotLost(slot: slot, now: now, jitter: 0, reconnectAfterFailure: false, actions: &actions)
        }
        checkDrained(actions: &actions)
        return actions
    }

    /// A connection closed (for any reason).
    package mutating func connectionClosed(_ id: APNsConnectionID, now: NIODeadline, jitter: Double) -> Actions {
        var actions = Actions()
        guard let connection = connections.removeValue(for: id) else {
            if slots.contains(where: { $0.state == .connecting(id) }) { closedBeforeEstablished.insert(id) }
            return actions
        }
        connectionStatesVersion &+= 1
        let slot = connection.slot
        if slots[slot].state == .ready(id) {
            setState(.idle, of: slot)
            slots[slot].failures += 1
            slotLost(slot: slot, now: now, jitter: jitter, actions: &actions)
        }
        checkDrained(actions: &actions)
        return actions
    }

    /// A timer requested earlier fired.
    package mutating func timerFired(slot: Int, now: NIODeadline) -> Actions {
        var actions = Actions()
        guard lifecycle == .running, slots.indices.contains(slot), case .waiting = slots[slot].state else { return actions }
        setState(.idle, of: slot)
        requestConnect(slot: slot, earliest: now, now: now, actions: &actions)
        return actions
    }

    /// Graceful drain: accept nothing new, let queued and in-flight work finish; then close every connection.
    package mutating func drain() -> Actions {
        var actions = Actions()
        guard lifecycle == .running || lifecycle == .idle else { return actions }
        lifecycle = .draining
        for slot in slots.indices where !isReady(slot) {
            if case .waiting = slots[slot].state { setState(.idle, of: slot) }
            if slots[slot].hasWaiting { rehome(slot: slot, actions: &actions) }
        }
        checkDrained(actions: &actions)
        return actions
    }

    /// The drain deadline passed: fail what still waits, close every connection now.
    package mutating func drainDeadlinePassed() -> Actions {
        var actions = Actions()
        guard lifecycle == .draining || lifecycle == .running else { return actions }
        for slot in slots.indices {
            for request in takeWaiting(slot: slot) {
                actions.fail.append(.init(request: request, reason: .shuttingDown))
            }
        }
        finishShutdown(actions: &actions)
        return actions
    }

    /// A wait timer fired: requests still waiting at their deadline fail with `.noConnection` (the caller gives
    /// up, or reports the notification expired when the deadline was its `apns-expiration`).
    package mutating func waitDeadlinePassed(now: NIODeadline) -> Actions {
        var actions = Actions()
        waitTimers.removeAll { $0 <= now }
        while let first = deadlines.first, first.key <= now {
            deadlines.removeFirst()
            if stopWaiting(first.value) { actions.fail.append(.init(request: first.value, reason: .noConnection)) }
        }
        armWaitTimer(actions: &actions)
        checkDrained(actions: &actions)
        return actions
    }

    /// The caller gave up on a request. If it still waits, it leaves its queue and fails with `.cancelled`: it is
    /// never dispatched. A dispatched request is left alone; ``requestFinished(connection:delivered:)`` ends it.
    package mutating func cancel(_ request: APNsRequestID) -> Actions {
        var actions = Actions()
        guard stopWaiting(request) else { return actions }
        actions.fail.append(.init(request: request, reason: .cancelled))
        checkDrained(actions: &actions)
        return actions
    }

    // MARK: internals

    private func isReady(_ slot: Int) -> Bool {
        if case .ready(let id) = slots[slot].state, let connection = connections[id], !connection.goingAway { return true }
        return false
    }

    private func targetSlot(hash: UInt64) -> Int {
        let preferred = preferredSlot(hash: hash)
        if isReady(preferred) { return preferred }
        for step in 1..<max(1, slots.count) {
            let slot = (preferred + step) % slots.count
            if isReady(slot) { return slot }
        }
        return preferred
    }

    private mutating func dispatchQueued(slot: Int, actions: inout Actions) {
        guard case .ready(let id) = slots[slot].state, var connection = connections[id], !connection.goingAway else { return }
        while connection.inFlight < connection.maxStreams, let request = popWaiting(slot: slot) {
            connection.inFlight += 1
            actions.dispatch.append(.init(request: request, connection: id))
        }
        connections[id] = connection
    }

    /// The first request of a slot's queue still waiting, out of the queue; stale entries before it are dropped.
    private mutating func popWaiting(slot: Int) -> APNsRequestID? {
        while let request = slots[slot].queue.popFirst() {
            if forget(request) != nil { return request }
            slots[slot].stale -= 1
        }
        return nil
    }

    /// Empties a slot's queue; returns the requests still waiting, in order, no longer counted as waiting.
    private mutating func takeWaiting(slot: Int) -> [APNsRequestID] {
        let queued = Array(slots[slot].queue)
        slots[slot].queue.removeAll()
        let requests = queued.filter { forget($0) != nil }
        slots[slot].stale = 0
        return requests
    }

    /// Moves a slot's waiting requests to the end of another slot's queue, in order.
    private mutating func moveWaiting(from source: Int, to target: Int) {
        let queued = Array(slots[source].queue)
        slots[source].queue.removeAll()
        let requests = queued.filter { waiting[$0] != nil }
        slots[source].stale = 0
        for request in requests {
            slots[target].queue.append(request)
            waiting[request]?.slot = target
        }
    }

    /// Takes a request out of the waiting set, wherever it is in its queue (its entry turns stale); false when it
    /// is not waiting.
    private mutating func stopWaiting(_ request: APNsRequestID) -> Bool {
        guard let entry = forget(request) else { return false }
        slots[entry.slot].stale += 1
        // Skipped entries cost memory until met: drop them once they are half the queue.
        if slots[entry.slot].stale > 64, slots[entry.slot].stale * 2 > slots[entry.slot].queue.count {
            let waiting = self.waiting
            slots[entry.slot].queue.removeAll { waiting[$0] == nil }
            slots[entry.slot].stale = 0
        }
        return true
    }

    /// Removes a request from the waiting set (its queue entry is the caller's business).
    private mutating func forget(_ request: APNsRequestID) -> WaitingRequest? {
        guard let entry = waiting.removeValue(forKey: request) else { return nil }
        if entry.deadline != nil {
            waitingWithDeadline -= 1
            // Deadlines of requests that stopped waiting stay until met: rebuild them when they dominate.
            if deadlines.count > 2 * waitingWithDeadline + 1_024 {
                deadlines = WaitDeadlines(waiting.compactMap { request, entry in entry.deadline.map { ($0, request) } })
            }
        }
        return entry
    }

    /// Hands out a wait timer for the earliest deadline of a waiting request, unless one at or before it is out.
    private mutating func armWaitTimer(actions: inout Actions) {
        while let first = deadlines.first, waiting[first.value] == nil { deadlines.removeFirst() }
        guard let earliest = deadlines.first?.key else { return }
        if let armed = waitTimers.first, armed <= earliest { return }
        waitTimers.insert(earliest, at: 0)
        actions.waitTimer = earliest
    }

    /// A slot lost its connection: reconnect it (unless draining) and move its waiting requests.
    private mutating func slotLost(slot: Int, now: NIODeadline, jitter: Double, reconnectAfterFailure: Bool = true, actions: inout Actions) {
        if lifecycle == .running {
            let delay = reconnectAfterFailure ? TimeAmount(configuration.backoff.delay(failures: slots[slot].failures, jitter: jitter)) : .zero
            requestConnect(slot: slot, earliest: now + delay, now: now, actions: &actions)
        }
        if slots[slot].hasWaiting { rehome(slot: slot, actions: &actions) }
    }

    /// Moves a slot's waiting requests to a live connection. Without one they keep waiting for a reconnect while
    /// the pool runs (until their deadlines: a connect failure is no attempt), and fail once it drains.
    private mutating func rehome(slot: Int, actions: inout Actions) {
        if let target = slots.indices.first(where: { isReady($0) }) {
            moveWaiting(from: slot, to: target)
            dispatchQueued(slot: target, actions: &actions)
            return
        }
        if lifecycle != .running {
            for request in takeWaiting(slot: slot) {
                actions.fail.append(.init(request: request, reason: .shuttingDown))
            }
        }
    }

    /// Asks every slot to connect (spaced apart by `requestConnect`), once in the pool's life.
    private mutating func openConnections(now: NIODeadline, actions: inout Actions) {
        connectionsOpened = true
        for slot in slots.indices { requestConnect(slot: slot, earliest: now, now: now, actions: &actions) }
    }

    private mutating func requestConnect(slot: Int, earliest: NIODeadline, now: NIODeadline, actions: inout Actions) {
        var at = earliest
        if let last = lastConnectStart, last + TimeAmount(configuration.minimumConnectSpacing) > at {
            at = last + TimeAmount(configuration.minimumConnectSpacing)
        }
        if at <= now {
            let id = APNsConnectionID(nextConnectionID)
            nextConnectionID += 1
            lastConnectStart = now
            setState(.connecting(id), of: slot)
            actions.connect.append(.init(slot: slot, id: id))
        } else {
            setState(.waiting(at), of: slot)
            actions.timers.append(.init(slot: slot, at: at))
        }
    }

    /// Every change of a slot's state goes through here, so ``connectionStatesVersion`` tells when
    /// ``connectionStateCounts`` may have changed.
    private mutating func setState(_ state: SlotState, of slot: Int) {
        slots[slot].state = state
        connectionStatesVersion &+= 1
    }

    private mutating func checkDrained(actions: inout Actions) {
        guard lifecycle == .draining, waiting.isEmpty, inFlightCount == 0 else { return }
        finishShutdown(actions: &actions)
    }

    private mutating func finishShutdown(actions: inout Actions) {
        lifecycle = .shutDown
        for id in connections.ids.sorted() { actions.close.append(.init(connection: id, graceful: true)) }
        for slot in slots.indices { setState(.idle, of: slot) }
        actions.shutdownComplete = true
    }
}
