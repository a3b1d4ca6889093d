// Whether the relay may still act for its partitions.

/// How long this relay may act for its partitions after the consumer group last confirmed that it
/// is a member: a relay frozen past its session timeout (CPU throttling, a node pause, SIGSTOP) may
/// have lost them to another member without knowing yet, and must send nothing and write no badge
/// state until the group confirms it again, or it would undo the new owner's work.
///
/// A confirmation is an answer of the group coordinator that needs the current membership: an
/// assignment (its SyncGroup), or a successful offset commit (refused with ILLEGAL_GENERATION or
/// UNKNOWN_MEMBER_ID once the member is gone). It counts from when the request was *made*, never
/// from when its answer was handled, so an answer that waited out a freeze confirms nothing new.
/// The coordinator gives a member's partitions away no sooner than `session.timeout.ms` after
/// the member last showed itself; the lease is shorter (``init(sessionTimeoutMilliseconds:)``),
/// which covers a heartbeat interval and the relay's own scheduling.
///
/// Times are milliseconds of the monotonic clock, which runs on while the process is stopped.
package struct OwnershipLease: Sendable, Equatable {
    /// How long a confirmation lasts.
    package let milliseconds: Int64
    /// When the newest confirming request was made; `nil` before any.
    package private(set) var confirmedAt: Int64?

    /// A lease of two thirds of the session timeout: `session.timeout.ms` minus at least a
    /// `heartbeat.interval.ms` (librdkafka's defaults: 45 s and 3 s; the lease is 30 s).
    package init(sessionTimeoutMilliseconds: Int64) {
        milliseconds = max(1, sessionTimeoutMilliseconds * 2 / 3)
    }

    /// The group confirmed the membership as of `at` (when the confirming request was made).
    package mutating func confirm(at: Int64) {
        confirmedAt = max(confirmedAt ?? at, at)
    }

    /// Until when the relay may act; `nil` before any confirmation.
    package var expiry: Int64? { confirmedAt.map { $0 &+ milliseconds } }

    /// Whether the relay may act at `now`.
    package func isValid(at now: Int64) -> Bool {
        guard let expiry else { return false }
        return now < expiry
    }
}
