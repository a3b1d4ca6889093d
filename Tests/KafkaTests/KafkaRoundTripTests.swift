import Synchronization
import Foundation
import Kafka
import Testing

@Suite("Kafka on the embedded cluster", .serialized)
struct KafkaRoundTripTests {
    @Test("10,000 keyed messages with headers come back exactly once, in order per key")
    func roundTrip() async throws {
        let (cluster, producer) = try await clusterWithKeyedRecords("round-trip", partitions: 3, count: 10_000, keys: 50)

        let consumer = try makeConsumer(cluster, group: "round-trip", topics: ["round-trip"])
        let (seen, assignedBeforeMessages, headersOK) = try await withTimeout(60, "consume 10,000") { [consumer] in
            var seen: [Seen] = []
            var assigned = Set<Int32>()
            var headersOK = true
            for try await event in consumer.events {
                switch event {
                case .partitionsAssigned(let partitions, _):
                    assigned.formUnion(partitions.map(\.partition))
                case .partitionsRevoked(let revoke):
                    revoke.acknowledge()
                case .partitionsRewound:
                    break
                case .message(let message):
                    // An assignment is always announced before its partition's messages.
                    if !assigned.contains(message.partition) { return (seen, Set<Int32>(), false) }
                    let record = Seen(message)
                    headersOK = headersOK
                        && message.header("index")?.value == Array("\(record.index)".utf8)
                        && message.headers.contains(KafkaHeader(key: "empty", value: nil))
                        && message.timestamp != nil
                    seen.append(record)
                    if seen.count == 10_000 { return (seen, assigned, headersOK) }
                }
            }
            return (seen, assigned, headersOK)
        }
        await consumer.close()
        await producer.close()

        #expect(assignedBeforeMessages == [0, 1, 2])
        #expect(seen.count == 10_000)
        #expect(Set(seen.map(\.index)) == Set(0..<10_000))
        #expect(headersOK)
        let byKey = Dictionary(grouping: seen, by: \.key)
        #expect(byKey.count == 50)
        for (key, records) in byKey {
            let indices = records.map(\.index)
            #expect(indices == indices.sorted(), "order kept for \(key)")
            #expect(Set(records.map(\.partition)).count == 1, "one partition per key for \(key)")
        }
    }

    @Test("a consumer that does not read headers gets every record whole, its headers left unparsed")
    func headersLeftUnparsed() async throws {
        let (cluster, producer) = try await clusterWithKeyedRecords("no-headers", partitions: 2, count: 200, keys: 10)
        await producer.close()
        let consumer = try makeConsumer(cluster, group: "no-headers", topics: ["no-headers"], readsHeaders: false)
        let messages = try await withTimeout(60, "consume 200") { [consumer] in
            var messages: [KafkaMessage] = []
            for try await case .message(let message) in consumer.events {
                messages.append(message)
                if messages.count == 200 { break }
            }
            return messages
        }
        await consumer.close()
        // Every record was produced with two headers (see produceKeyed).
        #expect(messages.allSatisfy { $0.headers.isEmpty })
        #expect(Set(messages.map { Seen($0).index }) == Set(0..<200))
        #expect(messages.allSatisfy { $0.timestamp != nil })
    }

    @Test("a new consumer in the group resumes at the committed offsets")
    func groupResume() async throws {
        let (cluster, producer) = try await clusterWithKeyedRecords("resume", partitions: 3, count: 1_000, keys: 30)

        let first = try makeConsumer(cluster, group: "resume", topics: ["resume"])
        let part = try await collectMessages(first, count: 400)
        trace("first consumer read \(part.count)")
        try await first.commit(nextOffsets(part, topic: "resume"))
        trace("committed")
        await first.close()
        trace("first closed")

        let second = try makeConsumer(cluster, group: "resume", topics: ["resume"])
        let committed = try await second.committed((0..<3).map { TopicPartition("resume", $0) })
        trace("read committed")
        let expected = nextOffsets(part, topic: "resume")
        for partition in (0..<3).map({ TopicPartition("resume", $0) }) {
            #expect(committed[partition] ?? nil == expected[partition], "committed offset of \(partition)")
        }
        let rest = try await collectMessages(second, count: 600)
        await second.close()
        await producer.close()

        #expect(Set(part.map(\.index)).isDisjoint(with: rest.map(\.index)), "no re-delivery of committed messages")
        #expect(Set(part.map(\.index)).union(rest.map(\.index)) == Set(0..<1_000), "no gap")
    }

    @Test("a background commit lands without being awaited")
    func backgroundCommit() async throws {
        let (cluster, producer) = try await clusterWithKeyedRecords("background", partitions: 1, count: 50, keys: 5)
        let consumer = try makeConsumer(cluster, group: "background", topics: ["background"])
        let seen = try await collectMessages(consumer, count: 50)
        consumer.commitInBackground([TopicPartition("background", 0): 50])
        let committed = try await withTimeout(30, "background commit visible") { [consumer] in
            while true {
                let offsets = try await consumer.committed([TopicPartition("background", 0)])
                if offsets[TopicPartition("background", 0)] == 50 { return Int64(50) }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        #expect(seen.count == 50)
        #expect(committed == 50)
        await consumer.close()
        await producer.close()
    }

    @Test("a commit carries its metadata, and a later member of the group reads it back")
    func commitMetadata() async throws {
        let (cluster, producer) = try await clusterWithKeyedRecords("metadata", partitions: 2, count: 20, keys: 4)
        let consumer = try makeConsumer(cluster, group: "metadata", topics: ["metadata"])
        let seen = try await collectMessages(consumer, count: 20)
        let partitions = [TopicPartition("metadata", 0), TopicPartition("metadata", 1)]
        // Every partition, also one that got no message (its next offset is then 0).
        let ends = nextOffsets(seen, topic: "metadata").merging(partitions.map { ($0, Int64(0)) }) { seen, _ in seen }
        try await consumer.commit(ends, metadata: [partitions[0]: "progress=7", partitions[1]: "progress=3"])
        await consumer.close()

        let later = try makeConsumer(cluster, group: "metadata", topics: ["metadata"])
        let committed = try await later.committedWithMetadata(partitions)
        #expect(committed[partitions[0]] == KafkaCommittedOffset(offset: ends[partitions[0]], metadata: "progress=7"))
        #expect(committed[partitions[1]] == KafkaCommittedOffset(offset: ends[partitions[1]], metadata: "progress=3"))
        await later.close()
        await producer.close()
    }

    @Test("a produce larger than message.max.bytes throws a clear error")
    func messageTooLarge() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        try cluster.createTopic("large", partitions: 1)
        let producer = try makeProducer(cluster, properties: ["message.max.bytes": "1000"])
        let error = await #expect(throws: KafkaError.self) {
            try await producer.send(topic: "large", key: nil, value: [UInt8](repeating: 7, count: 5_000))
        }
        #expect(error?.isMessageTooLarge == true)
        #expect(error?.name == "MSG_SIZE_TOO_LARGE")
        #expect(error?.description.contains("produce to large") == true)
        // The producer still works afterwards.
        let report = try await producer.send(topic: "large", key: nil, value: [1, 2, 3])
        #expect(report.offset == 0)
        await producer.close()
    }

    @Test("records produced under a tag get one report each, in order, with their offsets, in batches (not one per record); a broker's refusal reaches its tag; the reports end with the producer")
    func taggedReports() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        try cluster.createTopic("tagged", partitions: 1)
        let producer = try makeProducer(cluster)
        var reports = producer.deliveryReports.makeAsyncIterator()
        let big = UInt64(1) << 62  // tags are the caller's: any value below 2^63
        for index in 0..<500 {
            try await producer.produce(KafkaRecord(topic: "tagged", key: nil, value: Array("\(index)".utf8)), tag: big + UInt64(index))
        }
        try await producer.flush()
        var delivered: [KafkaTaggedDeliveryReport] = []
        var batches = 0
        while delivered.count < 500, let batch = await reports.next() {
            delivered += batch
            batches += 1
        }
        #expect(delivered.map(\.tag) == (0..<500).map { big + UInt64($0) })
        #expect(delivered.map(\.offset) == (0..<500).map { Int64($0) })
        #expect(delivered.allSatisfy { $0.error == nil && $0.partition == 0 })
        #expect(batches < 500, "one hand-over per poll, not per record: \(batches) batches")

        // A produce request the broker refuses for good (MESSAGE_TOO_LARGE, not retriable).
        try cluster.failRequests(apiKey: 0, count: 1, code: 10)
        try await producer.produce(KafkaRecord(topic: "tagged", key: nil, value: [1]), tag: 7)
        try? await producer.flush()
        let refused = try #require(await reports.next()?.first)
        #expect(refused.tag == 7 && refused.error != nil && refused.offset == -1)
        await producer.close()
        #expect(await reports.next() == nil)
    }

    @Test("a bad kafka property fails at start and names the property")
    func badProperty() throws {
        let unknown = KafkaConfiguration(bootstrapServers: "127.0.0.1:1", properties: ["no.such.property": "1"])
        let unknownError = #expect(throws: KafkaError.self) { try unknown.validate() }
        #expect(unknownError?.name == "CONF_UNKNOWN")
        #expect(unknownError?.description.contains("no.such.property") == true)

        let invalid = KafkaConfiguration(bootstrapServers: "127.0.0.1:1", properties: ["linger.ms": "soon", "sasl.password": "hunter2"])
        let producerError = #expect(throws: KafkaError.self) { try KafkaProducer(configuration: invalid, logger: testLogger("p")) }
        #expect(producerError?.name == "CONF_INVALID")
        #expect(producerError?.description.contains("linger.ms") == true)
        #expect(producerError?.description.contains("hunter2") == false)

        let consumerError = #expect(throws: KafkaError.self) {
            try KafkaConsumer(
                configuration: KafkaConsumerConfiguration(kafka: unknown, groupID: "g", topics: ["t"]),
                logger: testLogger("c")
            )
        }
        #expect(consumerError?.description.contains("no.such.property") == true)
    }

    @Test("admin describes partition counts and watermarks; createTopics fails with a named error where unsupported")
    func admin() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        try cluster.createTopic("events", partitions: 6)
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger("admin"))
        #expect(try await admin.partitionCount(of: "events") == 6)
        #expect(try await admin.partitionCount(of: "missing") == nil, "describing does not create")
        #expect(try await admin.partitionCount(of: "missing") == nil)

        let producer = try makeProducer(cluster)
        for index in 0..<5 {
            try await producer.send(topic: "events", partition: 2, key: nil, value: [UInt8(index)])
        }
        let marks = try await admin.watermarks(of: TopicPartition("events", 2))
        #expect(marks == KafkaWatermarks(low: 0, high: 5))
        await producer.close()

        // librdkafka's mock cluster (2.8's too) has no CreateTopics handler, so on it the request can only
        // fail; it must fail within its timeout and say what it was doing.
        let error = await #expect(throws: KafkaError.self) {
            try await admin.createTopics(
                [KafkaTopicSpecification(name: "state", partitions: 6, configs: ["cleanup.policy": "compact"])],
                timeout: .seconds(2)
            )
        }
        #expect(error?.description.contains("create topics") == true)
    }

    @Test("createTopics refuses an invalid specification before sending anything")
    func adminInvalidSpecification() async throws {
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: "127.0.0.1:1"), logger: testLogger("admin"))
        let error = await #expect(throws: KafkaError.self) {
            try await admin.createTopics([KafkaTopicSpecification(name: "state", partitions: 0)])
        }
        #expect(error?.description.contains("create topic state") == true)
        #expect(error?.description.contains("partitions must be at least 1") == true)
    }
}

@Suite("Kafka partition reader")
struct KafkaPartitionReaderTests {
    @Test("reads a partition from its beginning to the end present at the start, outside any group")
    func readToEnd() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        try cluster.createTopic("changelog", partitions: 2)
        let producer = try makeProducer(cluster)
        for index in 0..<300 {
            _ = try await producer.enqueue(KafkaRecord(topic: "changelog", partition: Int32(index % 2), key: Array("u-\(index % 7)".utf8), value: Array("\(index)".utf8)))
        }
        try await producer.flush()
        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger("reader"))
        let collected = Locked<[KafkaMessage]>([])
        let count = try await reader.readToEnd([TopicPartition("changelog", 1)]) { message in
            collected.withLock { $0.append(message) }
        }
        let messages = collected.withLock { $0 }
        #expect(count == 150)
        #expect(messages.map(\.offset) == Array(0..<150))
        #expect(messages.allSatisfy { $0.partition == 1 })
        #expect(messages.first.map { String(decoding: $0.value ?? [], as: UTF8.self) } == "1")
        // An empty partition is read at once.
        try cluster.createTopic("empty", partitions: 1)
        #expect(try await reader.readToEnd([TopicPartition("empty", 0)]) { _ in } == 0)
        // A range: from an offset through another (inclusive), each clipped to what the partition holds.
        func offsets(from: Int64?, through: Int64?) async throws -> [Int64] {
            let partition = TopicPartition("changelog", 1)
            let read = Locked<[Int64]>([])
            _ = try await reader.readToEnd([partition], from: from.map { [partition: $0] } ?? [:], through: through.map { [partition: $0] } ?? [:]) { message in
                read.withLock { $0.append(message.offset) }
            }
            return read.withLock { $0 }
        }
        #expect(try await offsets(from: 40, through: 42) == [40, 41, 42])
        #expect(try await offsets(from: 149, through: 1_000) == [149])
        #expect(try await offsets(from: nil, through: 1) == [0, 1])
        #expect(try await offsets(from: 150, through: nil) == [], "from the end: nothing to read")
        await producer.close()
    }

    @Test("a read's keys and values share arrays of about 64 KiB: null and empty ones kept apart, every byte as produced")
    func readBytesShareChunks() async throws {
        let cluster = try EmbeddedKafka(brokers: 1)
        try cluster.createTopic("packed", partitions: 1)
        let producer = try makeProducer(cluster)
        // Small records with every null/empty combination, then large ones that fill several chunks.
        func record(_ index: Int) -> KafkaRecord {
            switch index % 4 {
            case 0: KafkaRecord(topic: "packed", key: nil, value: [])
            case 1: KafkaRecord(topic: "packed", key: [], value: nil)
            case 2: KafkaRecord(topic: "packed", key: nil, value: nil)
            default: KafkaRecord(topic: "packed", key: Array("k-\(index)".utf8), value: Array("value \(index)".utf8))
            }
        }
        let large = 40_000
        let records = (0..<400).map(record) + (0..<6).map {
            KafkaRecord(topic: "packed", key: Array("big-\($0)".utf8), value: [UInt8](repeating: UInt8($0), count: large))
        }
        for record in records { _ = try await producer.enqueue(record) }
        try await producer.flush()
        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger("reader"))
        let collected = Locked<[KafkaMessage]>([])
        _ = try await reader.readToEnd([TopicPartition("packed", 0)]) { message in collected.withLock { $0.append(message) } }
        let messages = collected.withLock { $0 }
        try #require(messages.count == records.count)
        for (message, record) in zip(messages, records) {
            #expect(message.key.map(Array.init) == record.key, "key at \(message.offset)")
            #expect(message.value.map(Array.init) == record.value, "value at \(message.offset)")
        }
        // Where each record's bytes start and end, key then value: a record whose bytes start where the
        // previous one's ended shares its array. Before, every key and value had an array of its own.
        func bounds(_ message: KafkaMessage) -> (start: Int, end: Int)? {
            let parts = [message.key, message.value].compactMap { $0 }.filter { !$0.isEmpty }
            guard let first = parts.first, let last = parts.last else { return nil }
            let start = first.withUnsafeBufferPointer { Int(bitPattern: $0.baseAddress) }
            let end = last.withUnsafeBufferPointer { Int(bitPattern: $0.baseAddress) + $0.count }
            return (start, end)
        }
        let spans = messages.compactMap(bounds)
        var runs: [Int] = []  // bytes per run of records laid end to end
        var previousEnd: Int?
        for span in spans {
            if span.start == previousEnd { runs[runs.count - 1] += span.end - span.start } else { runs.append(span.end - span.start) }
            previousEnd = span.end
        }
        let smallWithBytes = spans.count - 6
        #expect(runs.count < smallWithBytes / 4, "\(runs.count) arrays for \(spans.count) records with bytes")
        // A chunk closes once it reaches 64 KiB, so it holds at most one record past that.
        #expect(runs.allSatisfy { $0 < 65_536 + large + 16 }, "\(runs)")
        #expect(runs.filter { $0 > large }.count >= 2, "the large records share chunks two by two: \(runs)")
        await producer.close()
    }
}
