import Logging
import RelayCore

/// Logs repeated publish failures at a bounded rate: the first failure of a destination at once,
/// then at most one summary line per destination every ``interval`` with how many failed since.
/// A broker that refuses everything fails thousands of records a second; a line per record buried
/// the one line that said why.
struct RepeatedFailureLog {
    /// The least time between two lines of one destination.
    static let interval: Duration = .seconds(10)

    private struct Streak {
        var lastLogged: ContinuousClock.Instant
        var unlogged = 0
        var last: PublishFailure
    }

    private var streaks: [PublishDestination: Streak] = [:]

    /// A failure to publish to `destination`: the metadata of a line to log now, or `nil` when
    /// it is counted for the next summary.
    mutating func failed(_ destination: PublishDestination?, _ failure: PublishFailure, at now: ContinuousClock.Instant) -> Logger.Metadata? {
        let destination = destination ?? .records
        guard var streak = streaks[destination], now - streak.lastLogged < Self.interval else {
            let unlogged = streaks[destination]?.unlogged ?? 0
            streaks[destination] = Streak(lastLogged: now, last: failure)
            return ["destination": "\(destination)", "error": "\(failure)", "failed since the last line": "\(unlogged)"]
        }
        streak.unlogged += 1
        streak.last = failure
        streaks[destination] = streak
        return nil
    }

    /// A summary of the failures counted and not logged, once ``interval`` passed since a
    /// destination's last line; `nil` when there is none to give.
    mutating func summary(at now: ContinuousClock.Instant) -> Logger.Metadata? {
        var metadata: Logger.Metadata = [:]
        for (destination, streak) in streaks where streak.unlogged > 0 && now - streak.lastLogged >= Self.interval {
            metadata["\(destination)"] = "\(streak.unlogged) failed, the last: \(streak.last)"
            streaks[destination] = Streak(lastLogged: now, last: streak.last)
        }
        return metadata.isEmpty ? nil : metadata
    }
}
