// What the supervisor reads off the pool state machine between events: its connections, streams and slots.

extension APNsPoolStateMachine {
    /// In-flight requests over all connections.
    package var inFlightCount: Int { connections.values.reduce(0) { $0 + $1.inFlight } }

    /// Ready (usable) connections.
    package var readyConnections: [APNsConnectionID] {
        slots.compactMap { if case .ready(let id) = $0.state { return id } else { return nil } }
    }

    /// The requests the usable connections (ready, not going away) take at once: the sum of their peers' stream
    /// limits. Requests beyond it wait in the pool's queue.
    package var streamCapacity: Int {
        var capacity = 0
        for slot in slots {
            if case .ready(let id) = slot.state, let connection = connections[id], !connection.goingAway { capacity += connection.maxStreams }
        }
        return capacity
    }

    /// How many pool slots are in each state. Computed after every event (the supervisor exports it when it
    /// changes), so it is a plain value: no dictionary to build and hash twice per notification.
    package var connectionStateCounts: APNsConnectionStateCounts {
        var counts = APNsConnectionStateCounts()
        for slot in slots {
            switch slot.state {
            case .idle: counts.idle += 1
            case .waiting: counts.backoff += 1
            case .connecting: counts.connecting += 1
            case .ready(let id):
                if connections[id]?.goingAway == true { counts.goingAway += 1 } else { counts.ready += 1 }
            }
        }
        return counts
    }

    /// The peer's stream limit for a connection, if known.
    package func maxStreams(of id: APNsConnectionID) -> Int? { connections[id]?.maxStreams }

    /// The slot a token hash prefers.
    package func preferredSlot(hash: UInt64) -> Int { Int(hash % UInt64(slots.count)) }
}
