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

    init(timeout: Duration, logger: Logger) {
        self.timeout = timeout
        self.logger = logger
    }

    /// The stop began: the budget runs from now, and the watchdog is armed (once).
    func start() {
        let budget = timeout
        let started = deadline.withLock { deadline -> Bool in
            guard deadline == nil else { return false }
            deadline = .now + budget
            return true
        }
        guard started else { return }
        let logger = self.logger
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(budget.inMilliseconds))) {
            logger.critical("the graceful stop ran out of relay.shutdown_timeout_s; exiting 1", metadata: ["budget": "\(budget)"])
            exit(1)
        }
    }

    /// What is left of the budget (all of it before the stop began).
    var remaining: Duration {
        guard let deadline = deadline.withLock({ $0 }) else { return timeout }
        return max(.zero, deadline - .now)
    }
}
