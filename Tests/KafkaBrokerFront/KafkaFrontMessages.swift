import NIOCore

/// The Kafka APIs the front reads or answers (their keys in the protocol guide's "Api Keys").
enum KafkaAPIKey: Int16 {
    case produce = 0
    case fetch = 1
    case metadata = 3
    case offsetCommit = 8
    case findCoordinator = 10
    case joinGroup = 11
    case heartbeat = 12
    case leaveGroup = 13
    case syncGroup = 14
    case apiVersions = 18
    case initProducerID = 22
    case addPartitionsToTxn = 24
    case addOffsetsToTxn = 25
    case endTxn = 26
    case txnOffsetCommit = 28
    case describeCluster = 60

    /// The first version of the API whose messages are flexible (compact strings and arrays, tagged fields, header v2
    /// for requests and v1 for responses), from each message's `flexibleVersions`.
    var firstFlexibleVersion: Int16 {
        switch self {
        case .produce, .metadata: 9
        case .fetch: 12
        case .offsetCommit: 8
        case .joinGroup: 6
        case .heartbeat, .leaveGroup, .syncGroup: 4
        case .findCoordinator, .apiVersions, .txnOffsetCommit, .addPartitionsToTxn, .addOffsetsToTxn, .endTxn: 3
        case .initProducerID: 2
        case .describeCluster: 0
        }
    }

    func isFlexible(_ version: Int16) -> Bool { version >= firstFlexibleVersion }

    /// Whether a response of `version` has header v1 (with a tag buffer); ApiVersions' is always v0, so that a client
    /// can read it whatever version it asked for.
    func responseHeaderIsFlexible(_ version: Int16) -> Bool { self != .apiVersions && isFlexible(version) }
}

/// A request header (v1, or v2 with its tag buffer for a flexible version of an API the front knows).
struct KafkaRequestHeader: Equatable {
    var apiKey: Int16
    var apiVersion: Int16
    var correlationID: Int32
    var clientID: String?

    var api: KafkaAPIKey? { KafkaAPIKey(rawValue: apiKey) }

    /// Reads the header from the start of a request, leaving `buffer` at its body. The client id is a
    /// `NULLABLE_STRING` in both header versions.
    static func read(from buffer: inout ByteBuffer) throws -> KafkaRequestHeader {
        let header = KafkaRequestHeader(apiKey: try buffer.readKafkaInt16(), apiVersion: try buffer.readKafkaInt16(),
                                        correlationID: try buffer.readKafkaInt32(), clientID: try buffer.readKafkaString(compact: false))
        if let api = header.api, api.isFlexible(header.apiVersion) { try buffer.skipKafkaTaggedFields() }
        return header
    }

    func write(to buffer: inout ByteBuffer) {
        buffer.writeInteger(apiKey)
        buffer.writeInteger(apiVersion)
        buffer.writeInteger(correlationID)
        buffer.writeKafkaString(clientID, compact: false)
        if let api, api.isFlexible(apiVersion) { buffer.writeKafkaNoTaggedFields() }
    }
}

/// What the front reads of a JoinGroup request.
struct KafkaJoinGroupRequest: Equatable {
    var groupID: String
    var sessionTimeoutMilliseconds: Int32
    /// Empty on a member's first join.
    var memberID: String
    /// A static member's `group.instance.id` (v5 and later), `nil` for a dynamic member.
    var groupInstanceID: String? = nil

    static func read(_ body: inout ByteBuffer, version: Int16) throws -> KafkaJoinGroupRequest {
        let compact = KafkaAPIKey.joinGroup.isFlexible(version)
        let group = try body.readKafkaString(compact: compact) ?? ""
        let session = try body.readKafkaInt32()
        if version >= 1 { _ = try body.readKafkaInt32() }  // RebalanceTimeoutMs
        let member = try body.readKafkaString(compact: compact) ?? ""
        let instance = version >= 5 ? try body.readKafkaString(compact: compact) : nil
        return KafkaJoinGroupRequest(groupID: group, sessionTimeoutMilliseconds: session, memberID: member, groupInstanceID: instance)
    }
}

/// What the front reads of a JoinGroup response, and writes when it answers a static member itself.
struct KafkaJoinGroupResponse: Equatable {
    var errorCode: Int16
    var generationID: Int32
    var memberID: String
    var protocolName: String = ""
    var leader: String = ""

    static func read(_ body: inout ByteBuffer, version: Int16) throws -> KafkaJoinGroupResponse {
        let compact = KafkaAPIKey.joinGroup.isFlexible(version)
        if version >= 2 { _ = try body.readKafkaInt32() }  // ThrottleTimeMs
        let error = try body.readKafkaInt16()
        let generation = try body.readKafkaInt32()
        if version >= 7 { _ = try body.readKafkaString(compact: compact) }  // ProtocolType
        let protocolName = try body.readKafkaString(compact: compact) ?? ""
        let leader = try body.readKafkaString(compact: compact) ?? ""
        if version >= 9 { _ = try body.readKafkaInt8() }  // SkipAssignment
        return KafkaJoinGroupResponse(errorCode: error, generationID: generation, memberID: try body.readKafkaString(compact: compact) ?? "",
                                      protocolName: protocolName, leader: leader)
    }

    /// The response to the request of `correlationID` (a follower's: no member list), for versions 2 to 6 (librdkafka
    /// asks 5; a later one is not answered by the front).
    func encoded(correlationID: Int32, version: Int16) -> ByteBuffer {
        let compact = KafkaAPIKey.joinGroup.isFlexible(version)
        var buffer = ByteBuffer()
        buffer.writeInteger(correlationID)
        if compact { buffer.writeKafkaNoTaggedFields() }
        buffer.writeInteger(Int32(0))  // ThrottleTimeMs
        buffer.writeInteger(errorCode)
        buffer.writeInteger(generationID)
        buffer.writeKafkaString(protocolName, compact: compact)
        buffer.writeKafkaString(leader, compact: compact)
        buffer.writeKafkaString(memberID, compact: compact)
        buffer.writeKafkaArrayCount(0, compact: compact)  // Members: the leader's only
        if compact { buffer.writeKafkaNoTaggedFields() }
        return buffer
    }
}

/// The member a Heartbeat, SyncGroup or OffsetCommit (v1+) request speaks for: each begins with GroupId,
/// GenerationId, MemberId.
struct KafkaMemberRequest: Equatable {
    var groupID: String
    var generationID: Int32
    var memberID: String

    static func read(_ body: inout ByteBuffer, api: KafkaAPIKey, version: Int16) throws -> KafkaMemberRequest {
        let compact = api.isFlexible(version)
        return KafkaMemberRequest(groupID: try body.readKafkaString(compact: compact) ?? "", generationID: try body.readKafkaInt32(),
                                  memberID: try body.readKafkaString(compact: compact) ?? "")
    }
}

/// The members a LeaveGroup request takes out: one MemberId before v3, a Members array from v3.
struct KafkaLeaveGroupRequest: Equatable {
    var groupID: String
    var memberIDs: [String]

    static func read(_ body: inout ByteBuffer, version: Int16) throws -> KafkaLeaveGroupRequest {
        let compact = KafkaAPIKey.leaveGroup.isFlexible(version)
        let group = try body.readKafkaString(compact: compact) ?? ""
        guard version >= 3 else { return KafkaLeaveGroupRequest(groupID: group, memberIDs: [try body.readKafkaString(compact: false) ?? ""]) }
        var members: [String] = []
        for _ in 0..<(try body.readKafkaArrayCount(compact: compact)) {
            members.append(try body.readKafkaString(compact: compact) ?? "")
            _ = try body.readKafkaString(compact: compact)  // GroupInstanceId
            if version >= 5 { _ = try body.readKafkaString(compact: compact) }  // Reason
            if compact { try body.skipKafkaTaggedFields() }
        }
        return KafkaLeaveGroupRequest(groupID: group, memberIDs: members)
    }

    /// A LeaveGroup v1 request (header v1): GroupId, MemberId.
    func write(correlationID: Int32, clientID: String) -> ByteBuffer {
        var buffer = ByteBuffer()
        KafkaRequestHeader(apiKey: KafkaAPIKey.leaveGroup.rawValue, apiVersion: 1, correlationID: correlationID, clientID: clientID)
            .write(to: &buffer)
        buffer.writeKafkaString(groupID, compact: false)
        buffer.writeKafkaString(memberIDs.first ?? "", compact: false)
        return buffer
    }
}

/// A TxnOffsetCommit request as the front reads it: the member and generation (v3+; before v3 a request names the
/// group alone, generation -1 and no member), and the partitions, to answer each.
struct KafkaTxnOffsetCommitRequest: Equatable {
    var transactionalID: String
    var groupID: String
    var producerID: Int64
    var producerEpoch: Int16
    var generationID: Int32
    var memberID: String
    var groupInstanceID: String?
    var partitions: [(topic: String, partitions: [Int32])]

    static func == (lhs: Self, rhs: Self) -> Bool {
        (lhs.transactionalID, lhs.groupID, lhs.producerID, lhs.producerEpoch) == (rhs.transactionalID, rhs.groupID, rhs.producerID, rhs.producerEpoch)
            && (lhs.generationID, lhs.memberID, lhs.groupInstanceID) == (rhs.generationID, rhs.memberID, rhs.groupInstanceID)
            && lhs.partitions.map(\.topic) == rhs.partitions.map(\.topic) && lhs.partitions.map(\.partitions) == rhs.partitions.map(\.partitions)
    }

    static func read(_ body: inout ByteBuffer, version: Int16) throws -> KafkaTxnOffsetCommitRequest {
        let compact = KafkaAPIKey.txnOffsetCommit.isFlexible(version)
        var request = KafkaTxnOffsetCommitRequest(
            transactionalID: try body.readKafkaString(compact: compact) ?? "", groupID: try body.readKafkaString(compact: compact) ?? "",
            producerID: try body.readKafkaInt64(), producerEpoch: try body.readKafkaInt16(), generationID: -1, memberID: "",
            groupInstanceID: nil, partitions: [])
        if version >= 3 {
            request.generationID = try body.readKafkaInt32()
            request.memberID = try body.readKafkaString(compact: compact) ?? ""
            request.groupInstanceID = try body.readKafkaString(compact: compact)
        }
        for _ in 0..<(try body.readKafkaArrayCount(compact: compact)) {
            let topic = try body.readKafkaString(compact: compact) ?? ""
            var partitions: [Int32] = []
            for _ in 0..<(try body.readKafkaArrayCount(compact: compact)) {
                partitions.append(try body.readKafkaInt32())
                _ = try body.readKafkaInt64()  // CommittedOffset
                if version >= 2 { _ = try body.readKafkaInt32() }  // CommittedLeaderEpoch
                _ = try body.readKafkaString(compact: compact)  // CommittedMetadata
                if compact { try body.skipKafkaTaggedFields() }
            }
            if compact { try body.skipKafkaTaggedFields() }
            request.partitions.append((topic, partitions))
        }
        if compact { try body.skipKafkaTaggedFields() }
        return request
    }

    /// The response refusing every partition of the request with `errorCode` (header, then ThrottleTimeMs and the
    /// Topics' Partitions with their ErrorCode).
    func refusal(_ errorCode: Int16, correlationID: Int32, version: Int16) -> ByteBuffer {
        let compact = KafkaAPIKey.txnOffsetCommit.isFlexible(version)
        var buffer = ByteBuffer()
        buffer.writeInteger(correlationID)
        if compact { buffer.writeKafkaNoTaggedFields() }
        buffer.writeInteger(Int32(0))
        buffer.writeKafkaArrayCount(partitions.count, compact: compact)
        for (topic, indices) in partitions {
            buffer.writeKafkaString(topic, compact: compact)
            buffer.writeKafkaArrayCount(indices.count, compact: compact)
            for index in indices {
                buffer.writeInteger(index)
                buffer.writeInteger(errorCode)
                if compact { buffer.writeKafkaNoTaggedFields() }
            }
            if compact { buffer.writeKafkaNoTaggedFields() }
        }
        if compact { buffer.writeKafkaNoTaggedFields() }
        return buffer
    }
}

/// The transactional id a transactional request (AddPartitionsToTxn up to v3, AddOffsetsToTxn, EndTxn) names: its
/// first field.
enum KafkaTransactionalRequest {
    static func transactionalID(_ body: ByteBuffer, api: KafkaAPIKey, version: Int16) throws -> String {
        var body = body
        return try body.readKafkaString(compact: api.isFlexible(version)) ?? ""
    }
}

/// What the front reads of an InitProducerId request: the transactional id (null for an idempotent producer) and the
/// transaction timeout the producer asks for.
struct KafkaInitProducerIDRequest: Equatable {
    var transactionalID: String?
    var transactionTimeoutMilliseconds: Int32

    static func read(_ body: inout ByteBuffer, version: Int16) throws -> KafkaInitProducerIDRequest {
        let compact = KafkaAPIKey.initProducerID.isFlexible(version)
        return KafkaInitProducerIDRequest(transactionalID: try body.readKafkaString(compact: compact),
                                          transactionTimeoutMilliseconds: try body.readKafkaInt32())
    }

    /// An InitProducerId v1 request (header v1): TransactionalId, TransactionTimeoutMs. Sent for a transactional id
    /// whose transaction outlived its timeout, it has the broker abort that transaction and bump the id's epoch, as
    /// Kafka's coordinator does when it times a transaction out.
    func write(correlationID: Int32, clientID: String) -> ByteBuffer {
        var buffer = ByteBuffer()
        KafkaRequestHeader(apiKey: KafkaAPIKey.initProducerID.rawValue, apiVersion: 1, correlationID: correlationID, clientID: clientID)
            .write(to: &buffer)
        buffer.writeKafkaString(transactionalID, compact: false)
        buffer.writeInteger(transactionTimeoutMilliseconds)
        return buffer
    }
}

/// Kafka's error codes the front answers with.
enum KafkaErrorCode {
    static let illegalGeneration: Int16 = 22
    static let unknownMemberID: Int16 = 25
}

extension KafkaAPIKey {
    /// Whether a Produce request expects no response (`Acks` 0): TransactionalId (v3+) comes first.
    static func produceExpectsNoResponse(_ body: ByteBuffer, version: Int16) -> Bool {
        var body = body
        let compact = KafkaAPIKey.produce.isFlexible(version)
        do {
            if version >= 3 { _ = try body.readKafkaString(compact: compact) }  // TransactionalId, null or not
            return try body.readKafkaInt16() == 0
        } catch {
            return false
        }
    }
}

/// Where a response names brokers (Metadata's Brokers, FindCoordinator's coordinator or Coordinators, DescribeCluster's
/// Brokers): the reader index of each broker's Port, found by reading the response up to it. The host is left as it
/// is: the front listens on the upstream's host, so only the port changes, in place.
enum KafkaBrokerAddresses {
    /// The (host, port, index of the port) of every broker named in the response body that begins at `body`'s reader
    /// index (after the response header).
    static func find(in body: ByteBuffer, api: KafkaAPIKey, version: Int16) throws -> [(host: String, port: Int32, portIndex: Int)] {
        var body = body
        let compact = api.isFlexible(version)
        var found: [(host: String, port: Int32, portIndex: Int)] = []
        func broker(skipRack: Bool) throws {
            _ = try body.readKafkaInt32()  // NodeId / BrokerId
            let host = try body.readKafkaString(compact: compact) ?? ""
            let index = body.readerIndex
            found.append((host, try body.readKafkaInt32(), index))
            if skipRack { _ = try body.readKafkaString(compact: compact) }  // Rack
            if compact { try body.skipKafkaTaggedFields() }
        }
        switch api {
        case .metadata:
            if version >= 3 { _ = try body.readKafkaInt32() }  // ThrottleTimeMs
            for _ in 0..<(try body.readKafkaArrayCount(compact: compact)) { try broker(skipRack: version >= 1) }
        case .describeCluster:
            _ = try body.readKafkaInt32()  // ThrottleTimeMs
            _ = try body.readKafkaInt16()  // ErrorCode
            _ = try body.readKafkaString(compact: true)  // ErrorMessage
            if version >= 1 { _ = try body.readKafkaInt8() }  // EndpointType
            _ = try body.readKafkaString(compact: true)  // ClusterId
            _ = try body.readKafkaInt32()  // ControllerId
            for _ in 0..<(try body.readKafkaArrayCount(compact: true)) { try broker(skipRack: true) }
        case .findCoordinator:
            if version >= 1 { _ = try body.readKafkaInt32() }  // ThrottleTimeMs
            if version < 4 {
                _ = try body.readKafkaInt16()  // ErrorCode
                if version >= 1 { _ = try body.readKafkaString(compact: compact) }  // ErrorMessage
                _ = try body.readKafkaInt32()  // NodeId
                let host = try body.readKafkaString(compact: compact) ?? ""
                let index = body.readerIndex
                found.append((host, try body.readKafkaInt32(), index))
            } else {
                for _ in 0..<(try body.readKafkaArrayCount(compact: true)) {
                    _ = try body.readKafkaString(compact: true)  // Key
                    _ = try body.readKafkaInt32()  // NodeId
                    let host = try body.readKafkaString(compact: true) ?? ""
                    let index = body.readerIndex
                    found.append((host, try body.readKafkaInt32(), index))
                    _ = try body.readKafkaInt16()  // ErrorCode
                    _ = try body.readKafkaString(compact: true)  // ErrorMessage
                    try body.skipKafkaTaggedFields()
                }
            }
        default:
            break
        }
        return found
    }
}

/// What the front reads of a Fetch: the request's MaxWaitMs, and whether an answer carries no records.
enum KafkaFetch {
    /// The request's MaxWaitMs: after ReplicaId up to version 14, first from 15 (ReplicaId moved to a tagged field).
    static func maxWait(_ body: ByteBuffer, version: Int16) throws -> Duration {
        var body = body
        if version < 15 { _ = try body.readKafkaInt32() }
        return .milliseconds(max(0, try body.readKafkaInt32()))
    }

    /// Whether an answer (its body, after the response header) has no error and no records in any partition: what a
    /// Kafka broker would hold until data came or the wait ran out. A field it cannot read throws.
    static func isEmpty(_ body: ByteBuffer, version: Int16) throws -> Bool {
        var body = body
        let compact = KafkaAPIKey.fetch.isFlexible(version)
        if version >= 1 { _ = try body.readKafkaInt32() }  // ThrottleTimeMs
        if version >= 7 {
            guard try body.readKafkaInt16() == 0 else { return false }  // ErrorCode
            _ = try body.readKafkaInt32()  // SessionId
        }
        for _ in 0..<(try body.readKafkaArrayCount(compact: compact)) {
            if version >= 13 {
                guard body.readableBytes >= 16 else { throw KafkaWireError(description: "a TopicId past the end") }
                body.moveReaderIndex(forwardBy: 16)
            } else {
                _ = try body.readKafkaString(compact: compact)
            }
            for _ in 0..<(try body.readKafkaArrayCount(compact: compact)) {
                _ = try body.readKafkaInt32()  // PartitionIndex
                guard try body.readKafkaInt16() == 0 else { return false }  // ErrorCode
                _ = try body.readKafkaInt64()  // HighWatermark
                if version >= 4 { _ = try body.readKafkaInt64() }  // LastStableOffset
                if version >= 5 { _ = try body.readKafkaInt64() }  // LogStartOffset
                if version >= 4 {
                    for _ in 0..<(try body.readKafkaArrayCount(compact: compact)) {  // AbortedTransactions
                        _ = try body.readKafkaInt64()
                        _ = try body.readKafkaInt64()
                        if compact { try body.skipKafkaTaggedFields() }
                    }
                }
                if version >= 11 { _ = try body.readKafkaInt32() }  // PreferredReadReplica
                if try body.readKafkaBytesLength(compact: compact) > 0 { return false }  // Records
                if compact { try body.skipKafkaTaggedFields() }
            }
            if compact { try body.skipKafkaTaggedFields() }
        }
        return true
    }
}
