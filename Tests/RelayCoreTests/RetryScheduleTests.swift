import KafkaCore
import Testing
@testable import RelayCore

@Suite("The retry schedule")
struct RetryScheduleTests {
    @Test("delays double from the base to the cap, each jittered to between half and all of it; a streak past the bound says so; a success ends it")
    func backoffAndBound() {
        var schedule = RetrySchedule(base: 250, cap: 5_000, bound: 60_000, seed: 7)
        for failures in 1...8 {
            schedule.schedule(.loadDeviceRegistry, afterFailures: failures, now: 0)
            let delay = min(5_000, Int64(250) << (failures - 1))
            #expect(schedule.takeDue(now: delay / 2 - 1).isEmpty, "failure \(failures): not before half the delay")
            #expect(schedule.takeDue(now: delay).count == 1, "failure \(failures): by the whole delay")
        }
        #expect(schedule.failed(.deviceRegistry, now: 1_000).pastBound == false)
        #expect(schedule.failed(.deviceRegistry, now: 60_999).streak == .init(since: 1_000, failures: 2))
        #expect(schedule.failed(.deviceRegistry, now: 61_000).pastBound)
        schedule.succeeded(.deviceRegistry)
        #expect(schedule.failed(.deviceRegistry, now: 70_000).streak == .init(since: 70_000, failures: 1))
        #expect(schedule.failed(.publishing(.records), now: 70_000).streak.failures == 1, "each source has its own streak")
    }

    @Test("waiting effects a revoke selects are dropped; the others stay due")
    func removal() {
        var schedule = RetrySchedule(base: 100, cap: 100, bound: 1_000, seed: 1)
        schedule.schedule(.loadDeviceRegistry, afterFailures: 1, now: 0)
        schedule.schedule(.restore(TopicPartition("push.events", 0), generation: 1), afterFailures: 1, now: 0)
        schedule.removeAll { if case .restore = $0 { true } else { false } }
        #expect(schedule.waiting == 1)
        #expect(schedule.takeDue(now: 100).count == 1 && schedule.waiting == 0)
    }

    @Test("the same seed gives the same delays; another seed others")
    func seeded() {
        func dueTimes(seed: UInt64) -> [Int64] {
            var schedule = RetrySchedule(base: 250, cap: 5_000, bound: 60_000, seed: seed)
            return (1...6).map { failures -> Int64 in
                schedule.schedule(.loadDeviceRegistry, afterFailures: failures, now: 0)
                var now: Int64 = 0
                while schedule.takeDue(now: now).isEmpty { now += 1 }
                return now
            }
        }
        #expect(dueTimes(seed: 42) == dueTimes(seed: 42))
        #expect(dueTimes(seed: 42) != dueTimes(seed: 43))
    }

    @Test("effects due together come in the order they were scheduled")
    func order() {
        var schedule = RetrySchedule(base: 100, cap: 100, bound: 1_000, seed: 1)
        for generation in UInt64(1)...4 { schedule.schedule(.restore(TopicPartition("push.events", 0), generation: generation), afterFailures: 1, now: 0) }
        let due = schedule.takeDue(now: 100).map { effect -> UInt64 in
            if case .restore(_, let generation) = effect { return generation }
            return 0
        }
        #expect(due == [1, 2, 3, 4])
    }
}
