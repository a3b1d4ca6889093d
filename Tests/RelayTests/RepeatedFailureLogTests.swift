import Logging
import Testing

@testable import Relay

/// The bound on publish-failure lines, with the clock given: each line's metadata and where the interval falls.
/// (FatalProducerTests checks the rate over a long run and the lines of a real failing producer.)
@Suite("Repeated publish failures: one line at once, then a summary per destination per interval")
struct RepeatedFailureLogTests {
    let t0 = ContinuousClock.now
    let interval = RepeatedFailureLog.interval
    let timedOut = PublishFailure.other("timed out")
    let refused = PublishFailure.other("refused")

    @Test("a destination's first failure gives a line at once: the destination, the error, and no failures before it")
    func firstFailure() {
        var log = RepeatedFailureLog()
        #expect(RepeatedFailureLog.interval == .seconds(10))
        let line = log.failed(.changelog, .tooLarge, at: t0)
        #expect(line == ["destination": "\(PublishDestination.changelog)", "error": "tooLarge", "failed since the last line": "0"])
    }

    @Test("failures within the interval are counted, not logged; the first at the interval's end is logged with the count and its own error")
    func countedWithinInterval() {
        var log = RepeatedFailureLog()
        #expect(log.failed(.records, timedOut, at: t0) != nil)
        for step in 1...5 {
            #expect(log.failed(.records, timedOut, at: t0 + .seconds(step)) == nil)
        }
        #expect(log.failed(.records, refused, at: t0 + interval - .nanoseconds(1)) == nil, "the interval is not over yet")
        let line = log.failed(.records, .fatal("lost writes"), at: t0 + interval)
        #expect(line == ["destination": "\(PublishDestination.records)", "error": "fatal(\"lost writes\")", "failed since the last line": "6"])
        // That line starts the next interval, with its count back at zero.
        #expect(log.failed(.records, timedOut, at: t0 + interval + .seconds(1)) == nil)
        #expect(log.failed(.records, timedOut, at: t0 + interval * 2)?["failed since the last line"] == "1")
    }

    @Test("a failure of no destination counts as a result's or dead letter's")
    func noDestination() {
        var log = RepeatedFailureLog()
        #expect(log.failed(nil, timedOut, at: t0)?["destination"] == "\(PublishDestination.records)")
        #expect(log.failed(.records, timedOut, at: t0 + .seconds(1)) == nil, "the same streak")
        #expect(log.failed(nil, timedOut, at: t0 + .seconds(2)) == nil)
        #expect(log.summary(at: t0 + interval)?["\(PublishDestination.records)"] == "2 failed, the last: \(timedOut)")
    }

    @Test("each destination has its own streak: one failing does not hold back another's first line")
    func destinationsApart() {
        var log = RepeatedFailureLog()
        #expect(log.failed(.records, timedOut, at: t0) != nil)
        #expect(log.failed(.changelog, timedOut, at: t0) != nil)
        #expect(log.failed(.forwards, timedOut, at: t0 + .seconds(1)) != nil)
        #expect(log.failed(.records, timedOut, at: t0 + .seconds(1)) == nil)
        #expect(log.failed(.changelog, timedOut, at: t0 + .seconds(1)) == nil)
    }

    @Test("a summary names each destination whose interval passed with failures not logged, with their count and the last error; then they count again")
    func summaries() {
        var quiet = RepeatedFailureLog()
        #expect(quiet.summary(at: t0) == nil, "nothing failed")
        _ = quiet.failed(.records, timedOut, at: t0)
        #expect(quiet.summary(at: t0 + interval * 3) == nil, "a failure already logged is not summarised")

        var log = RepeatedFailureLog()
        _ = log.failed(.changelog, timedOut, at: t0)
        _ = log.failed(.changelog, timedOut, at: t0 + .seconds(1))
        _ = log.failed(.changelog, refused, at: t0 + .seconds(2))
        _ = log.failed(.progress, timedOut, at: t0 + .seconds(5))
        _ = log.failed(.progress, timedOut, at: t0 + .seconds(6))
        #expect(log.summary(at: t0 + interval - .nanoseconds(1)) == nil, "no destination's interval is over")
        let summary = log.summary(at: t0 + interval)
        #expect(summary == ["\(PublishDestination.changelog)": "2 failed, the last: \(refused)"],
                "only the changelog's interval is over at t0 + 10 s; progress's line was at t0 + 5 s")
        #expect(log.summary(at: t0 + interval) == nil, "summarised once")
        #expect(log.summary(at: t0 + .seconds(15)) == ["\(PublishDestination.progress)": "1 failed, the last: \(timedOut)"])

        // The summary was a line: failures after it are counted against it, not logged.
        #expect(log.failed(.changelog, timedOut, at: t0 + interval + .seconds(1)) == nil)
        #expect(log.failed(.changelog, timedOut, at: t0 + interval * 2)?["failed since the last line"] == "1")
    }
}
