/// What the engine keeps about its ownership lease (``OwnershipLease``) as a value: the lease, the expiry last
/// handed to the sender, the changelog appends held while it had lapsed, and since when work has waited for it.
/// Pure: times are the engine's monotonic milliseconds, handed in.
package struct LeaseGate: Sendable {
    /// The group's confirmation that the partitions are still this relay's; `nil` without a session timeout
    /// (engine tests that do not model the group): always valid.
    package private(set) var lease: OwnershipLease?
    /// The expiry last handed to the driver for its sends (``RelayEffect/permitSends(until:)``).
    private var permittedUntil: Int64?
    /// Changelog appends made while the lease had lapsed, in order: written once it is confirmed.
    package private(set) var heldAppends: [RelayEffect] = []
    /// Since when work has waited for the lease (the failure bound counts from there).
    private var waitingSince: Int64?

    /// A gate for a lease of `sessionTimeoutMilliseconds` (`nil`: none).
    package init(sessionTimeoutMilliseconds: Int64?) {
        lease = sessionTimeoutMilliseconds.map { OwnershipLease(sessionTimeoutMilliseconds: $0) }
    }

    /// Whether the lease holds at `now` (always without one).
    package func isValid(at now: Int64) -> Bool { lease?.isValid(at: now) ?? true }

    /// Whether the lease should be confirmed by the next commit even if no offset moved: past half of it, while
    /// the relay is `busy`. An idle relay lets it lapse (the first record after the idle spell waits for one commit).
    package func wantsRenewal(now: Int64, busy: Bool) -> Bool {
        guard let lease, let expiry = lease.expiry else { return lease != nil }
        return (busy || !heldAppends.isEmpty) && now >= expiry - lease.milliseconds / 2
    }

    /// The group confirmed the lease as of `at` (an accepted commit's request time, an assignment's answer).
    package mutating func confirm(at: Int64) { lease?.confirm(at: at) }

    /// The expiry to permit the sender's writes until, when it moved since it was last handed out; `nil` otherwise.
    package mutating func newPermit() -> Int64? {
        guard let expiry = lease?.expiry, expiry != permittedUntil else { return nil }
        permittedUntil = expiry
        return expiry
    }

    /// Holds `append` until the lease is confirmed (after those held already: a user's changes are written in order).
    package mutating func hold(_ append: RelayEffect) { heldAppends.append(append) }

    /// The appends held, in order, no longer held.
    package mutating func takeHeldAppends() -> [RelayEffect] {
        defer { heldAppends = [] }
        return heldAppends
    }

    /// How long work has waited for the lease at `now` (0 when it does not: `waiting` false ends the wait).
    package mutating func waited(now: Int64, waiting: Bool) -> Int64 {
        guard waiting else {
            waitingSince = nil
            return 0
        }
        let since = waitingSince ?? now
        waitingSince = since
        return now - since
    }
}
