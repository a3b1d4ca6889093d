import Dispatch
import Foundation
import Logging
import Synchronization

/// The graceful stop's budget, `relay.shutdown_timeout_s`, counted from the stop signal. The relay
/// fits its own hand-over into it (``Relay/RelayService``); the services that stop after it take
/// what is left. Past it a watchdog ends the process with exit 1 whatever is still blocked (a
/// librdkafka call that waits out its own timeouts, say): the orchestrator's kill would come next.
final class ShutdownBudget: Sendable {
    let timeout: Duration
    private let deadline = Mutex<ContinuousClock.Instant?>(nil)
    private let logger: Logger
    private let end: @Sendable (Int32) -> Void

    /// - Parameter end: ends the process with its argument as the status; `_exit`, which returns to nothing that
    ///   could block (no atexit handlers, no stdio flush): tests inject one that records.
    init(timeout: Duration, logger: Logger, end: @escaping @Sendable (Int32) -> Void = { _exit($0) }) {
        self.timeout = timeout
        self.logger = logger
        self.end = end
    }

    /// How long the watchdog waits for its log line before it ends the process anyway: a log pipe nobody reads
    /// (a full pipe blocks the writer) must not keep the process alive past its budget.
    static let lastWordWait: DispatchTimeInterval = .milliseconds(200)

    /// The stop began: the budget runs from now, and the watchdog is armed (once).
    func start() {
        let budget = timeout
        let started = deadline.withLock { deadline -> Bool in
            guard deadline == nil else { return false }
            deadline = .now + budget
            return true
        }
        guard started else { return }
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(budget.inMilliseconds))) { [self] in
            expire(budget: budget)
        }
    }

    /// Past the budget: the reason logged if the log takes it within ``lastWordWait``, then exit 1.
    func expire(budget: Duration) {
        let logged = DispatchSemaphore(value: 0)
        let logger = self.logger
        DispatchQueue.global().async {
            logger.critical("the graceful stop ran out of relay.shutdown_timeout_s; exiting 1", metadata: ["budget": "\(budget)"])
            logged.signal()
        }
        _ = logged.wait(timeout: .now() + Self.lastWordWait)
        end(1)
    }

    /// What is left of the budget (all of it before the stop began).
    var remaining: Duration {
        guard let deadline = deadline.withLock({ $0 }) else { return timeout }
        return max(.zero, deadline - .now)
    }
}
