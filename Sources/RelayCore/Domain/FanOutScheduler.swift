// Which waiting fan-out dispatches next: urgent before bulk, users in turn, none beyond its share.

import DequeModule

/// How urgently a notification should reach APNs.
package enum DeliveryClass: UInt8, Sendable, Hashable, CaseIterable {
    /// Priority 10 (Apple delivers it at once): alerts, VoIP, Live Activity updates that the user waits for.
    case urgent
    /// Priority 5 or 1 (Apple may delay or batch it anyway): background pushes, badge-only updates.
    case bulk
}

/// What a fan-out waits in: its user's events in order, or a partition's events without a user in order.
package enum FanOutLaneKey: Hashable, Sendable {
    case user(String)
    /// Events without a user (given tokens, broadcasts) of one partition, in the order they were applied.
    case anonymous(partition: Int32)
}

/// The bounds a ``FanOutScheduler`` keeps.
package struct FanOutLimits: Sendable, Equatable {
    /// Notifications in the window (between fan-out and answer), at most: `relay.max_in_flight`.
    package var window: Int
    /// Bulk notifications in the window, at most: the rest of the window is kept for urgent ones, so an alert
    /// finds room however much bulk traffic waits.
    package var bulkWindow: Int
    /// One lane's (one user's) notifications in the window, at most, so one user never holds the window that other
    /// users' ready notifications could use (a device sends one at a time: more of one user would only queue).
    package var laneShare: Int
    /// While both classes wait, one bulk dispatch turn after this many urgent ones, so bulk work is never starved.
    package var urgentTurnsPerBulkTurn: Int

    /// Bounds from `relay.max_in_flight`, the share of it kept for urgent notifications, and the share one user may hold.
    package init(window: Int, urgentReserve: Int, laneShare: Int, urgentTurnsPerBulkTurn: Int = 8) {
        self.window = max(1, window)
        self.bulkWindow = max(1, self.window - max(0, urgentReserve))
        self.laneShare = max(1, laneShare)
        self.urgentTurnsPerBulkTurn = max(1, urgentTurnsPerBulkTurn)
    }
}

/// Fan-outs waiting to put their notifications into the send window, and the window's count, as a pure
/// scheduler. Each lane (a user, or a partition's events without a user) is a FIFO of jobs: a later
/// event never passes an earlier one of its lane, so each user's notifications reach the per-device
/// order (``DeviceDispatcher``) in the order the ledger applied them. Between lanes:
///
/// - lanes with an urgent job waiting take their turns first (the lane's bulk jobs ahead of it go
///   with it, charged as urgent: they would otherwise hold the urgent one back); one bulk turn after
///   every ``FanOutLimits/urgentTurnsPerBulkTurn`` urgent ones while both wait;
/// - within a class, lanes take turns round-robin; a turn dispatches one job's notifications while its
///   bounds allow;
/// - a lane holds at most ``FanOutLimits/laneShare`` notifications in the window, bulk at most
///   ``FanOutLimits/bulkWindow``, everything at most ``FanOutLimits/window``.
///
/// The caller takes a job (``nextTurn()``), reports each notification it puts into the window
/// (``dispatched(lane:as:)``) while ``mayDispatch(lane:as:)`` allows, gives an unfinished job back
/// (``putBack(_:lane:)``), and reports each notification that leaves the window (``left(lane:as:)``).
package struct FanOutScheduler<Job: Sendable>: Sendable {
    /// A lane's place in the scheduler's tables, stable while it holds jobs or notifications in the window.
    package typealias Lane = Int32

    private struct Waiting: Sendable {
        var job: Job
        var deliveryClass: DeliveryClass
        /// What it holds in memory, as the caller counts it (``waitingBytes``).
        var bytes: Int
    }

    private struct LaneState: Sendable {
        var key: FanOutLaneKey?
        /// The key's hash bits in ``laneIndex``, kept so that freeing the lane never hashes the key again.
        var hashBits: UInt32 = 0
        var jobs: Deque<Waiting> = []
        var urgentJobs = 0
        var inWindow = 0
        /// The turn queue the lane is in (nil: none), and the stamp of its entry there: other entries of the lane
        /// (it moved, or its slot went to another lane since) are stale and skipped.
        var turn: DeliveryClass?
        var turnStamp: UInt64 = 0
        /// Its head job is out with the caller (``nextTurn()``): the lane takes no turn until it comes back. Its bytes
        /// stay counted meanwhile.
        var isTaken = false
        var takenBytes = 0
        /// It waits for a send-rate cap (``hold(_:)``): no turn until ``releaseHeld()``.
        var isHeld = false

        var effectiveClass: DeliveryClass { urgentJobs > 0 ? .urgent : .bulk }
    }

    package let limits: FanOutLimits
    private var lanes: [LaneState] = []
    private var freeLanes: [Lane] = []
    /// The lanes by key (most events make a lane and free it again: one hash of the key per event).
    private var laneIndex = SlotIndex()
    private var turns: [Deque<(lane: Lane, stamp: UInt64)>] = [[], []]
    private var nextStamp: UInt64 = 0
    private var urgentTurnsSinceBulk = 0
    private var inWindowByClass = [0, 0]
    /// Jobs waiting, over all lanes.
    package private(set) var waitingJobs = 0
    /// The bytes the waiting jobs hold (those out with the caller for a turn included), as given to
    /// ``enqueue(_:lane:as:bytes:)``: the read-ahead bound counts them.
    package private(set) var waitingBytes = 0
    /// Lanes held for a send-rate cap (``hold(_:)``).
    private var heldLanes: [Lane] = []

    /// A scheduler keeping `limits`.
    package init(limits: FanOutLimits) {
        self.limits = limits
    }

    /// Notifications in the window, both classes.
    package var inWindow: Int { inWindowByClass[0] + inWindowByClass[1] }

    /// Notifications of `deliveryClass` in the window.
    package func inWindow(_ deliveryClass: DeliveryClass) -> Int { inWindowByClass[Int(deliveryClass.rawValue)] }

    /// Notifications of `lane` in the window.
    package func inWindow(lane: Lane) -> Int { lanes[Int(lane)].inWindow }

    /// Whether any job waits.
    package var isEmpty: Bool { waitingJobs == 0 }

    /// The lane of `key`, made when it has none.
    package mutating func lane(for key: FanOutLaneKey) -> Lane {
        let hashBits = SlotIndex.hashBits(of: key)
        if let lane = lanes.withUnsafeBufferPointer({ lanes in laneIndex.first(hash: hashBits) { lanes[Int($0)].key == key } }) {
            return lane
        }
        let lane: Lane
        if let free = freeLanes.popLast() {
            lane = free
            lanes[Int(lane)] = LaneState(key: key, hashBits: hashBits)
        } else {
            lane = Lane(lanes.count)
            lanes.append(LaneState(key: key, hashBits: hashBits))
        }
        laneIndex.insert(hash: hashBits, slot: lane)
        return lane
    }

    /// Adds `job`, holding `bytes`, behind the jobs of `lane`.
    package mutating func enqueue(_ job: Job, lane: Lane, as deliveryClass: DeliveryClass, bytes: Int = 0) {
        let index = Int(lane)
        lanes[index].jobs.append(Waiting(job: job, deliveryClass: deliveryClass, bytes: bytes))
        if deliveryClass == .urgent { lanes[index].urgentJobs += 1 }
        waitingJobs += 1
        waitingBytes += bytes
        queueTurn(of: lane)
    }

    /// Whether `lane` may put one more notification of `deliveryClass` into the window now.
    package func mayDispatch(lane: Lane, as deliveryClass: DeliveryClass) -> Bool {
        guard inWindow < limits.window, lanes[Int(lane)].inWindow < limits.laneShare else { return false }
        return deliveryClass == .urgent || inWindow(.bulk) < limits.bulkWindow
    }

    /// `lane` put one notification of `deliveryClass` into the window.
    package mutating func dispatched(lane: Lane, as deliveryClass: DeliveryClass) {
        lanes[Int(lane)].inWindow += 1
        inWindowByClass[Int(deliveryClass.rawValue)] += 1
    }

    /// One notification of `lane`, counted as `deliveryClass`, left the window (answered, superseded or dropped).
    package mutating func left(lane: Lane, as deliveryClass: DeliveryClass) {
        let index = Int(lane)
        precondition(lanes[index].inWindow > 0, "lane \(lane) has no notification in the window")
        lanes[index].inWindow -= 1
        inWindowByClass[Int(deliveryClass.rawValue)] -= 1
        if !lanes[index].jobs.isEmpty { queueTurn(of: lane) } else { freeIfIdle(lane) }
    }

    /// The next job to dispatch from, with its lane and the class its notifications count as; `nil` when no lane
    /// may dispatch now. The job leaves its lane: give it back (``putBack(_:lane:)``) unless all its notifications went.
    package mutating func nextTurn() -> (job: Job, lane: Lane, deliveryClass: DeliveryClass)? {
        guard inWindow < limits.window else { return nil }
        let bulkMayGo = inWindow(.bulk) < limits.bulkWindow
        if bulkMayGo && urgentTurnsSinceBulk >= limits.urgentTurnsPerBulkTurn, let turn = takeTurn(.bulk) { return turn }
        if let turn = takeTurn(.urgent) { return turn }
        return bulkMayGo ? takeTurn(.bulk) : nil
    }

    /// The head job of the next lane in `deliveryClass`'s turns, if any.
    private mutating func takeTurn(_ deliveryClass: DeliveryClass) -> (job: Job, lane: Lane, deliveryClass: DeliveryClass)? {
        guard let lane = popTurn(deliveryClass) else { return nil }
        let index = Int(lane)
        let waiting = lanes[index].jobs.removeFirst()
        lanes[index].isTaken = true
        lanes[index].takenBytes = waiting.bytes
        if waiting.deliveryClass == .urgent { lanes[index].urgentJobs -= 1 }
        waitingJobs -= 1
        urgentTurnsSinceBulk = deliveryClass == .urgent ? urgentTurnsSinceBulk + 1 : 0
        return (waiting.job, lane, deliveryClass)
    }

    /// Gives back a job taken by ``nextTurn()`` whose notifications did not all go: it waits first in its lane again
    /// (nothing of the lane passes it) with `deliveryClass` (its own class, not the one it was charged as). The lane
    /// takes its next turn behind the lanes waiting now.
    package mutating func putBack(_ job: Job, lane: Lane, as deliveryClass: DeliveryClass) {
        let index = Int(lane)
        lanes[index].isTaken = false
        lanes[index].jobs.prepend(Waiting(job: job, deliveryClass: deliveryClass, bytes: lanes[index].takenBytes))
        if deliveryClass == .urgent { lanes[index].urgentJobs += 1 }
        waitingJobs += 1
        queueTurn(of: lane)
    }

    /// A job taken by ``nextTurn()`` finished: its lane takes its next turn behind the lanes waiting now.
    package mutating func finished(lane: Lane) {
        lanes[Int(lane)].isTaken = false
        waitingBytes -= lanes[Int(lane)].takenBytes
        lanes[Int(lane)].takenBytes = 0
        if lanes[Int(lane)].jobs.isEmpty { freeIfIdle(lane) } else { queueTurn(of: lane) }
    }

    /// `lane` (with a job waiting) cannot send for now (its send-rate cap is spent): it takes no turn until
    /// ``releaseHeld()``, and holds no room meanwhile.
    package mutating func hold(_ lane: Lane) {
        let index = Int(lane)
        guard !lanes[index].isHeld else { return }
        lanes[index].isHeld = true
        lanes[index].turn = nil
        heldLanes.append(lane)
    }

    /// Whether some lane waits for a send-rate cap.
    package var hasHeld: Bool { !heldLanes.isEmpty }

    /// The held lanes take turns again (the caps may have filled).
    package mutating func releaseHeld() {
        let held = heldLanes
        heldLanes = []
        for lane in held where lanes[Int(lane)].isHeld {
            lanes[Int(lane)].isHeld = false
            queueTurn(of: lane)
        }
    }

    /// Removes the waiting jobs `leaving` selects (a revoke: their records stay open for the next owner), keeping each
    /// lane's order; returns them.
    @discardableResult
    package mutating func removeAll(where leaving: (Job) -> Bool) -> [Job] {
        var removed: [Job] = []
        for index in lanes.indices where !lanes[index].jobs.isEmpty {
            let gone = lanes[index].jobs.filter { leaving($0.job) }
            guard !gone.isEmpty else { continue }
            lanes[index].jobs.removeAll { leaving($0.job) }
            removed += gone.map(\.job)
            waitingBytes -= gone.reduce(0) { $0 + $1.bytes }
            lanes[index].urgentJobs = lanes[index].jobs.reduce(0) { $0 + ($1.deliveryClass == .urgent ? 1 : 0) }
            if lanes[index].jobs.isEmpty {
                lanes[index].turn = nil
                lanes[index].isHeld = false
                freeIfIdle(Lane(index))
            } else {
                queueTurn(of: Lane(index))
            }
        }
        waitingJobs -= removed.count
        return removed
    }

    /// Puts `lane` in the turn queue of its class when it has a job and room under its share; a lane whose class
    /// changed (an urgent job arrived) moves, its old entry left stale.
    private mutating func queueTurn(of lane: Lane) {
        let index = Int(lane)
        guard !lanes[index].isTaken, !lanes[index].isHeld else { return }
        guard !lanes[index].jobs.isEmpty, lanes[index].inWindow < limits.laneShare else {
            lanes[index].turn = nil
            return
        }
        let deliveryClass = lanes[index].effectiveClass
        guard lanes[index].turn != deliveryClass else { return }
        nextStamp += 1
        lanes[index].turn = deliveryClass
        lanes[index].turnStamp = nextStamp
        turns[Int(deliveryClass.rawValue)].append((lane, nextStamp))
    }

    private mutating func popTurn(_ deliveryClass: DeliveryClass) -> Lane? {
        dropStaleTurns(deliveryClass)
        guard let entry = turns[Int(deliveryClass.rawValue)].popFirst() else { return nil }
        lanes[Int(entry.lane)].turn = nil
        return entry.lane
    }

    private mutating func dropStaleTurns(_ deliveryClass: DeliveryClass) {
        let queue = Int(deliveryClass.rawValue)
        while let entry = turns[queue].first,
              lanes[Int(entry.lane)].turn != deliveryClass || lanes[Int(entry.lane)].turnStamp != entry.stamp {
            turns[queue].removeFirst()
        }
    }

    private mutating func freeIfIdle(_ lane: Lane) {
        let index = Int(lane)
        guard lanes[index].jobs.isEmpty, lanes[index].inWindow == 0, !lanes[index].isTaken, lanes[index].key != nil else { return }
        laneIndex.remove(hash: lanes[index].hashBits, slot: lane)
        lanes[index] = LaneState()
        freeLanes.append(lane)
    }
}
