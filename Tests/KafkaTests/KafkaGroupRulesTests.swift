@testable import KafkaBrokerFront
import Testing

/// The group coordinator's rules the front keeps, alone: members, generations, sessions, the TxnOffsetCommit check.
@Suite("KafkaGroupRules: Kafka's session expiry and transactional-commit fencing, as a pure machine")
struct KafkaGroupRulesTests {
    let start = ContinuousClock.now

    func join(_ rules: inout KafkaGroupRules, member: String, generation: Int32, session: Int32 = 6_000, at: Duration = .zero,
              requestMember: String = "") {
        let request = KafkaJoinGroupRequest(groupID: "g", sessionTimeoutMilliseconds: session, memberID: requestMember)
        rules.joinRequested(request, now: start + at)
        rules.joinAnswered(KafkaJoinGroupResponse(errorCode: 0, generationID: generation, memberID: member), to: request, upstream: 0,
                           now: start + at)
    }

    func commit(member: String, generation: Int32) -> KafkaTxnOffsetCommitRequest {
        KafkaTxnOffsetCommitRequest(transactionalID: "t", groupID: "g", producerID: 1, producerEpoch: 0, generationID: generation,
                                    memberID: member, groupInstanceID: nil, partitions: [("push.events", [0])])
    }

    @Test("a member's commit of its own generation passes; of an older one ILLEGAL_GENERATION; a member the group lacks UNKNOWN_MEMBER_ID")
    func verdicts() {
        var rules = KafkaGroupRules()
        join(&rules, member: "a", generation: 1)
        #expect(rules.verdict(on: commit(member: "a", generation: 1)) == .pass)
        join(&rules, member: "a", generation: 2, requestMember: "a")
        join(&rules, member: "b", generation: 2)
        #expect(rules.verdict(on: commit(member: "a", generation: 1)) == .refuse(errorCode: 22))
        #expect(rules.verdict(on: commit(member: "b", generation: 2)) == .pass)
        #expect(rules.verdict(on: commit(member: "z", generation: 2)) == .refuse(errorCode: 25))
        rules.left(KafkaLeaveGroupRequest(groupID: "g", memberIDs: ["b"]))
        #expect(rules.verdict(on: commit(member: "b", generation: 2)) == .refuse(errorCode: 25))
        #expect(rules.verdict(on: commit(member: "", generation: -1)) == .pass, "the group id alone: not judged, as Kafka")
        var other = commit(member: "a", generation: 1)
        other.groupID = "unseen"
        #expect(rules.verdict(on: other) == .pass, "a group the front saw no join of")
    }

    @Test("a static member that joins again without its member id within its session gets its place back (same member id and generation, a follower); not after its session ran out, a rebalance since, or without an instance id")
    func staticMembers() {
        var rules = KafkaGroupRules()
        func joinStatic(_ instance: String, member: String, generation: Int32, leader: String, requestMember: String = "") {
            let request = KafkaJoinGroupRequest(groupID: "g", sessionTimeoutMilliseconds: 6_000, memberID: requestMember, groupInstanceID: instance)
            rules.joinRequested(request, now: start)
            rules.joinAnswered(KafkaJoinGroupResponse(errorCode: 0, generationID: generation, memberID: member, protocolName: "cooperative-sticky",
                                                      leader: leader), to: request, upstream: 0, now: start)
        }
        joinStatic("relay-1", member: "m1", generation: 3, leader: "m1")
        joinStatic("relay-2", member: "m2", generation: 3, leader: "m1")
        let restart = KafkaJoinGroupRequest(groupID: "g", sessionTimeoutMilliseconds: 6_000, memberID: "", groupInstanceID: "relay-2")
        #expect(rules.staticRejoin(restart, now: start + .seconds(2))
                == KafkaJoinGroupResponse(errorCode: 0, generationID: 3, memberID: "m2", protocolName: "cooperative-sticky", leader: "m1"))
        // The leader restarted: answered as a follower, so it does not hand out a new assignment.
        var leader = restart
        leader.groupInstanceID = "relay-1"
        #expect(rules.staticRejoin(leader, now: start + .seconds(2))?.leader == KafkaGroupRules.absentLeader)
        var dynamic = restart
        dynamic.groupInstanceID = nil
        #expect(rules.staticRejoin(dynamic, now: start + .seconds(3)) == nil)
        var known = restart
        known.memberID = "m2"
        #expect(rules.staticRejoin(known, now: start + .seconds(3)) == nil, "a join with its member id is a rebalance: the broker's")
        // Heard at its rejoin (2 s), its session runs to 8 s.
        #expect(rules.expire(now: start + .seconds(7)).isEmpty)
        #expect(rules.expire(now: start + .seconds(9)).map(\.member) == ["m1", "m2"])
        #expect(rules.staticRejoin(restart, now: start + .seconds(9)) == nil, "its session ran out: the broker decides")

        var rebalanced = KafkaGroupRules()
        rules = rebalanced
        joinStatic("relay-2", member: "m2", generation: 3, leader: "m2")
        joinStatic("relay-3", member: "m3", generation: 4, leader: "m3")
        rebalanced = rules
        #expect(rebalanced.staticRejoin(restart, now: start + .seconds(1)) == nil, "the group rebalanced since (generation 4): the broker decides")
    }

    @Test("a member not heard from for its session timeout expires, once; heartbeats keep it; a member waiting in a join or sync does not expire")
    func sessions() {
        var rules = KafkaGroupRules()
        join(&rules, member: "a", generation: 1, session: 6_000)
        join(&rules, member: "b", generation: 1, session: 10_000)
        #expect(rules.expire(now: start + .seconds(6)).isEmpty, "at its timeout, not past it")
        rules.heard(KafkaMemberRequest(groupID: "g", generationID: 1, memberID: "a"), now: start + .seconds(5))
        #expect(rules.expire(now: start + .milliseconds(10_500)) == [.init(group: "g", member: "b", upstream: 0)])
        #expect(rules.expire(now: start + .milliseconds(10_600)).isEmpty, "expired once")
        #expect(rules.verdict(on: commit(member: "b", generation: 1)) == .refuse(errorCode: 25))
        // "a" waits in a join the coordinator holds for a rebalance: not expired however long it waits.
        rules.joinRequested(KafkaJoinGroupRequest(groupID: "g", sessionTimeoutMilliseconds: 6_000, memberID: "a"), now: start + .seconds(11))
        #expect(rules.expire(now: start + .seconds(60)).isEmpty)
        rules.joinAnswered(KafkaJoinGroupResponse(errorCode: 0, generationID: 2, memberID: "a"),
                           to: KafkaJoinGroupRequest(groupID: "g", sessionTimeoutMilliseconds: 6_000, memberID: "a"), upstream: 0, now: start + .seconds(61))
        rules.syncRequested(KafkaMemberRequest(groupID: "g", generationID: 2, memberID: "a"), now: start + .seconds(61))
        #expect(rules.expire(now: start + .seconds(90)).isEmpty, "waiting in a sync")
        rules.syncAnswered(KafkaMemberRequest(groupID: "g", generationID: 2, memberID: "a"), now: start + .seconds(91))
        #expect(rules.expire(now: start + .seconds(98)) == [.init(group: "g", member: "a", upstream: 0)])
    }

    @Test("MEMBER_ID_REQUIRED makes no member; a join refused for a known member takes it out")
    func refusedJoins() {
        var rules = KafkaGroupRules()
        let first = KafkaJoinGroupRequest(groupID: "g", sessionTimeoutMilliseconds: 6_000, memberID: "")
        rules.joinAnswered(KafkaJoinGroupResponse(errorCode: 79, generationID: -1, memberID: "a"), to: first, upstream: 0, now: start)
        #expect(rules.groups["g"]?.members.isEmpty ?? true)
        join(&rules, member: "a", generation: 3)
        let again = KafkaJoinGroupRequest(groupID: "g", sessionTimeoutMilliseconds: 6_000, memberID: "a")
        rules.joinRequested(again, now: start)
        rules.joinAnswered(KafkaJoinGroupResponse(errorCode: 25, generationID: -1, memberID: ""), to: again, upstream: 0, now: start)
        #expect(rules.groups["g"]?.members["a"] == nil)
        #expect(rules.groups["g"]?.generation == 3)
    }

    @Test("a transaction open past its producer's timeout, counted from when it began, expires once; one that ended does not; an idempotent producer has none")
    func transactionTimeouts() {
        var timeouts = KafkaTransactionTimeouts()
        timeouts.initialised(KafkaInitProducerIDRequest(transactionalID: "t", transactionTimeoutMilliseconds: 10_000), upstream: 0)
        timeouts.initialised(KafkaInitProducerIDRequest(transactionalID: nil, transactionTimeoutMilliseconds: 60_000), upstream: 0)
        #expect(timeouts.expire(now: start + .seconds(60)).isEmpty, "no transaction open")
        timeouts.joined("t", now: start)
        timeouts.joined("t", now: start + .seconds(5))
        #expect(timeouts.expire(now: start + .seconds(10)).isEmpty, "at its timeout, counted from its first partition")
        #expect(timeouts.expire(now: start + .milliseconds(10_001)).map(\.transactionalID) == ["t"])
        #expect(timeouts.expire(now: start + .seconds(30)).isEmpty, "once")
        timeouts.joined("t", now: start + .seconds(40))
        timeouts.ended("t")
        #expect(timeouts.expire(now: start + .seconds(60)).isEmpty, "committed in time")
        timeouts.joined("unknown", now: start)
        #expect(timeouts.expire(now: start + .seconds(600)).isEmpty, "a producer the front did not see initialise")
    }
}
