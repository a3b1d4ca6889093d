import Synchronization
import RelayCore

/// What the service reports about itself (readiness, counters), readable from any task.
public final class RelayStatus: Sendable {
    private let state = Mutex(Snapshot())

    public struct Snapshot: Sendable {
        public var devicesLoaded = false
        public var partitionsRestored = false
        /// Why the relay gave up (it is exiting 1); `nil` while healthy.
        public var failure: String?
        /// Records consumed and not finished.
        public var pendingRecords = 0
        /// Notifications handed to the send window and not yet answered: their events' badge changes are stored,
        /// their results not all published.
        public var pendingNotifications = 0
        public var counters = RelayCounters()
    }

    public init() {}

    public var snapshot: Snapshot { state.withLock { $0 } }

    func update(_ body: (inout Snapshot) -> Void) { state.withLock { body(&$0) } }
}

/// The relay gave up on a failure it cannot get past (see the engine's failure bound): the
/// process exits 1 and its orchestrator restarts it.
public struct RelayFailure: Error, CustomStringConvertible {
    public var reason: String
    /// The process's exit code: 1, or 2 for a failure an operator must act on before a restart can help.
    public var exitCode: Int32 = 1
    public var description: String { "the relay gave up: \(reason)" }
}
