import Foundation
import Kafka
import Logging
import Synchronization
import Testing

@Suite("apns-relay dlq replay", .serialized)
struct DeadLetterReplayProcessTests {
    /// The relay's (and the replay's) `message.max.bytes`: an input this close to it has no room for a dead
    /// letter's headers, so the relay dead-letters a reference to it instead.
    static let messageLimit = 6_000
    static let error = "tokens: 2 tokens, more than relay.max_tokens_per_event (1)"

    static func token(_ index: Int) -> String { String(repeating: String(format: "%02x", 0xa0 + index), count: 32) }

    /// An event of `user` with `tokens`, an increment and an alert; with `size`, a field the relay does not read
    /// (`note`) pads its value to that many bytes.
    static func event(_ id: String, user: String, seq: Int?, tokens: [String], size: Int? = nil) -> String {
        let seqField = seq.map { "\"seq\":\($0)," } ?? ""
        func value(_ note: String) -> String {
            #"{"id":"\#(id)","user":"\#(user)",\#(seqField)"badge":{"increment":1},"tokens":[\#(tokens.map { "\"\($0)\"" }.joined(separator: ","))],"note":"\#(note)","apns":{"payload":{"aps":{"alert":"hi"}}}}"#
        }
        guard let size else { return value("") }
        return value(String(repeating: "x", count: size - value("").utf8.count))
    }

    /// Every value of `topic`, with its partition and offset.
    static func records(_ fixture: RelayProcessFixture, _ topic: String, logger: Logger) async throws -> [KafkaMessage] {
        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: fixture.cluster.bootstrapServers), logger: logger)
        let messages = Mutex<[KafkaMessage]>([])
        _ = try await reader.readToEnd((0..<3).map { TopicPartition(topic, Int32($0)) }) { message in messages.withLock { $0.append(message) } }
        return messages.withLock { $0 }.sorted { ($0.partition, $0.offset) < ($1.partition, $1.offset) }
    }

    /// The results as JSON objects.
    static func results(_ fixture: RelayProcessFixture, logger: Logger) async throws -> [[String: Any]] {
        try await records(fixture, "push.results", logger: logger).map { RecordShape.object(String(decoding: $0.value ?? [], as: UTF8.self)) }
    }

    /// Runs the relay until `done` holds for the results, then stops it (exit 0 expected).
    static func runRelayProcess(_ fixture: RelayProcessFixture, _ name: String, logger: Logger, until done: ([[String: Any]]) -> Bool) async throws {
        let log = "\(fixture.directory)/\(name).log"
        let relay = try startRelay(["run", "--config", fixture.configPath], log: log)
        let doneBy = ContinuousClock.now.advanced(by: .seconds(60))
        var finished = false
        while ContinuousClock.now < doneBy && relay.isRunning && !finished {
            finished = done(try await results(fixture, logger: logger))
            if !finished { try await Task.sleep(for: .milliseconds(200)) }
        }
        kill(relay.processIdentifier, SIGTERM)
        while relay.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(finished, "\(name): \(output.suffix(3_000))")
        #expect(relay.terminationStatus == 0, "\(name): \(output.suffix(2_000))")
    }

    static func count(_ results: [[String: Any]], event: String, status: String) -> Int {
        results.filter { $0["event_id"] as? String == event && $0["status"] as? String == status }.count
    }

    @Test("dead letters of a too-low relay.max_tokens_per_event: a dry run prints them and sends nothing; after the fix --execute sends them to their source partitions (a reference's source read back), the relay delivers them; the same replay again is answered duplicate")
    func replayAfterTheFix() async throws {
        var logger = Logger(label: "dlq-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(
            // Short group timeouts: each of the three runs joins the group its predecessor left.
            kafkaLines: RelayProcessFixture.shortGroupTimeouts + "\n    message.max.bytes: \(Self.messageLimit)\n",
            relayLines: "  http_port: 0\n  shutdown_timeout_s: 10\n  max_tokens_per_event: 1\n")
        let (simulator, directory) = (fixture.simulator, fixture.directory)
        // Leaves room for the input's own framing, not for a dead letter's headers (x-error, x-source-*).
        let large = Self.event("e2", user: "u-2", seq: 1, tokens: [Self.token(3), Self.token(4)], size: Self.messageLimit - 90)
        let events = [
            ("u-1", Self.event("e1", user: "u-1", seq: 1, tokens: [Self.token(1), Self.token(2)])),
            ("u-2", large),
            ("u-3", Self.event("e3", user: "u-3", seq: 1, tokens: [Self.token(5)])),
            ("bad-1", "{broken"),
            ("u-5", Self.event("e5", user: "u-5", seq: nil, tokens: [Self.token(6), Self.token(7)])),
        ]
        try await fixture.produce(events, logger: logger)
        let sources = try await Self.records(fixture, "push.events", logger: logger)
        try await Self.runRelayProcess(fixture, "run1", logger: logger) { $0.count >= 5 }
        let deadLetters = try await Self.records(fixture, "push.dlq", logger: logger)
        #expect(deadLetters.count == 4, "\(deadLetters.map { String(decoding: $0.value ?? [], as: UTF8.self).prefix(80) })")
        let reference = try #require(deadLetters.first { $0.header("x-dead-letter") != nil })
        #expect(String(decoding: reference.key ?? [], as: UTF8.self) == "u-2", "the large input got a reference dead letter")
        let plain = try #require(deadLetters.first { String(decoding: $0.key ?? [], as: UTF8.self) == "u-1" })

        // A dry run: what it would send, nothing sent.
        let config = ["--config", fixture.configPath]
        let dryRun = try runRelay(["dlq", "replay", "--error-contains", "max_tokens_per_event"] + config)
        #expect(dryRun.status == 0, "\(dryRun.output)")
        let source1 = try #require(sources.first { $0.key.map { String(decoding: $0, as: UTF8.self) } == "u-1" })
        let source2 = try #require(sources.first { $0.key.map { String(decoding: $0, as: UTF8.self) } == "u-2" })
        #expect(dryRun.output.contains("would replay push.dlq[\(plain.partition)]@\(plain.offset) to push.events[\(source1.partition)], key u-1, \(source1.value?.count ?? 0) bytes: \(Self.error)"), "\(dryRun.output)")
        #expect(dryRun.output.contains("would replay push.dlq[\(reference.partition)]@\(reference.offset) (reference to push.events[\(source2.partition)]@\(source2.offset)) to push.events[\(source2.partition)], key u-2, \(large.utf8.count) bytes"), "\(dryRun.output)")
        #expect(dryRun.output.contains(": a badge change without seq: a second replay would apply it again (--allow-unsequenced-badges replays it)"), "\(dryRun.output)")
        #expect(dryRun.output.contains("dry run: would replay 2 of 3 selected dead letter(s) to push.events; 1 not replayable (see above); --execute sends them"), "\(dryRun.output)")
        #expect(try await Self.records(fixture, "push.events", logger: logger).count == events.count, "a dry run sends nothing")
        // By place: one dead letter.
        let one = try runRelay(["dlq", "replay", "--partition", "\(plain.partition)", "--from-offset", "\(plain.offset)", "--to-offset", "\(plain.offset)"] + config)
        #expect(one.output.contains("dry run: would replay 1 of 1 selected dead letter(s)"), "\(one.output)")

        // The fix, then the replay: each input, unchanged, to the partition it came from.
        try String(contentsOfFile: fixture.configPath, encoding: .utf8).replacingOccurrences(of: "max_tokens_per_event: 1", with: "max_tokens_per_event: 10")
            .write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        let first = try runRelay(["dlq", "replay", "--error-contains", "max_tokens_per_event", "--execute"] + config)
        #expect(first.status == 0 && first.output.contains("replayed 2 of 3 selected dead letter(s) to push.events; 1 not replayable"), "\(first.output)")
        let replayed = try await Self.records(fixture, "push.events", logger: logger).filter { message in
            !sources.contains { $0.partition == message.partition && $0.offset == message.offset }
        }
        #expect(replayed.count == 2)
        for source in [source1, source2] {
            #expect(replayed.contains { $0.partition == source.partition && $0.key == source.key && $0.value == source.value },
                    "\(String(decoding: source.key ?? [], as: UTF8.self)) replayed byte for byte to its partition")
        }
        try await Self.runRelayProcess(fixture, "run2", logger: logger) { results in
            Self.count(results, event: "e1", status: "delivered") == 2 && Self.count(results, event: "e2", status: "delivered") == 2
        }
        for token in (1...4).map(Self.token) {
            #expect(simulator.deliveries(for: token).compactMap(\.badge) == [1], "\(token.prefix(8))")
        }

        // The same replay again: the relay knows these seqs, answers duplicate and sends nothing.
        let second = try runRelay(["dlq", "replay", "--error-contains", "max_tokens_per_event", "--execute"] + config)
        #expect(second.status == 0 && second.output.contains("replayed 2 of 3"), "\(second.output)")
        try await Self.runRelayProcess(fixture, "run3", logger: logger) { results in
            Self.count(results, event: "e1", status: "duplicate") == 1 && Self.count(results, event: "e2", status: "duplicate") == 1
        }
        #expect((1...4).map(Self.token).allSatisfy { simulator.deliveries(for: $0).count == 1 }, "nothing sent twice")
        #expect(simulator.deliveries(for: Self.token(6)).isEmpty, "the unsequenced badge change was left out")
        if ProcessInfo.processInfo.environment["KEEP_RUN_TEST_DIR"] != nil { print("dlq test directory: \(directory)") }
        await fixture.stop()
    }

    @Test("a reference whose source is no longer retained, or past the partition's end, and a dead letter of another topic: each reported with why, nothing sent")
    func unreplayable() async throws {
        var logger = Logger(label: "dlq-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(relayLines: "  http_port: 0\n")
        let kafka = KafkaConfiguration(bootstrapServers: fixture.cluster.bootstrapServers)
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        _ = try await producer.send(KafkaRecord(topic: "push.events", partition: 0, key: Array("u-1".utf8),
                                                value: Array(Self.event("e1", user: "u-1", seq: 1, tokens: [Self.token(1)]).utf8)))
        func deadLetter(source: String, offset: Int64, reference: Bool) -> KafkaRecord {
            var headers = [KafkaHeader(key: "x-error", value: "too large"), KafkaHeader(key: "x-source-topic", value: source),
                           KafkaHeader(key: "x-source-partition", value: "0"), KafkaHeader(key: "x-source-offset", value: "\(offset)")]
            if reference { headers.append(KafkaHeader(key: "x-dead-letter", value: "reference")) }
            let value = reference
                ? #"{"source_topic":"\#(source)","source_partition":0,"source_offset":\#(offset),"size":1200000,"error":"too large"}"#
                : "{}"
            return KafkaRecord(topic: "push.dlq", partition: 0, key: Array("u-1".utf8), value: Array(value.utf8), headers: headers)
        }
        for record in [deadLetter(source: "push.events", offset: 0, reference: true), deadLetter(source: "push.events", offset: 10_000, reference: true),
                       deadLetter(source: "push.devices", offset: 0, reference: false)] {
            _ = try await producer.send(record)
        }
        // The mock broker keeps 5 MB per partition: 7 MB more roll the first record out.
        let filler = [UInt8](repeating: UInt8(ascii: "f"), count: 100_000)
        for _ in 0..<70 { _ = try await producer.enqueue(KafkaRecord(topic: "push.events", partition: 0, key: nil, value: filler)) }
        try await producer.flush()
        await producer.close()
        let low = try await KafkaAdmin(configuration: kafka, logger: logger).watermarks(of: TopicPartition("push.events", 0))
        #expect(low.low > 0, "the source is gone: \(low)")

        let dryRun = try runRelay(["dlq", "replay", "--config", fixture.configPath])
        #expect(dryRun.status == 0, "\(dryRun.output)")
        #expect(dryRun.output.contains("not replayed push.dlq[0]@0 (reference to push.events[0]@0): push.events[0]@0 is no longer retained (push.events[0] now starts at offset \(low.low))"), "\(dryRun.output)")
        #expect(dryRun.output.contains("not replayed push.dlq[0]@1 (reference to push.events[0]@10000): push.events[0]@10000 is past the end of push.events[0] (offset \(low.high)): the topic was recreated or truncated"), "\(dryRun.output)")
        #expect(dryRun.output.contains("not replayed push.dlq[0]@2: its source is push.devices, not the events topic push.events"), "\(dryRun.output)")
        #expect(dryRun.output.contains("dry run: would replay 0 of 3 selected dead letter(s) to push.events; 3 not replayable (see above)"), "\(dryRun.output)")
        let executed = try runRelay(["dlq", "replay", "--execute", "--config", fixture.configPath])
        #expect(executed.status == 0 && executed.output.contains("replayed 0 of 3"), "\(executed.output)")
        #expect(try await KafkaAdmin(configuration: kafka, logger: logger).watermarks(of: TopicPartition("push.events", 0)).high == low.high, "nothing sent")
        await fixture.stop()
    }
}
