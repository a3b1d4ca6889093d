import APNsCore
import Testing

@Suite("Backoff: doubling waits, capped, scaled by jitter")
struct BackoffTests {
    let backoff = Backoff(base: .milliseconds(250), cap: .seconds(8))

    @Test("with full jitter the waits double from the base (no failure yet and the first failure both wait the base) until the cap, then stay at it")
    func doublesToTheCap() {
        let delays = (0...9).map { backoff.delay(failures: $0, jitter: 1) }
        #expect(delays == [
            .milliseconds(250), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(4),
            .seconds(8), .seconds(8), .seconds(8), .seconds(8),
        ])
    }

    @Test("jitter scales a wait to between half and all of it; values outside [0, 1] are clamped, not extrapolated")
    func jitterRange() {
        #expect(backoff.delay(failures: 3, jitter: 0) == .milliseconds(500))
        #expect(backoff.delay(failures: 3, jitter: 0.5) == .milliseconds(750))
        #expect(backoff.delay(failures: 3, jitter: 1) == .seconds(1))
        #expect(backoff.delay(failures: 3, jitter: -3) == .milliseconds(500))
        #expect(backoff.delay(failures: 3, jitter: 7) == .seconds(1))
        #expect(backoff.delay(failures: 3, jitter: -.infinity) == .milliseconds(500))
        #expect(backoff.delay(failures: 3, jitter: .infinity) == .seconds(1))
        // The cap bounds the wait before jitter: a capped wait still shrinks with it.
        #expect(backoff.delay(failures: 20, jitter: 0) == .seconds(4))
    }

    @Test("a negative failure count (Int.min too) waits the base, and Int.max failures neither traps nor passes the cap")
    func extremeFailureCounts() {
        #expect(backoff.delay(failures: -1, jitter: 1) == .milliseconds(250))
        #expect(backoff.delay(failures: .min, jitter: 1) == .milliseconds(250))
        #expect(backoff.delay(failures: .max, jitter: 1) == .seconds(8))
        // The exponent stops at 30: an uncapped schedule grows to base * 2^30 and no further.
        let uncapped = Backoff(base: .nanoseconds(1), cap: .seconds(1_000_000))
        #expect(uncapped.delay(failures: 31, jitter: 1) == .nanoseconds(1 << 30))
        #expect(uncapped.delay(failures: 32, jitter: 1) == .nanoseconds(1 << 30))
        #expect(uncapped.delay(failures: .max, jitter: 1) == .nanoseconds(1 << 30))
    }

    @Test("a cap below the base wins from the first try; a zero base waits nothing")
    func degenerateSchedules() {
        let capped = Backoff(base: .seconds(5), cap: .seconds(2))
        #expect(capped.delay(failures: 1, jitter: 1) == .seconds(2))
        #expect(capped.delay(failures: 1, jitter: 0) == .seconds(1))
        let zero = Backoff(base: .zero, cap: .seconds(2))
        #expect((0...40).allSatisfy { zero.delay(failures: $0, jitter: 1) == .zero })
    }

    @Test("random schedules agree with min(base * 2^(n-1), cap) * (0.5 + jitter / 2), grow with failures and with jitter, and stay within [half, all] of the capped wait")
    func agreesWithTheFormula() {
        var random = SplitMix64(seed: 2_024)
        for _ in 0..<2_000 {
            let base = Duration.milliseconds(Int64.random(in: 1...5_000, using: &random))
            let cap = Duration.milliseconds(Int64.random(in: 1...600_000, using: &random))
            let schedule = Backoff(base: base, cap: cap)
            let failures = Int.random(in: 0...40, using: &random)
            let jitter = Double.random(in: 0..<1, using: &random)
            let full = min(base * (1 << max(0, min(failures - 1, 30))), cap)
            let delay = schedule.delay(failures: failures, jitter: jitter)
            // Duration * Double rounds through a Double: a nanosecond of slack.
            let expected = full * (0.5 + 0.5 * jitter)
            #expect(max(delay - expected, expected - delay) <= .nanoseconds(1), "base \(base) cap \(cap) failures \(failures) jitter \(jitter)")
            #expect(delay >= full / 2 && delay <= full)
            #expect(schedule.delay(failures: failures + 1, jitter: jitter) >= delay)
            #expect(schedule.delay(failures: failures, jitter: min(1, jitter + 0.25)) >= delay)
        }
    }

    @Test("schedules are values: equal when base and cap are, and a changed cap applies to the next delay")
    func valueSemantics() {
        var schedule = Backoff(base: .milliseconds(250), cap: .seconds(8))
        #expect(schedule == backoff && Set([schedule, backoff]).count == 1)
        schedule.cap = .seconds(1)
        #expect(schedule != backoff)
        #expect(schedule.delay(failures: 10, jitter: 1) == .seconds(1))
        #expect(backoff.delay(failures: 10, jitter: 1) == .seconds(8))
    }
}
