import APNs
import NIOCore
import Testing

@Suite("Connection pool state machine (no sockets)")
struct APNsPoolStateMachineTests {
    let t0 = NIODeadline.uptimeNanoseconds(1_000_000_000)

    func machine(connections: Int = 2, maxQueued: Int = 100) -> APNsPoolStateMachine {
        APNsPoolStateMachine(configuration: .init(
            connections: connections, maxQueued: maxQueued, minimumConnectSpacing: .milliseconds(100),
            backoff: Backoff(base: .milliseconds(200), cap: .seconds(30))))
    }

    /// Starts and establishes every slot; returns the connection id per slot.
    func established(_ pool: inout APNsPoolStateMachine, maxStreams: Int = 10) -> [APNsConnectionID] {
        var now = t0
        var ids: [Int: APNsConnectionID] = [:]
        var actions = pool.start(now: now)
        var pending: [APNsPoolStateMachine.Actions.Timer] = []
        while true {
            for connect in actions.connect {
                ids[connect.slot] = connect.id
                _ = pool.connectionEstablished(slot: connect.slot, id: connect.id, maxStreams: maxStreams, now: now)
            }
            pending += actions.timers
            pending.sort { $0.at < $1.at }
            guard !pending.isEmpty else { break }
            let timer = pending.removeFirst()
            now = timer.at
            actions = pool.timerFired(slot: timer.slot, now: now)
        }
        return (0..<pool.configuration.connections).compactMap { ids[$0] }
    }

    @Test("the connection-state version changes whenever the state counts do, and not for requests alone")
    func connectionStatesVersion() {
        var random = SplitMix64(seed: 18)
        var pool = machine(connections: 3)
        var now = t0
        var known: [APNsConnectionID] = []
        var connecting: [(slot: Int, id: APNsConnectionID)] = []
        var timers: [APNsPoolStateMachine.Actions.Timer] = []
        var dispatched: [APNsConnectionID] = []
        var nextRequest: UInt64 = 0
        func record(_ actions: APNsPoolStateMachine.Actions) {
            connecting += actions.connect.map { ($0.slot, $0.id) }
            known += actions.connect.map(\.id)
            timers += actions.timers
            dispatched += actions.dispatch.map(\.connection)
        }
        record(pool.start(now: now))
        var counts = pool.connectionStateCounts
        var version = pool.connectionStatesVersion
        var stateEvents = 0
        for _ in 0..<2_000 {
            now = now + .milliseconds(Int64(random.next() % 50))
            switch random.next() % 7 {
            case 0 where !connecting.isEmpty:
                let attempt = connecting.removeFirst()
                record(random.next() % 4 == 0
                    ? pool.connectFailed(slot: attempt.slot, id: attempt.id, now: now, jitter: 0.5)
                    : pool.connectionEstablished(slot: attempt.slot, id: attempt.id, maxStreams: 5, now: now))
            case 1 where !timers.isEmpty:
                let timer = timers.removeFirst()
                record(pool.timerFired(slot: timer.slot, now: max(now, timer.at)))
            case 2 where !known.isEmpty && random.next() % 8 == 0:
                let id = known[Int(random.next() % UInt64(known.count))]
                record(random.next() % 2 == 0 ? pool.connectionGoingAway(id, now: now) : pool.connectionClosed(id, now: now, jitter: 0.5))
            case 3 where !dispatched.isEmpty:
                record(pool.requestFinished(connection: dispatched.removeFirst(), delivered: true))
            default:
                let before = pool.connectionStatesVersion
                record(pool.enqueue(APNsRequestID(nextRequest), hash: random.next(), now: now))
                nextRequest += 1
                #expect(pool.connectionStatesVersion == before, "an enqueue on a started pool changes no slot")
            }
            if pool.connectionStateCounts != counts {
                #expect(pool.connectionStatesVersion != version, "the counts changed without a new version")
                stateEvents += 1
            }
            counts = pool.connectionStateCounts
            version = pool.connectionStatesVersion
        }
        #expect(stateEvents > 20, "the sequence went through state changes (\(stateEvents))")
    }

    @Test("connections open one per minimum spacing")
    func spacing() {
        var pool = machine(connections: 3)
        let start = pool.start(now: t0)
        #expect(start.connect == [.init(slot: 0, id: APNsConnectionID(0))])
        #expect(start.timers.map(\.at) == [t0 + .milliseconds(100), t0 + .milliseconds(100)])
        let first = pool.timerFired(slot: 1, now: t0 + .milliseconds(100))
        #expect(first.connect == [.init(slot: 1, id: APNsConnectionID(1))])
        let second = pool.timerFired(slot: 2, now: t0 + .milliseconds(100))
        #expect(second.connect.isEmpty)
        #expect(second.timers == [.init(slot: 2, at: t0 + .milliseconds(200))])
        let third = pool.timerFired(slot: 2, now: t0 + .milliseconds(200))
        #expect(third.connect == [.init(slot: 2, id: APNsConnectionID(2))])
    }

    @Test("immediate dispatch: only to a ready connection with room and nothing queued ahead, never while draining")
    func immediateDispatch() {
        var pool = machine(connections: 1)
        #expect(pool.dispatchImmediately(hash: 1) == nil)  // not connected yet
        let ids = established(&pool, maxStreams: 2)
        #expect(pool.dispatchImmediately(hash: 1) == ids[0])
        #expect(pool.dispatchImmediately(hash: 1) == ids[0])
        #expect(pool.inFlightCount == 2)
        #expect(pool.dispatchImmediately(hash: 1) == nil)  // full: the caller enqueues instead
        #expect(pool.enqueue(APNsRequestID(0), hash: 1, now: t0).dispatch.isEmpty)
        #expect(pool.queuedCount == 1)
        // A slot frees, and goes to the queued request: a newcomer may not overtake it.
        #expect(pool.requestFinished(connection: ids[0], delivered: true).dispatch == [.init(request: APNsRequestID(0), connection: ids[0])])
        #expect(pool.dispatchImmediately(hash: 1) == nil)
        _ = pool.requestFinished(connection: ids[0], delivered: true)
        #expect(pool.dispatchImmediately(hash: 1) == ids[0])
        _ = pool.drain()
        _ = pool.requestFinished(connection: ids[0], delivered: true)
        #expect(pool.dispatchImmediately(hash: 1) == nil)
    }

    @Test("a token always maps to the same live connection; streams never exceed the limit")
    func stableMappingAndLimit() {
        var pool = machine(connections: 2)
        let ids = established(&pool, maxStreams: 2)
        #expect(ids.count == 2)
        let hash: UInt64 = 7  // slot 1
        var dispatched: [APNsConnectionID] = []
        var nextRequest: UInt64 = 0
        for _ in 0..<5 {
            let actions = pool.enqueue(APNsRequestID(nextRequest), hash: hash, now: t0)
            nextRequest += 1
            dispatched += actions.dispatch.map(\.connection)
        }
        #expect(dispatched == [ids[1], ids[1]])
        #expect(pool.queuedCount == 3)
        let after = pool.requestFinished(connection: ids[1], delivered: true)
        #expect(after.dispatch == [.init(request: APNsRequestID(2), connection: ids[1])])
        #expect(pool.inFlightCount == 2)
    }

    @Test("the stream capacity is the usable connections' stream limits: none before they connect, less as one goes away or lowers its limit")
    func streamCapacity() {
        var pool = machine(connections: 2)
        #expect(pool.streamCapacity == 0)
        let ids = established(&pool, maxStreams: 10)
        #expect(pool.streamCapacity == 20)
        _ = pool.maxStreamsChanged(connection: ids[0], limit: 4)
        #expect(pool.streamCapacity == 14)
        _ = pool.connectionGoingAway(ids[1], now: t0)
        #expect(pool.streamCapacity == 4)
    }

    @Test("SETTINGS_MAX_CONCURRENT_STREAMS dropping to 1 mid-connection")
    func maxStreamsDrop() {
        var pool = machine(connections: 1)
        let id = established(&pool, maxStreams: 3)[0]
        for request in 0..<6 { _ = pool.enqueue(APNsRequestID(UInt64(request)), hash: 0, now: t0) }
        #expect(pool.inFlightCount == 3)
        #expect(pool.maxStreamsChanged(connection: id, limit: 1).dispatch.isEmpty)
        // Three in flight drain down to one before anything new is sent.
        #expect(pool.requestFinished(connection: id, delivered: true).dispatch.isEmpty)
        #expect(pool.requestFinished(connection: id, delivered: true).dispatch.isEmpty)
        #expect(pool.requestFinished(connection: id, delivered: true).dispatch.count == 1)
        #expect(pool.inFlightCount == 1)
        #expect(pool.maxStreams(of: id) == 1)
        // Raising it again dispatches up to the new limit.
        #expect(pool.maxStreamsChanged(connection: id, limit: 5).dispatch.count == 2)
    }

    @Test("a limit announced before the handshake is recorded wins over the handshake's")
    func earlyLimit() {
        var pool = machine(connections: 1)
        let id = pool.start(now: t0).connect[0].id
        #expect(pool.maxStreamsChanged(connection: id, limit: 1).isEmpty)
        _ = pool.connectionEstablished(slot: 0, id: id, maxStreams: 100, now: t0)
        #expect(pool.maxStreams(of: id) == 1)
        #expect(pool.enqueue(APNsRequestID(0), hash: 0, now: t0).dispatch.count == 1)
        #expect(pool.enqueue(APNsRequestID(1), hash: 0, now: t0).dispatch.isEmpty)
    }

    @Test("GOAWAY: no new streams on the old connection, a replacement opens, the old one closes when idle")
    func goAway() {
        var pool = machine(connections: 1)
        let old = established(&pool)[0]
        _ = pool.enqueue(APNsRequestID(0), hash: 0, now: t0)
        let now = t0 + .seconds(5)
        let actions = pool.connectionGoingAway(old, now: now)
        #expect(actions.connect.count == 1)
        let replacement = actions.connect[0].id
        #expect(actions.close.isEmpty)
        #expect(pool.enqueue(APNsRequestID(1), hash: 0, now: now).dispatch.isEmpty)
        #expect(pool.requestFinished(connection: old, delivered: true).close == [.init(connection: old, graceful: false)])
        let ready = pool.connectionEstablished(slot: 0, id: replacement, maxStreams: 10, now: now)
        #expect(ready.dispatch == [.init(request: APNsRequestID(1), connection: replacement)])
    }

    @Test("reconnect with exponential backoff and jitter")
    func backoff() {
        var pool = machine(connections: 1)
        let start = pool.start(now: t0)
        let first = start.connect[0].id
        let failed = pool.connectFailed(slot: 0, id: first, now: t0 + .seconds(1), jitter: 0)
        #expect(failed.timers == [.init(slot: 0, at: t0 + .seconds(1) + .milliseconds(100))])
        let retry = pool.timerFired(slot: 0, now: t0 + .seconds(1) + .milliseconds(100))
        let second = retry.connect[0].id
        let failedAgain = pool.connectFailed(slot: 0, id: second, now: t0 + .seconds(2), jitter: 0.999_999_999)
        #expect(failedAgain.timers.count == 1)
        let delay = failedAgain.timers[0].at - (t0 + .seconds(2))
        #expect(delay > .milliseconds(399) && delay <= .milliseconds(400))
        #expect(Backoff(base: .milliseconds(200), cap: .seconds(1)).delay(failures: 10, jitter: 1) == .seconds(1))
    }

    @Test("a request waits through connect failures (no attempt spent) and goes out when a connection comes up")
    func waitsForConnection() {
        var pool = machine(connections: 1)
        var id = pool.start(now: t0).connect[0].id
        var now = t0
        #expect(pool.enqueue(APNsRequestID(0), hash: 0, waitingUntil: t0 + .seconds(300), now: now).dispatch.isEmpty)
        for _ in 0..<3 {
            let failed = pool.connectFailed(slot: 0, id: id, now: now, jitter: 0)
            #expect(failed.fail.isEmpty)
            #expect(pool.queuedCount == 1)
            now = failed.timers[0].at
            id = pool.timerFired(slot: 0, now: now).connect[0].id
        }
        let up = pool.connectionEstablished(slot: 0, id: id, maxStreams: 10, now: now)
        #expect(up.dispatch == [.init(request: APNsRequestID(0), connection: id)])
        #expect(pool.queuedCount == 0)
    }

    @Test("a waiting request fails with noConnection at its wait deadline; one wait timer per earlier deadline")
    func waitDeadline() {
        var pool = machine(connections: 1)
        let id = pool.start(now: t0).connect[0].id
        #expect(pool.enqueue(APNsRequestID(0), hash: 0, waitingUntil: t0 + .seconds(300), now: t0).waitTimer == t0 + .seconds(300))
        #expect(pool.enqueue(APNsRequestID(1), hash: 0, waitingUntil: t0 + .seconds(5), now: t0).waitTimer == t0 + .seconds(5))
        // A later deadline needs no timer of its own: the earlier one re-arms for it.
        #expect(pool.enqueue(APNsRequestID(2), hash: 0, waitingUntil: t0 + .seconds(400), now: t0).waitTimer == nil)
        #expect(pool.connectFailed(slot: 0, id: id, now: t0, jitter: 0).fail.isEmpty)
        #expect(pool.waitDeadlinePassed(now: t0 + .seconds(4)).fail.isEmpty)
        let passed = pool.waitDeadlinePassed(now: t0 + .seconds(5))
        #expect(passed.fail == [.init(request: APNsRequestID(1), reason: .noConnection)])
        #expect(passed.waitTimer == nil)  // the timer armed for 300 s still stands
        #expect(pool.queuedCount == 2)
        // A deadline already passed fails at once, unless a stream is free.
        #expect(pool.enqueue(APNsRequestID(3), hash: 0, waitingUntil: t0 + .seconds(6), now: t0 + .seconds(6)).fail
            == [.init(request: APNsRequestID(3), reason: .noConnection)])
        // Dispatched requests are past their wait: their deadlines fail nothing.
        let retry = pool.timerFired(slot: 0, now: t0 + .seconds(10)).connect[0].id
        #expect(pool.connectionEstablished(slot: 0, id: retry, maxStreams: 10, now: t0 + .seconds(10)).dispatch.count == 2)
        #expect(pool.waitDeadlinePassed(now: t0 + .seconds(400)).fail.isEmpty)
    }

    @Test("cancel takes a waiting request out of its queue: never dispatched; a dispatched one is left to its answer")
    func cancel() {
        var pool = machine(connections: 1, maxQueued: 2_000)
        let id = established(&pool, maxStreams: 1)[0]
        #expect(pool.enqueue(APNsRequestID(0), hash: 0, now: t0).dispatch.count == 1)
        _ = pool.enqueue(APNsRequestID(1), hash: 0, now: t0)
        _ = pool.enqueue(APNsRequestID(2), hash: 0, now: t0)
        #expect(pool.cancel(APNsRequestID(1)).fail == [.init(request: APNsRequestID(1), reason: .cancelled)])
        #expect(pool.queuedCount == 1)
        #expect(pool.cancel(APNsRequestID(1)).isEmpty)
        #expect(pool.cancel(APNsRequestID(0)).isEmpty)  // on the wire: only its answer ends it
        #expect(pool.requestFinished(connection: id, delivered: true).dispatch == [.init(request: APNsRequestID(2), connection: id)])
        // A queue holding only cancelled requests does not hold back the next one.
        _ = pool.enqueue(APNsRequestID(3), hash: 0, now: t0)
        _ = pool.cancel(APNsRequestID(3))
        #expect(pool.requestFinished(connection: id, delivered: true).dispatch.isEmpty)
        #expect(pool.dispatchImmediately(hash: 0) == id)
        // Many cancelled among the waiting: the rest go out in order.
        for request in 10..<1_010 { _ = pool.enqueue(APNsRequestID(UInt64(request)), hash: 0, now: t0) }
        for request in 10..<1_010 where request % 10 != 0 { _ = pool.cancel(APNsRequestID(UInt64(request))) }
        #expect(pool.queuedCount == 100)
        var dispatched: [APNsRequestID] = []
        while let next = pool.requestFinished(connection: id, delivered: true).dispatch.first { dispatched.append(next.request) }
        #expect(dispatched == stride(from: 10, to: 1_010, by: 10).map { APNsRequestID(UInt64($0)) })
    }

    @Test("bounded queue: beyond maxQueued, enqueue fails with overloaded")
    func backpressure() {
        var pool = machine(connections: 1, maxQueued: 2)
        _ = pool.start(now: t0)
        #expect(pool.enqueue(APNsRequestID(0), hash: 0, now: t0).isEmpty)
        #expect(pool.enqueue(APNsRequestID(1), hash: 0, now: t0).isEmpty)
        #expect(pool.enqueue(APNsRequestID(2), hash: 0, now: t0).fail == [.init(request: APNsRequestID(2), reason: .overloaded)])
    }

    @Test("connection loss moves waiting requests to a live connection")
    func rehome() {
        var pool = machine(connections: 2)
        let ids = established(&pool, maxStreams: 1)
        _ = pool.enqueue(APNsRequestID(0), hash: 0, now: t0)
        _ = pool.enqueue(APNsRequestID(1), hash: 0, now: t0)
        #expect(pool.queuedCount == 1)
        let closed = pool.connectionClosed(ids[0], now: t0 + .seconds(1), jitter: 0)
        #expect(closed.dispatch == [.init(request: APNsRequestID(1), connection: ids[1])])
        #expect(closed.timers.count + closed.connect.count == 1)
    }

    @Test("drain: refuses new work, waits for in-flight work, then closes with GOAWAY")
    func drain() {
        var pool = machine(connections: 2)
        let ids = established(&pool)
        _ = pool.enqueue(APNsRequestID(0), hash: 0, now: t0)
        let drain = pool.drain()
        #expect(!drain.shutdownComplete)
        #expect(pool.enqueue(APNsRequestID(1), hash: 0, now: t0).fail == [.init(request: APNsRequestID(1), reason: .shuttingDown)])
        let done = pool.requestFinished(connection: ids[0], delivered: true)
        #expect(done.shutdownComplete)
        #expect(Set(done.close) == Set(ids.map { .init(connection: $0, graceful: true) }))
        #expect(pool.lifecycle == .shutDown)
    }

    @Test("drain deadline fails what still waits")
    func drainDeadline() {
        var pool = machine(connections: 1)
        let id = established(&pool, maxStreams: 1)[0]
        _ = pool.enqueue(APNsRequestID(0), hash: 0, now: t0)
        _ = pool.enqueue(APNsRequestID(1), hash: 0, now: t0)
        _ = pool.drain()
        let actions = pool.drainDeadlinePassed()
        #expect(actions.fail == [.init(request: APNsRequestID(1), reason: .shuttingDown)])
        #expect(actions.close == [.init(connection: id, graceful: true)])
        #expect(actions.shutdownComplete)
    }

    @Test("on demand: start opens nothing; the first request opens every slot (spaced) and is dispatched once one is up")
    func connectsOnDemand() {
        var pool = APNsPoolStateMachine(configuration: .init(
            connections: 2, maxQueued: 10, minimumConnectSpacing: .milliseconds(100),
            backoff: Backoff(base: .milliseconds(200), cap: .seconds(30)), connectsOnDemand: true))
        #expect(pool.start(now: t0).isEmpty)
        #expect(pool.connectionStateCounts.idle == 2)
        #expect(pool.dispatchImmediately(hash: 0) == nil)
        let first = pool.enqueue(APNsRequestID(0), hash: 0, now: t0 + .seconds(1))
        #expect(first.connect == [.init(slot: 0, id: APNsConnectionID(0))])
        #expect(first.timers == [.init(slot: 1, at: t0 + .seconds(1) + .milliseconds(100))])
        // A second request while connecting opens nothing more.
        #expect(pool.enqueue(APNsRequestID(1), hash: 1, now: t0 + .seconds(1)).isEmpty)
        let up = pool.connectionEstablished(slot: 0, id: APNsConnectionID(0), maxStreams: 10, now: t0 + .seconds(1))
        #expect(Set(up.dispatch.map(\.request)) == [APNsRequestID(0), APNsRequestID(1)])
        #expect(pool.timerFired(slot: 1, now: t0 + .seconds(2)).connect == [.init(slot: 1, id: APNsConnectionID(1))])
    }

    @Test("on demand: a request queued before start opens the pool at start; an unused pool drains at once")
    func connectsOnDemandEdges() {
        let configuration = APNsPoolConfiguration(connections: 1, connectsOnDemand: true)
        var early = APNsPoolStateMachine(configuration: configuration)
        #expect(early.enqueue(APNsRequestID(0), hash: 0, now: t0).isEmpty)
        #expect(early.start(now: t0).connect == [.init(slot: 0, id: APNsConnectionID(0))])
        var unused = APNsPoolStateMachine(configuration: configuration)
        _ = unused.start(now: t0)
        let drained = unused.drain()
        #expect(drained.shutdownComplete)
        #expect(drained.connect.isEmpty)
        // The default still connects at start.
        var eager = APNsPoolStateMachine(configuration: .init(connections: 1))
        #expect(eager.start(now: t0).connect == [.init(slot: 0, id: APNsConnectionID(0))])
    }
}
