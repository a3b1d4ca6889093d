import APNsCore
import Testing
@testable import RelayCore

/// The scheduler as a model of the window: jobs are (lane, class, notifications); a "send" is one notification
/// put into the window, an "answer" takes one out.
@Suite("Fan-out scheduler: urgent first, users in turn, each within its share")
struct FanOutSchedulerTests {
    struct Job: Sendable, Equatable {
        var name: String
        var notifications: Int
        var deliveryClass: DeliveryClass = .bulk
        var sent = 0
        var isDone: Bool { sent == notifications }
    }

    /// Runs turns until no lane may dispatch; returns the names of the jobs in the order their notifications went.
    /// `supersede`, after each dispatch (given it and the window's count), may take a notification out of the window in the middle of the turn (a
    /// badge update replaces a queued one as the engine dispatches): its index, or nil.
    static func dispatchAll(_ scheduler: inout FanOutScheduler<Job>, window: inout [(FanOutScheduler<Job>.Lane, DeliveryClass, String)],
                            supersede: ((FanOutScheduler<Job>.Lane, DeliveryClass, String), Int) -> Int? = { _, _ in nil }) -> [String] {
        var order: [String] = []
        while let turn = scheduler.nextTurn() {
            var job = turn.job
            while !job.isDone && scheduler.mayDispatch(lane: turn.lane, as: turn.deliveryClass) {
                scheduler.dispatched(lane: turn.lane, as: turn.deliveryClass)
                job.sent += 1
                order.append(job.name)
                window.append((turn.lane, turn.deliveryClass, job.name))
                if let index = supersede(window[window.count - 1], window.count) {
                    let (lane, deliveryClass, _) = window.remove(at: index)
                    scheduler.left(lane: lane, as: deliveryClass)
                }
            }
            if job.isDone { scheduler.finished(lane: turn.lane) } else { scheduler.putBack(job, lane: turn.lane, as: job.deliveryClass) }
        }
        return order
    }

    @Test("an urgent job passes bulk jobs of other users that waited before it, and takes the room bulk may not")
    func urgentPassesBulk() {
        var scheduler = FanOutScheduler<Job>(limits: FanOutLimits(window: 10, urgentReserve: 2, laneShare: 10))
        var window: [(FanOutScheduler<Job>.Lane, DeliveryClass, String)] = []
        for user in 0..<3 {
            scheduler.enqueue(Job(name: "bulk-\(user)", notifications: 4), lane: scheduler.lane(for: .user("b\(user)")), as: .bulk)
        }
        #expect(Self.dispatchAll(&scheduler, window: &window) == Array(repeating: "bulk-0", count: 4) + Array(repeating: "bulk-1", count: 4))
        #expect(scheduler.inWindow(.bulk) == 8, "bulk stops at the window less the urgent reserve")
        scheduler.enqueue(Job(name: "alert", notifications: 2, deliveryClass: .urgent), lane: scheduler.lane(for: .user("a")), as: .urgent)
        #expect(Self.dispatchAll(&scheduler, window: &window) == ["alert", "alert"], "the reserve is the alert's; bulk-2 still waits")
        #expect(scheduler.inWindow == 10 && scheduler.waitingJobs == 1)
    }

    @Test("a user's later urgent event takes its earlier bulk events along, in order, counted as urgent")
    func urgentCarriesItsLanesEarlierJobs() {
        var scheduler = FanOutScheduler<Job>(limits: FanOutLimits(window: 10, urgentReserve: 5, laneShare: 10))
        var window: [(FanOutScheduler<Job>.Lane, DeliveryClass, String)] = []
        scheduler.enqueue(Job(name: "filler", notifications: 5), lane: scheduler.lane(for: .user("f")), as: .bulk)
        _ = Self.dispatchAll(&scheduler, window: &window)
        let lane = scheduler.lane(for: .user("u"))
        scheduler.enqueue(Job(name: "u-bulk", notifications: 1), lane: lane, as: .bulk)
        #expect(Self.dispatchAll(&scheduler, window: &window).isEmpty, "bulk is at its bound")
        scheduler.enqueue(Job(name: "u-alert", notifications: 1, deliveryClass: .urgent), lane: lane, as: .urgent)
        #expect(Self.dispatchAll(&scheduler, window: &window) == ["u-bulk", "u-alert"])
        #expect(window.suffix(2).map(\.1) == [.urgent, .urgent])
    }

    @Test("a user at its share waits while other users go; an answer gives it its turn again")
    func laneShare() {
        var scheduler = FanOutScheduler<Job>(limits: FanOutLimits(window: 100, urgentReserve: 0, laneShare: 3))
        var window: [(FanOutScheduler<Job>.Lane, DeliveryClass, String)] = []
        let hot = scheduler.lane(for: .user("hot"))
        for event in 0..<5 { scheduler.enqueue(Job(name: "hot-\(event)", notifications: 2), lane: hot, as: .bulk) }
        scheduler.enqueue(Job(name: "other", notifications: 1), lane: scheduler.lane(for: .user("other")), as: .bulk)
        #expect(Self.dispatchAll(&scheduler, window: &window) == ["hot-0", "hot-0", "other", "hot-1"])
        #expect(scheduler.inWindow(lane: hot) == 3)
        scheduler.left(lane: hot, as: .bulk)
        #expect(Self.dispatchAll(&scheduler, window: &window) == ["hot-1"], "the rest of hot-1, in order")
    }

    @Test("bulk gets a turn after every few urgent ones while both wait: neither class starves")
    func bulkIsNotStarved() {
        var scheduler = FanOutScheduler<Job>(limits: FanOutLimits(window: 1, urgentReserve: 0, laneShare: 1, urgentTurnsPerBulkTurn: 3))
        for user in 0..<10 { scheduler.enqueue(Job(name: "u\(user)", notifications: 1), lane: scheduler.lane(for: .user("u\(user)")), as: .urgent) }
        scheduler.enqueue(Job(name: "bulk", notifications: 1), lane: scheduler.lane(for: .user("b")), as: .bulk)
        var order: [String] = []
        while let turn = scheduler.nextTurn() {
            order.append(turn.job.name)
            scheduler.dispatched(lane: turn.lane, as: turn.deliveryClass)
            scheduler.finished(lane: turn.lane)
            scheduler.left(lane: turn.lane, as: turn.deliveryClass)
        }
        #expect(order == ["u0", "u1", "u2", "bulk", "u3", "u4", "u5", "u6", "u7", "u8", "u9"])
    }

    @Test("a held lane (its send-rate cap spent) takes no turn and others go on; released, it goes on in order")
    func hold() {
        var scheduler = FanOutScheduler<Job>(limits: FanOutLimits(window: 10, urgentReserve: 0, laneShare: 10))
        var window: [(FanOutScheduler<Job>.Lane, DeliveryClass, String)] = []
        let capped = scheduler.lane(for: .user("capped"))
        scheduler.enqueue(Job(name: "c1", notifications: 1), lane: capped, as: .bulk)
        scheduler.enqueue(Job(name: "c2", notifications: 1), lane: capped, as: .bulk)
        scheduler.hold(capped)
        scheduler.enqueue(Job(name: "free", notifications: 1), lane: scheduler.lane(for: .user("free")), as: .bulk)
        #expect(Self.dispatchAll(&scheduler, window: &window) == ["free"])
        scheduler.releaseHeld()
        #expect(!scheduler.hasHeld)
        #expect(Self.dispatchAll(&scheduler, window: &window) == ["c1", "c2"])
    }

    @Test("a revoke removes the leaving jobs, keeping each lane's order; lanes with nothing left are freed")
    func removeAll() {
        var scheduler = FanOutScheduler<Job>(limits: FanOutLimits(window: 0, urgentReserve: 0, laneShare: 1))
        let lane = scheduler.lane(for: .user("u"))
        for name in ["keep-1", "go-1", "keep-2"] { scheduler.enqueue(Job(name: name, notifications: 1), lane: lane, as: .bulk, bytes: 10) }
        scheduler.enqueue(Job(name: "go-2", notifications: 1), lane: scheduler.lane(for: .user("v")), as: .urgent)
        #expect(scheduler.removeAll { $0.name.hasPrefix("go") }.map(\.name).sorted() == ["go-1", "go-2"])
        #expect(scheduler.waitingJobs == 2 && scheduler.waitingBytes == 20)
        #expect(scheduler.lane(for: .user("w")) == 1, "v's lane was freed and is reused")
    }

    /// Random users, classes, job sizes, answers; then every answer until all is sent. Per lane the notifications go
    /// in the order the jobs were enqueued; the bounds always hold; nothing waits forever.
    @Test("property: per-user order, bounds, and no starvation under random load", arguments: 0..<40)
    func property(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let limits = FanOutLimits(window: Int.random(in: 1...30, using: &random), urgentReserve: Int.random(in: 0...5, using: &random),
                                  laneShare: Int.random(in: 1...12, using: &random), urgentTurnsPerBulkTurn: Int.random(in: 1...5, using: &random))
        var scheduler = FanOutScheduler<Job>(limits: limits)
        var window: [(FanOutScheduler<Job>.Lane, DeliveryClass, String)] = []
        var enqueued: [String: [String]] = [:]
        var sentOrder: [String: [String]] = [:]
        var laneUser: [FanOutScheduler<Job>.Lane: String] = [:]
        var total = 0
        func checkBounds() {
            #expect(scheduler.inWindow <= limits.window)
            #expect(scheduler.inWindow(.bulk) <= limits.bulkWindow)
            for (lane, _) in laneUser { #expect(scheduler.inWindow(lane: lane) <= limits.laneShare) }
        }
        func record(_ new: [(FanOutScheduler<Job>.Lane, DeliveryClass, String)]) {
            for (lane, _, name) in new {
                let user = laneUser[lane]!
                if sentOrder[user]?.last != name { sentOrder[user, default: []].append(name) }
            }
        }
        for step in 0..<400 {
            if Bool.random(using: &random) || window.isEmpty {
                let user = "u\(Int.random(in: 0..<6, using: &random))"
                let lane = scheduler.lane(for: .user(user))
                laneUser[lane] = user
                let notifications = Int.random(in: 1...8, using: &random)
                let name = "\(user)-\(step)"
                enqueued[user, default: []].append(name)
                total += notifications
                let deliveryClass: DeliveryClass = Bool.random(using: &random) ? .urgent : .bulk
                scheduler.enqueue(Job(name: name, notifications: notifications, deliveryClass: deliveryClass), lane: lane, as: deliveryClass,
                                  bytes: 100 * notifications)
            } else {
                let (lane, deliveryClass, _) = window.remove(at: Int.random(in: 0..<window.count, using: &random))
                scheduler.left(lane: lane, as: deliveryClass)
            }
            var dispatched: [(FanOutScheduler<Job>.Lane, DeliveryClass, String)] = []
            _ = Self.dispatchAll(&scheduler, window: &window) { entry, count in
                dispatched.append(entry)
                return Int.random(in: 0..<4, using: &random) == 0 ? Int.random(in: 0..<count, using: &random) : nil
            }
            record(dispatched)
            checkBounds()
        }
        var sent = window.count
        var answered = 0
        // Drain: answers only. Every waiting job must get through.
        while !window.isEmpty {
            let (lane, deliveryClass, _) = window.removeFirst()
            scheduler.left(lane: lane, as: deliveryClass)
            answered += 1
            let before = window.count
            _ = Self.dispatchAll(&scheduler, window: &window)
            sent += window.count - before
            record(Array(window[before...]))
            checkBounds()
        }
        #expect(scheduler.isEmpty, "jobs left waiting with an empty window: starved")
        #expect(scheduler.waitingBytes == 0, "the bytes of every job that went are given back")
        for (user, names) in enqueued { #expect(sentOrder[user] == names, "\(user)'s events in order") }
        _ = (sent, answered, total)
    }
}
