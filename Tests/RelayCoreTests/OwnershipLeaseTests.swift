import Testing

@testable import RelayCore

@Suite("Ownership lease: how long the relay may act after the group last confirmed it")
struct OwnershipLeaseTests {
    @Test("the lease is two thirds of the session timeout, rounded down, and never shorter than a millisecond")
    func length() {
        let cases: [(session: Int64, lease: Int64)] = [
            (45_000, 30_000), (10_000, 6_666), (6_000, 4_000), (10, 6), (3, 2), (2, 1), (1, 1), (0, 1), (-5_000, 1),
        ]
        for (session, lease) in cases {
            #expect(OwnershipLease(sessionTimeoutMilliseconds: session).milliseconds == lease, "session \(session) ms")
        }
    }

    @Test("before any confirmation there is no expiry and the relay may not act at any time")
    func unconfirmed() {
        let lease = OwnershipLease(sessionTimeoutMilliseconds: 45_000)
        #expect(lease.confirmedAt == nil && lease.expiry == nil)
        for now: Int64 in [.min, -1, 0, 1, 29_999, .max] { #expect(!lease.isValid(at: now), "\(now)") }
    }

    @Test("valid up to, not at, the expiry; a newer confirmation extends it, an older one (an answer that waited out a freeze) moves nothing")
    func boundariesAndOrder() {
        var lease = OwnershipLease(sessionTimeoutMilliseconds: 3)
        lease.confirm(at: -10)
        #expect(lease.confirmedAt == -10 && lease.expiry == -8)
        #expect(lease.isValid(at: -9) && !lease.isValid(at: -8) && !lease.isValid(at: 0))
        lease.confirm(at: 100)
        lease.confirm(at: 99)
        lease.confirm(at: 100)
        #expect(lease.confirmedAt == 100 && lease.expiry == 102 && lease.isValid(at: 101) && !lease.isValid(at: 102))
    }

    @Test("random confirmations in any order: the expiry is the newest request plus the lease, and validity is now before it",
          arguments: [1 as Int64, 3, 45_000])
    func agreesWithTheNewestConfirmation(session: Int64) {
        var random = SeededGenerator(seed: UInt64(session))
        var lease = OwnershipLease(sessionTimeoutMilliseconds: session)
        var newest: Int64?
        for _ in 0..<2_000 {
            let at = Int64.random(in: -1_000_000...1_000_000, using: &random)
            lease.confirm(at: at)
            newest = max(newest ?? at, at)
            let expiry = newest! + lease.milliseconds
            #expect(lease.confirmedAt == newest && lease.expiry == expiry)
            let now = Int64.random(in: -1_100_000...1_100_000, using: &random)
            #expect(lease.isValid(at: now) == (now < expiry), "now \(now) expiry \(expiry)")
            #expect(lease.isValid(at: expiry - 1) && !lease.isValid(at: expiry))
        }
    }

    @Test("leases are equal when their length and newest confirmation are")
    func equality() {
        var first = OwnershipLease(sessionTimeoutMilliseconds: 45_000)
        var second = OwnershipLease(sessionTimeoutMilliseconds: 45_001)
        #expect(first == second)  // both 30,000 ms
        first.confirm(at: 5)
        #expect(first != second)
        second.confirm(at: 1)
        second.confirm(at: 5)
        #expect(first == second)
        #expect(OwnershipLease(sessionTimeoutMilliseconds: 3_000) != OwnershipLease(sessionTimeoutMilliseconds: 6_000))
    }
}
