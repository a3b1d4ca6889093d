/// The consumer-group rules of Kafka's group coordinator (2.5 and later) that noida-db and librdkafka's mock cluster
/// do not keep, as a pure state machine fed by ``KafkaBrokerFront``: each group's members and generation, a member's
/// session (expired when nothing was heard from it for its `session.timeout.ms`, as Kafka's heartbeat expiry does),
/// and the check Kafka makes of a TxnOffsetCommit's group metadata (KIP-447), which fences a member the group has
/// moved on from.
struct KafkaGroupRules {
    typealias Instant = ContinuousClock.Instant

    /// A member of a group, as its JoinGroup and later requests showed it.
    struct Member: Equatable {
        var sessionTimeout: Duration
        var lastHeard: Instant
        /// Its JoinGroup and SyncGroup requests waiting for their answers: the coordinator holds these for a
        /// rebalance, and a member waiting in one is not expired (Kafka gives it the rebalance timeout instead).
        var waiting = 0
        /// The upstream broker its JoinGroup went to: where its LeaveGroup goes when it expires.
        var upstream: Int
    }

    struct Group: Equatable {
        var generation: Int32 = -1
        var members: [String: Member] = [:]
    }

    /// Whether a TxnOffsetCommit may reach the broker, or is answered with a Kafka error code.
    enum Verdict: Equatable {
        case pass
        case refuse(errorCode: Int16)
    }

    /// A member whose session expired: the front takes it out of its group at the broker (a LeaveGroup on its behalf).
    struct Expired: Equatable {
        var group: String
        var member: String
        var upstream: Int
    }

    private(set) var groups: [String: Group] = [:]

    /// A static member (KIP-345) as the group last admitted it: what a restart of it within its session gets back.
    struct StaticMember: Equatable {
        var memberID: String
        var generation: Int32
        var protocolName: String
        var leader: String
    }

    /// Per group, its static members by `group.instance.id`.
    private(set) var staticMembers: [String: [String: StaticMember]] = [:]

    /// A JoinGroup request was sent on the member's behalf (or a new member's, `memberID` empty).
    mutating func joinRequested(_ request: KafkaJoinGroupRequest, now: Instant) {
        guard !request.memberID.isEmpty, groups[request.groupID]?.members[request.memberID] != nil else { return }
        groups[request.groupID]?.members[request.memberID]?.waiting += 1
        groups[request.groupID]?.members[request.memberID]?.lastHeard = now
    }

    /// The answer to `request` came from `upstream`. A member it admits (no error) joins the group in the answer's
    /// generation, which becomes the group's; an answer refusing a known member (UNKNOWN_MEMBER_ID, ...) removes it.
    mutating func joinAnswered(_ response: KafkaJoinGroupResponse, to request: KafkaJoinGroupRequest, upstream: Int, now: Instant) {
        let group = request.groupID
        if !request.memberID.isEmpty, let member = groups[group]?.members[request.memberID] {
            groups[group]?.members[request.memberID]?.waiting = max(0, member.waiting - 1)
        }
        guard response.errorCode == 0 else {
            // MEMBER_ID_REQUIRED (79) hands a new member its id to join again with: it is no member yet.
            if response.errorCode != 79, !request.memberID.isEmpty { groups[group]?.members[request.memberID] = nil }
            return
        }
        var state = groups[group] ?? Group()
        state.generation = max(state.generation, response.generationID)
        state.members[response.memberID] = Member(
            sessionTimeout: .milliseconds(Int64(request.sessionTimeoutMilliseconds)), lastHeard: now,
            waiting: 0, upstream: upstream)
        groups[group] = state
        if let instance = request.groupInstanceID {
            staticMembers[group, default: [:]][instance] = StaticMember(
                memberID: response.memberID, generation: response.generationID, protocolName: response.protocolName, leader: response.leader)
        }
    }

    /// Kafka's answer to a static member that joins again without its member id (its process restarted) while the
    /// group still counts it (within its session): its place as it was, the group's generation unchanged, no
    /// rebalance of the others; its SyncGroup then gets its assignment as it was. The front answers it itself (noida-db
    /// would start the member afresh beside the one it still counts). `nil`: the broker decides (a member it does not
    /// know, one whose session ran out, a rebalance since). The member is answered as a follower: a leader's new
    /// assignment would replace the others' (Kafka keeps the group's as it was, too).
    mutating func staticRejoin(_ request: KafkaJoinGroupRequest, now: Instant) -> KafkaJoinGroupResponse? {
        guard request.memberID.isEmpty, let instance = request.groupInstanceID,
              let known = staticMembers[request.groupID]?[instance],
              let group = groups[request.groupID], group.members[known.memberID] != nil, group.generation == known.generation else { return nil }
        groups[request.groupID]?.members[known.memberID]?.lastHeard = now
        groups[request.groupID]?.members[known.memberID]?.sessionTimeout = .milliseconds(Int64(request.sessionTimeoutMilliseconds))
        return KafkaJoinGroupResponse(errorCode: 0, generationID: known.generation, memberID: known.memberID, protocolName: known.protocolName,
                                      leader: known.leader == known.memberID ? Self.absentLeader : known.leader)
    }

    /// The leader named to a rejoining static member that led: not itself, so it does not assign anew.
    static let absentLeader = "static-member-rejoined"

    /// A SyncGroup request was sent: the member waits in it, heard from.
    mutating func syncRequested(_ request: KafkaMemberRequest, now: Instant) {
        guard groups[request.groupID]?.members[request.memberID] != nil else { return }
        groups[request.groupID]?.members[request.memberID]?.waiting += 1
        groups[request.groupID]?.members[request.memberID]?.lastHeard = now
    }

    mutating func syncAnswered(_ request: KafkaMemberRequest, now: Instant) {
        guard let member = groups[request.groupID]?.members[request.memberID] else { return }
        groups[request.groupID]?.members[request.memberID]?.waiting = max(0, member.waiting - 1)
        groups[request.groupID]?.members[request.memberID]?.lastHeard = now
    }

    /// A Heartbeat (or an OffsetCommit) from the member: its session goes on.
    mutating func heard(_ request: KafkaMemberRequest, now: Instant) {
        guard groups[request.groupID]?.members[request.memberID] != nil else { return }
        groups[request.groupID]?.members[request.memberID]?.lastHeard = now
    }

    /// The members left the group (their own LeaveGroup).
    mutating func left(_ request: KafkaLeaveGroupRequest) {
        for member in request.memberIDs { forget(member, of: request.groupID) }
    }

    private mutating func forget(_ member: String, of group: String) {
        groups[group]?.members[member] = nil
        staticMembers[group] = staticMembers[group]?.filter { $0.value.memberID != member }
    }

    /// The members whose session ran out by `now`, taken out of their groups.
    mutating func expire(now: Instant) -> [Expired] {
        var expired: [Expired] = []
        for (name, group) in groups {
            for (id, member) in group.members where member.waiting == 0 && now - member.lastHeard > member.sessionTimeout {
                forget(id, of: name)
                expired.append(Expired(group: name, member: id, upstream: member.upstream))
            }
        }
        return expired.sorted { ($0.group, $0.member) < ($1.group, $1.member) }
    }

    /// Kafka's check of a transactional offset commit's group metadata: a request naming no member and no
    /// generation (a producer that sends the group id alone) passes; one from a member the group does not have is
    /// UNKNOWN_MEMBER_ID; one of another generation than the group's is ILLEGAL_GENERATION. A group the front has seen
    /// no member join is not judged.
    func verdict(on request: KafkaTxnOffsetCommitRequest) -> Verdict {
        if request.memberID.isEmpty && request.generationID < 0 { return .pass }
        guard let group = groups[request.groupID] else { return .pass }
        guard group.members[request.memberID] != nil else { return .refuse(errorCode: KafkaErrorCode.unknownMemberID) }
        guard request.generationID == group.generation else { return .refuse(errorCode: KafkaErrorCode.illegalGeneration) }
        return .pass
    }
}

/// The transaction timeout Kafka's transaction coordinator keeps and noida-db does not: a transaction still open
/// `transaction.timeout.ms` after it began (its first AddPartitionsToTxn or AddOffsetsToTxn) is aborted, and its
/// producer's epoch bumped, whether or not its producer is alive. A pure machine fed by ``KafkaBrokerFront``.
struct KafkaTransactionTimeouts {
    typealias Instant = ContinuousClock.Instant

    struct Transactional: Equatable {
        var timeout: Duration
        /// When its open transaction began; `nil` when none is open.
        var began: Instant?
        /// The upstream broker its requests go to: where the abort goes.
        var upstream: Int
    }

    private(set) var producers: [String: Transactional] = [:]

    /// A producer initialised its transactional id with this timeout (a transaction it had open is over).
    mutating func initialised(_ request: KafkaInitProducerIDRequest, upstream: Int) {
        guard let id = request.transactionalID else { return }
        producers[id] = Transactional(timeout: .milliseconds(Int64(request.transactionTimeoutMilliseconds)), began: nil, upstream: upstream)
    }

    /// A partition or the group's offsets joined the producer's transaction: it began now if none was open.
    mutating func joined(_ transactionalID: String, now: Instant) {
        guard producers[transactionalID] != nil, producers[transactionalID]?.began == nil else { return }
        producers[transactionalID]?.began = now
    }

    /// The producer's transaction was committed or aborted (EndTxn answered).
    mutating func ended(_ transactionalID: String) {
        producers[transactionalID]?.began = nil
    }

    /// The transactions open past their timeout by `now`, each forgotten as open: the front aborts them.
    mutating func expire(now: Instant) -> [(transactionalID: String, timeout: Duration, upstream: Int)] {
        var expired: [(transactionalID: String, timeout: Duration, upstream: Int)] = []
        for (id, producer) in producers {
            guard let began = producer.began, now - began > producer.timeout else { continue }
            producers[id]?.began = nil
            expired.append((id, producer.timeout, producer.upstream))
        }
        return expired.sorted { $0.transactionalID < $1.transactionalID }
    }
}
