import KafkaCore
import Testing

@testable import RelayCore

@Suite("Lease gate: the ownership lease, the sender's permit, what waits for the lease")
struct LeaseGateTests {
    @Test("without a session timeout there is no lease: always valid, nothing to permit or renew")
    func noLease() {
        var gate = LeaseGate(sessionTimeoutMilliseconds: nil)
        #expect(gate.isValid(at: 0) && gate.isValid(at: .max))
        let permit = gate.newPermit()
        #expect(permit == nil)
        #expect(!gate.wantsRenewal(now: 0, busy: true))
    }

    @Test("a confirmation makes it valid for two thirds of the session timeout; the permit is handed out once per new expiry")
    func permitFollowsConfirmations() throws {
        var gate = LeaseGate(sessionTimeoutMilliseconds: 30_000)
        #expect(!gate.isValid(at: 0) && gate.wantsRenewal(now: 0, busy: false), "never confirmed: a commit is wanted")
        gate.confirm(at: 1_000)
        let permit = gate.newPermit()
        let expiry = try #require(permit)
        #expect(gate.isValid(at: expiry - 1) && !gate.isValid(at: expiry))
        let again = gate.newPermit()
        #expect(again == nil, "the same expiry is not handed out twice")
        gate.confirm(at: 2_000)
        let later = gate.newPermit()
        #expect((later ?? 0) > expiry)
    }

    @Test("renewal is wanted past half of the lease while busy or holding appends, not by an idle relay")
    func renewal() throws {
        var gate = LeaseGate(sessionTimeoutMilliseconds: 30_000)
        gate.confirm(at: 0)
        let permit = gate.newPermit()
        let expiry = try #require(permit)
        let lease = try #require(gate.lease)
        let half = expiry - lease.milliseconds / 2
        #expect(!gate.wantsRenewal(now: half - 1, busy: true))
        #expect(gate.wantsRenewal(now: half, busy: true))
        #expect(!gate.wantsRenewal(now: half, busy: false))
        gate.hold(.loadDeviceRegistry)
        #expect(gate.wantsRenewal(now: half, busy: false), "held appends are work")
    }

    @Test("appends held while the lease has lapsed come back in order, once")
    func heldAppendsInOrder() {
        var gate = LeaseGate(sessionTimeoutMilliseconds: 30_000)
        for partition in Int32(0)..<3 { gate.hold(.resume([TopicPartition("push.events", partition)])) }
        let taken = gate.takeHeldAppends().compactMap { if case .resume(let partitions) = $0 { partitions.first?.partition } else { nil } }
        #expect(taken == [0, 1, 2])
        let again = gate.takeHeldAppends()
        #expect(again.isEmpty)
    }

    @Test("the wait for the lease counts from when work first waited, and ends when nothing waits")
    func waitForTheLease() {
        var gate = LeaseGate(sessionTimeoutMilliseconds: 30_000)
        let waits = [gate.waited(now: 1_000, waiting: true), gate.waited(now: 4_000, waiting: true),
                     gate.waited(now: 5_000, waiting: false), gate.waited(now: 9_000, waiting: true)]
        #expect(waits == [0, 3_000, 0, 0], "a new wait starts from nothing")
    }
}
