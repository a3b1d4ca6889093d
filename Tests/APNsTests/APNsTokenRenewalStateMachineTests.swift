import APNs
import Testing

/// The provider token's renewal rules alone: epoch seconds in, actions out.
@Suite("Provider token renewal state machine (no clock, no signing)")
struct APNsTokenRenewalStateMachineTests {
    @Test("renewal by age, a forced renewal once per generation, and the floor between forced renewals")
    func stateMachine() {
        var machine = APNsTokenRenewalStateMachine(renewalAge: 3000, forcedRenewalFloor: 60)
        #expect(machine.token(now: 100) == .sign(issuedAt: 100))
        #expect(machine.expiredProviderToken(generation: 0, now: 100) == .sign(issuedAt: 100))
        machine.installed(token: "t1", issuedAt: 100)
        #expect(machine.generation == 1)
        #expect(machine.token(now: 100 + 2999) == .use("t1"))
        #expect(machine.token(now: 100 + 3000) == .sign(issuedAt: 3100))
        #expect(machine.expiredProviderToken(generation: 1, now: 101) == .sign(issuedAt: 101))
        machine.installed(token: "t2", issuedAt: 101)
        #expect(machine.expiredProviderToken(generation: 1, now: 102) == .alreadyRenewed)
        #expect(machine.expiredProviderToken(generation: 2, now: 160) == .deferred(until: 161))
        #expect(machine.expiredProviderToken(generation: 2, now: 161) == .sign(issuedAt: 161))
    }

    @Test("a renewal by age within the floor neither counts as forced nor lifts the floor")
    func ageRenewalWithinTheFloor() {
        var machine = APNsTokenRenewalStateMachine(renewalAge: 30, forcedRenewalFloor: 60)
        machine.installed(token: "t1", issuedAt: 0)
        #expect(machine.expiredProviderToken(generation: 1, now: 10) == .sign(issuedAt: 10))
        machine.installed(token: "t2", issuedAt: 10)
        #expect(machine.token(now: 40) == .sign(issuedAt: 40), "30 s old: renewed by age, whatever the floor")
        machine.installed(token: "t3", issuedAt: 40)
        #expect(machine.expiredProviderToken(generation: 3, now: 45) == .deferred(until: 70), "the forced renewal at 10 still holds")
        #expect(machine.expiredProviderToken(generation: 3, now: 70) == .sign(issuedAt: 70))
    }

    @Test("before any token, both ask for one to be signed; the generation names each installed token")
    func firstToken() {
        var machine = APNsTokenRenewalStateMachine()
        #expect(machine.generation == 0)
        #expect(machine.current == nil)
        #expect(machine.expiredProviderToken(generation: 0, now: 5) == .sign(issuedAt: 5))
        #expect(machine.token(now: 5) == .sign(issuedAt: 5))
        machine.installed(token: "t1", issuedAt: 5)
        #expect(machine.current?.token == "t1")
        #expect(machine.token(now: 5 + 50 * 60 - 1) == .use("t1"), "the default renewal age is 50 minutes")
        #expect(machine.expiredProviderToken(generation: 0, now: 6) == .alreadyRenewed, "an answer to no token at all")
    }
}
