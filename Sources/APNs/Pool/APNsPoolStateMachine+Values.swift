import DequeModule
package import NIOCore

// The values the pool state machine hands out (its actions) and keeps (slots, waiting requests, connections).

extension APNsPoolStateMachine {
    /// What the supervisor must do after an event.
    package struct Actions: Sendable, Hashable {
        /// Open these connections now (slot, id).
        package var connect: [Connect] = []
        /// Call ``APNsPoolStateMachine/timerFired(slot:now:)`` at this time.
        package var timers: [Timer] = []
        /// Send these requests on these connections.
        package var dispatch: [Dispatch] = []
        /// Fail these requests without sending them.
        package var fail: [Failure] = []
        /// Close these connections.
        package var close: [Close] = []
        /// The drain finished: every connection is closed or closing.
        package var shutdownComplete = false
        /// Call ``APNsPoolStateMachine/waitDeadlinePassed(now:)`` at this time.
        package var waitTimer: NIODeadline?

        /// Adds `other`'s actions to these.
        package mutating func merge(_ other: Actions) {
            connect += other.connect
            timers += other.timers
            dispatch += other.dispatch
            fail += other.fail
            close += other.close
            shutdownComplete = shutdownComplete || other.shutdownComplete
            if let at = other.waitTimer { waitTimer = min(waitTimer ?? at, at) }
        }

        /// Opens a connection.
        package struct Connect: Sendable, Hashable {
            package var slot: Int
            package var id: APNsConnectionID
            package init(slot: Int, id: APNsConnectionID) { self.slot = slot; self.id = id }
        }
        /// A timer for a slot.
        package struct Timer: Sendable, Hashable {
            package var slot: Int
            package var at: NIODeadline
            package init(slot: Int, at: NIODeadline) { self.slot = slot; self.at = at }
        }
        /// A request to send on a connection.
        package struct Dispatch: Sendable, Hashable {
            package var request: APNsRequestID
            package var connection: APNsConnectionID
            package init(request: APNsRequestID, connection: APNsConnectionID) { self.request = request; self.connection = connection }
        }
        /// A request that fails.
        package struct Failure: Sendable, Hashable {
            package var request: APNsRequestID
            package var reason: APNsTransportFailure
            package init(request: APNsRequestID, reason: APNsTransportFailure) { self.request = request; self.reason = reason }
        }
        /// A connection to close.
        package struct Close: Sendable, Hashable {
            package var connection: APNsConnectionID
            package var graceful: Bool
            package init(connection: APNsConnectionID, graceful: Bool) { self.connection = connection; self.graceful = graceful }
        }

        /// Whether there is nothing to do.
        package var isEmpty: Bool {
            connect.isEmpty && timers.isEmpty && dispatch.isEmpty && fail.isEmpty && close.isEmpty && !shutdownComplete && waitTimer == nil
        }
    }

    enum SlotState: Sendable, Hashable {
        case idle
        case waiting(NIODeadline)
        case connecting(APNsConnectionID)
        case ready(APNsConnectionID)
    }

    struct Slot: Sendable {
        var state: SlotState = .idle
        var failures = 0
        /// Waiting requests in order, and entries of requests that stopped waiting (cancelled or past their
        /// deadline) that are skipped when met: taking one out of the middle would cost the whole queue.
        var queue = Deque<APNsRequestID>()
        /// How many entries of `queue` stopped waiting.
        var stale = 0

        var hasWaiting: Bool { queue.count > stale }
    }

    /// A request waiting for a stream.
    struct WaitingRequest: Sendable {
        /// The slot whose queue holds it.
        var slot: Int
        /// When it stops waiting, if ever.
        var deadline: NIODeadline?
    }

    struct Connection: Sendable, Hashable {
        var slot: Int
        var maxStreams: Int
        var inFlight: Int
        var goingAway: Bool
    }
}
