@testable import KafkaBrokerFront
import NIOCore
import Testing

/// The front's reading and writing of Kafka messages, against byte layouts written out field by field from the Kafka
/// protocol guide (kafka.apache.org/protocol: "Protocol Primitive Types", "Headers", each message's versions) and the
/// message definitions they come from (clients/src/main/resources/common/message/*.json in apache/kafka).
@Suite("KafkaBrokerFront's messages: the Kafka protocol guide's layouts")
struct KafkaFrontMessagesTests {
    /// Bytes written as the guide spells each primitive, independently of the front's own writers.
    struct Spec {
        var buffer = ByteBuffer()
        mutating func int8(_ value: Int8) { buffer.writeInteger(value) }
        mutating func int16(_ value: Int16) { buffer.writeInteger(value) }
        mutating func int32(_ value: Int32) { buffer.writeInteger(value) }
        mutating func int64(_ value: Int64) { buffer.writeInteger(value) }
        /// UNSIGNED_VARINT: seven bits a byte, low bits first, the high bit set on all but the last.
        mutating func uvarint(_ value: Int) {
            var rest = value
            while rest >= 128 { buffer.writeInteger(UInt8(rest % 128 + 128)); rest /= 128 }
            buffer.writeInteger(UInt8(rest))
        }
        /// STRING / NULLABLE_STRING: INT16 length (-1 for null), then UTF-8.
        mutating func string(_ value: String?) {
            guard let value else { return int16(-1) }
            int16(Int16(value.utf8.count)); buffer.writeString(value)
        }
        /// COMPACT_STRING / COMPACT_NULLABLE_STRING: UNSIGNED_VARINT of length + 1 (0 for null), then UTF-8.
        mutating func compactString(_ value: String?) {
            guard let value else { return uvarint(0) }
            uvarint(value.utf8.count + 1); buffer.writeString(value)
        }
        mutating func bytes(_ value: [UInt8]) { int32(Int32(value.count)); buffer.writeBytes(value) }
        mutating func compactBytes(_ value: [UInt8]) { uvarint(value.count + 1); buffer.writeBytes(value) }
        /// TAG_BUFFER with no fields, or with one field (tag, size, bytes).
        mutating func tags(_ field: (tag: Int, bytes: [UInt8])? = nil) {
            guard let field else { return uvarint(0) }
            uvarint(1); uvarint(field.tag); uvarint(field.bytes.count); buffer.writeBytes(field.bytes)
        }
    }

    @Test("request header v1 (INT16 api key and version, INT32 correlation id, NULLABLE_STRING client id) and v2 (with a TAG_BUFFER)")
    func requestHeaders() throws {
        var v1 = Spec()
        v1.int16(28); v1.int16(2); v1.int32(77); v1.string("rdkafka"); v1.int8(9)
        var buffer = v1.buffer
        #expect(try KafkaRequestHeader.read(from: &buffer) == KafkaRequestHeader(apiKey: 28, apiVersion: 2, correlationID: 77, clientID: "rdkafka"))
        #expect(buffer.readInteger(as: Int8.self) == 9, "the body starts after the client id")

        var v2 = Spec()
        v2.int16(28); v2.int16(3); v2.int32(78); v2.string(nil); v2.tags((tag: 5, bytes: [1, 2, 3])); v2.int8(9)
        buffer = v2.buffer
        #expect(try KafkaRequestHeader.read(from: &buffer) == KafkaRequestHeader(apiKey: 28, apiVersion: 3, correlationID: 78, clientID: nil))
        #expect(buffer.readInteger(as: Int8.self) == 9, "the tag buffer, with a field the front does not know, is passed")

        var written = ByteBuffer()
        KafkaRequestHeader(apiKey: 13, apiVersion: 1, correlationID: 5, clientID: "front").write(to: &written)
        var expected = Spec()
        expected.int16(13); expected.int16(1); expected.int32(5); expected.string("front")
        #expect(written == expected.buffer)
    }

    @Test("JoinGroup request v1 (non-flexible, with RebalanceTimeoutMs), v5 (GroupInstanceId) and v6 (flexible): GroupId, SessionTimeoutMs, MemberId")
    func joinGroupRequest() throws {
        var v1 = Spec()
        v1.string("relays"); v1.int32(6_000); v1.int32(10_000); v1.string(""); v1.string("consumer")
        var body = v1.buffer
        #expect(try KafkaJoinGroupRequest.read(&body, version: 1) == KafkaJoinGroupRequest(groupID: "relays", sessionTimeoutMilliseconds: 6_000, memberID: ""))

        var v6 = Spec()
        v6.compactString("relays"); v6.int32(45_000); v6.int32(300_000); v6.compactString("m-1"); v6.compactString(nil); v6.compactString("consumer")
        body = v6.buffer
        #expect(try KafkaJoinGroupRequest.read(&body, version: 6) == KafkaJoinGroupRequest(groupID: "relays", sessionTimeoutMilliseconds: 45_000, memberID: "m-1"))

        var v0 = Spec()
        v0.string("g"); v0.int32(10_000); v0.string("m-0")
        body = v0.buffer
        #expect(try KafkaJoinGroupRequest.read(&body, version: 0) == KafkaJoinGroupRequest(groupID: "g", sessionTimeoutMilliseconds: 10_000, memberID: "m-0"))

        // v5: a static member's GroupInstanceId after MemberId.
        var v5 = Spec()
        v5.string("relays"); v5.int32(6_000); v5.int32(10_000); v5.string(""); v5.string("relay-2"); v5.string("consumer")
        body = v5.buffer
        #expect(try KafkaJoinGroupRequest.read(&body, version: 5)
                == KafkaJoinGroupRequest(groupID: "relays", sessionTimeoutMilliseconds: 6_000, memberID: "", groupInstanceID: "relay-2"))
    }

    @Test("JoinGroup response v0, v5 (ThrottleTimeMs from v2) and v7 (flexible, ProtocolType): ErrorCode, GenerationId, ProtocolName, Leader, MemberId; the front's own answer reads back")
    func joinGroupResponse() throws {
        var v0 = Spec()
        v0.int16(0); v0.int32(3); v0.string("range"); v0.string("m-1"); v0.string("m-2"); v0.int32(0)
        var body = v0.buffer
        #expect(try KafkaJoinGroupResponse.read(&body, version: 0)
                == KafkaJoinGroupResponse(errorCode: 0, generationID: 3, memberID: "m-2", protocolName: "range", leader: "m-1"))

        var v5 = Spec()
        v5.int32(0); v5.int16(0); v5.int32(7); v5.string("cooperative-sticky"); v5.string("m-1"); v5.string("m-1")
        v5.int32(1); v5.string("m-1"); v5.string(nil); v5.bytes([0, 1])
        body = v5.buffer
        let v5Response = KafkaJoinGroupResponse(errorCode: 0, generationID: 7, memberID: "m-1", protocolName: "cooperative-sticky", leader: "m-1")
        #expect(try KafkaJoinGroupResponse.read(&body, version: 5) == v5Response)
        // The front's own answer (a follower's: no members) reads back the same, non-flexible and flexible.
        for version: Int16 in [5, 6] {
            var answer = v5Response.encoded(correlationID: 42, version: version)
            #expect(try answer.readKafkaInt32() == 42)
            if version >= 6 { try answer.skipKafkaTaggedFields() }
            #expect(try KafkaJoinGroupResponse.read(&answer, version: version) == v5Response)
            #expect(try answer.readKafkaArrayCount(compact: version >= 6) == 0)
        }

        var v7 = Spec()
        v7.int32(0); v7.int16(79); v7.int32(-1); v7.compactString("consumer"); v7.compactString(nil); v7.compactString(""); v7.compactString("m-9")
        v7.uvarint(1); v7.tags()
        body = v7.buffer
        #expect(try KafkaJoinGroupResponse.read(&body, version: 7) == KafkaJoinGroupResponse(errorCode: 79, generationID: -1, memberID: "m-9"))
    }

    @Test("Heartbeat, SyncGroup and OffsetCommit begin GroupId, GenerationId, MemberId; LeaveGroup names one MemberId before v3, Members from v3")
    func memberRequests() throws {
        var heartbeat = Spec()
        heartbeat.string("g"); heartbeat.int32(4); heartbeat.string("m-1")
        var body = heartbeat.buffer
        #expect(try KafkaMemberRequest.read(&body, api: .heartbeat, version: 3) == KafkaMemberRequest(groupID: "g", generationID: 4, memberID: "m-1"))
        var flexible = Spec()
        flexible.compactString("g"); flexible.int32(5); flexible.compactString("m-2"); flexible.compactString(nil); flexible.tags()
        body = flexible.buffer
        #expect(try KafkaMemberRequest.read(&body, api: .syncGroup, version: 4) == KafkaMemberRequest(groupID: "g", generationID: 5, memberID: "m-2"))

        var v1 = Spec()
        v1.string("g"); v1.string("m-1")
        body = v1.buffer
        #expect(try KafkaLeaveGroupRequest.read(&body, version: 1) == KafkaLeaveGroupRequest(groupID: "g", memberIDs: ["m-1"]))
        var v5 = Spec()
        v5.compactString("g"); v5.uvarint(3)
        v5.compactString("m-1"); v5.compactString(nil); v5.compactString("stopping"); v5.tags()
        v5.compactString("m-2"); v5.compactString("pod-2"); v5.compactString(nil); v5.tags()
        v5.tags()
        body = v5.buffer
        #expect(try KafkaLeaveGroupRequest.read(&body, version: 5) == KafkaLeaveGroupRequest(groupID: "g", memberIDs: ["m-1", "m-2"]))

        var leave = Spec()
        leave.int16(13); leave.int16(1); leave.int32(42); leave.string("kafka-broker-front"); leave.string("g"); leave.string("m-7")
        #expect(KafkaLeaveGroupRequest(groupID: "g", memberIDs: ["m-7"]).write(correlationID: 42, clientID: "kafka-broker-front") == leave.buffer)
    }

    @Test("TxnOffsetCommit request v2 (no member) and v3 (flexible: GenerationId, MemberId, GroupInstanceId); the refusal as the v2 and v3 responses lay it out")
    func txnOffsetCommit() throws {
        var v3 = Spec()
        v3.compactString("apns-relay:g:host:1"); v3.compactString("g"); v3.int64(4_000); v3.int16(2)
        v3.int32(6); v3.compactString("m-1"); v3.compactString(nil)
        v3.uvarint(3)
        v3.compactString("push.events"); v3.uvarint(3)
        v3.int32(0); v3.int64(100); v3.int32(-1); v3.compactString(""); v3.tags()
        v3.int32(5); v3.int64(7); v3.int32(-1); v3.compactString(nil); v3.tags()
        v3.tags()
        v3.compactString("other"); v3.uvarint(2)
        v3.int32(1); v3.int64(1); v3.int32(3); v3.compactString("meta"); v3.tags()
        v3.tags()
        v3.tags()
        var body = v3.buffer
        let request = try KafkaTxnOffsetCommitRequest.read(&body, version: 3)
        #expect(request == KafkaTxnOffsetCommitRequest(transactionalID: "apns-relay:g:host:1", groupID: "g", producerID: 4_000, producerEpoch: 2,
                                                       generationID: 6, memberID: "m-1", groupInstanceID: nil,
                                                       partitions: [("push.events", [0, 5]), ("other", [1])]))
        #expect(body.readableBytes == 0, "read to its end")

        // Response v3: header v1 (INT32 correlation id, TAG_BUFFER), ThrottleTimeMs, Topics (COMPACT_ARRAY of Name,
        // Partitions (COMPACT_ARRAY of PartitionIndex, ErrorCode, TAG_BUFFER), TAG_BUFFER), TAG_BUFFER.
        var refusal = Spec()
        refusal.int32(91); refusal.tags(); refusal.int32(0); refusal.uvarint(3)
        refusal.compactString("push.events"); refusal.uvarint(3)
        refusal.int32(0); refusal.int16(22); refusal.tags(); refusal.int32(5); refusal.int16(22); refusal.tags()
        refusal.tags()
        refusal.compactString("other"); refusal.uvarint(2); refusal.int32(1); refusal.int16(22); refusal.tags(); refusal.tags()
        refusal.tags()
        #expect(request.refusal(22, correlationID: 91, version: 3) == refusal.buffer)

        var v2 = Spec()
        v2.string("t"); v2.string("g"); v2.int64(1); v2.int16(0)
        v2.int32(1); v2.string("push.events"); v2.int32(1); v2.int32(3); v2.int64(10); v2.int32(-1); v2.string(nil)
        body = v2.buffer
        let old = try KafkaTxnOffsetCommitRequest.read(&body, version: 2)
        #expect(old.generationID == -1 && old.memberID.isEmpty && old.partitions.map(\.partitions) == [[3]])
        // Response v2: header v0, ThrottleTimeMs, Topics (ARRAY of Name, Partitions (ARRAY of PartitionIndex, ErrorCode)).
        var oldRefusal = Spec()
        oldRefusal.int32(92); oldRefusal.int32(0); oldRefusal.int32(1); oldRefusal.string("push.events"); oldRefusal.int32(1); oldRefusal.int32(3); oldRefusal.int16(25)
        #expect(old.refusal(25, correlationID: 92, version: 2) == oldRefusal.buffer)
    }

    @Test("brokers' ports found where Metadata v1 and v12, FindCoordinator v0, v2 and v4 and DescribeCluster v0 place them")
    func brokerAddresses() throws {
        var v1 = Spec()
        v1.int32(2); v1.int32(1); v1.string("127.0.0.1"); v1.int32(9092); v1.string(nil); v1.int32(2); v1.string("127.0.0.1"); v1.int32(9093); v1.string("r")
        v1.int32(1); v1.int32(0)
        var found = try KafkaBrokerAddresses.find(in: v1.buffer, api: .metadata, version: 1)
        #expect(found.map(\.port) == [9092, 9093] && found.map(\.host) == ["127.0.0.1", "127.0.0.1"])
        #expect(found.map { v1.buffer.getInteger(at: $0.portIndex, as: Int32.self) } == [9092, 9093])

        var v12 = Spec()
        v12.int32(0); v12.uvarint(2); v12.int32(1); v12.compactString("localhost"); v12.int32(39_001); v12.compactString(nil); v12.tags()
        v12.compactString("c"); v12.int32(1); v12.uvarint(1); v12.tags()
        found = try KafkaBrokerAddresses.find(in: v12.buffer, api: .metadata, version: 12)
        #expect(found.map(\.port) == [39_001] && found.map(\.host) == ["localhost"])

        var coordinatorV0 = Spec()
        coordinatorV0.int16(0); coordinatorV0.int32(1); coordinatorV0.string("127.0.0.1"); coordinatorV0.int32(9092)
        #expect(try KafkaBrokerAddresses.find(in: coordinatorV0.buffer, api: .findCoordinator, version: 0).map(\.port) == [9092])
        var coordinatorV2 = Spec()
        coordinatorV2.int32(0); coordinatorV2.int16(0); coordinatorV2.string(nil); coordinatorV2.int32(1); coordinatorV2.string("127.0.0.1"); coordinatorV2.int32(9094)
        #expect(try KafkaBrokerAddresses.find(in: coordinatorV2.buffer, api: .findCoordinator, version: 2).map(\.port) == [9094])
        var coordinatorV4 = Spec()
        coordinatorV4.int32(0); coordinatorV4.uvarint(3)
        for (key, port) in [("g", Int32(9092)), ("t", Int32(9093))] {
            coordinatorV4.compactString(key); coordinatorV4.int32(1); coordinatorV4.compactString("127.0.0.1"); coordinatorV4.int32(port)
            coordinatorV4.int16(0); coordinatorV4.compactString(nil); coordinatorV4.tags()
        }
        coordinatorV4.tags()
        #expect(try KafkaBrokerAddresses.find(in: coordinatorV4.buffer, api: .findCoordinator, version: 4).map(\.port) == [9092, 9093])

        var cluster = Spec()
        cluster.int32(0); cluster.int16(0); cluster.compactString(nil); cluster.compactString("c"); cluster.int32(1)
        cluster.uvarint(2); cluster.int32(1); cluster.compactString("127.0.0.1"); cluster.int32(9095); cluster.compactString(nil); cluster.tags()
        #expect(try KafkaBrokerAddresses.find(in: cluster.buffer, api: .describeCluster, version: 0).map(\.port) == [9095])
    }

    @Test("InitProducerId request v1 (TransactionalId, TransactionTimeoutMs) and v4 (flexible, ProducerId and epoch); transactional requests name their id first")
    func transactionalRequests() throws {
        var v1 = Spec()
        v1.string("apns-relay:g:host:1"); v1.int32(10_000)
        var body = v1.buffer
        #expect(try KafkaInitProducerIDRequest.read(&body, version: 1)
                == KafkaInitProducerIDRequest(transactionalID: "apns-relay:g:host:1", transactionTimeoutMilliseconds: 10_000))
        var v4 = Spec()
        v4.compactString(nil); v4.int32(60_000); v4.int64(-1); v4.int16(-1); v4.tags()
        body = v4.buffer
        #expect(try KafkaInitProducerIDRequest.read(&body, version: 4) == KafkaInitProducerIDRequest(transactionalID: nil, transactionTimeoutMilliseconds: 60_000))
        var written = Spec()
        written.int16(22); written.int16(1); written.int32(3); written.string("kafka-broker-front"); written.string("t"); written.int32(10_000)
        #expect(KafkaInitProducerIDRequest(transactionalID: "t", transactionTimeoutMilliseconds: 10_000).write(correlationID: 3, clientID: "kafka-broker-front")
                == written.buffer)

        var addPartitions = Spec()
        addPartitions.string("t"); addPartitions.int64(1); addPartitions.int16(0); addPartitions.int32(0)
        #expect(try KafkaTransactionalRequest.transactionalID(addPartitions.buffer, api: .addPartitionsToTxn, version: 2) == "t")
        var endTxn = Spec()
        endTxn.compactString("t"); endTxn.int64(1); endTxn.int16(0); endTxn.int8(1); endTxn.tags()
        #expect(try KafkaTransactionalRequest.transactionalID(endTxn.buffer, api: .endTxn, version: 3) == "t")
    }

    @Test("a Produce request with Acks 0 expects no response (TransactionalId first from v3)")
    func produceAcks() {
        var v3 = Spec()
        v3.string(nil); v3.int16(0); v3.int32(30_000)
        #expect(KafkaAPIKey.produceExpectsNoResponse(v3.buffer, version: 3))
        var v9 = Spec()
        v9.compactString("txn"); v9.int16(-1); v9.int32(30_000)
        #expect(!KafkaAPIKey.produceExpectsNoResponse(v9.buffer, version: 9))
        var v2 = Spec()
        v2.int16(0); v2.int32(30_000)
        #expect(KafkaAPIKey.produceExpectsNoResponse(v2.buffer, version: 2))
    }

    @Test("flexible versions from each message's flexibleVersions; ApiVersions' response header stays v0")
    func flexibility() {
        #expect(!KafkaAPIKey.metadata.isFlexible(8) && KafkaAPIKey.metadata.isFlexible(9))
        #expect(!KafkaAPIKey.txnOffsetCommit.isFlexible(2) && KafkaAPIKey.txnOffsetCommit.isFlexible(3))
        #expect(!KafkaAPIKey.joinGroup.isFlexible(5) && KafkaAPIKey.joinGroup.isFlexible(6))
        #expect(KafkaAPIKey.apiVersions.isFlexible(3) && !KafkaAPIKey.apiVersions.responseHeaderIsFlexible(3))
        #expect(KafkaAPIKey.describeCluster.isFlexible(0))
    }
}
