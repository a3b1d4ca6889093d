import Foundation
import Logging
import Relay
import Synchronization
import Kafka
import TestSupport
import Testing

/// Users' home partitions against a real broker process (noida-db): producers that key events wrongly, and the
/// partition count grown as an operator grows it (CreatePartitions on both topics, `apns-relay partitions migrate`).
@Suite("Users' home partitions against a real broker process (noida-db)", .serialized)
struct HomePartitionProcessTests {
    @Test("producers keying by event id, with no key, and with librdkafka's crc32 beside murmur2, with a graceful hand-over midway: every count exact, each at its user's home")
    func misKeyedProducers() async throws {
        let fixture = try await BrokerRelayFixture.start(users: 16, devicesPerUser: 2)
        try await fixture.createTopicsThenRegisterDevices()
        let keyings: [BrokerRelayFixture.Keying] = [.user, .eventID, .none, .userCrc32]
        let seqs = 6
        for seq in 1...seqs { try await fixture.produceEvents(seq: seq) { keyings[$0 % keyings.count] } }
        let total = fixture.users * seqs * fixture.devicesPerUser
        // Forwards reach a user's home after the user's own events: a wide reorder window keeps the seqs in order
        // on this shared machine. The second device of each user answers slowly: work in flight at the hand-over.
        let window = ["APNS_RELAY_RELAY_REORDER_WINDOW_MS": "20000"]
        for user in 0..<fixture.users { fixture.simulator.addFault(.delay(.milliseconds(300)), token: fixture.token(user: user, device: 1), count: nil) }

        let first = try fixture.startRelay("first", environment: window)
        #expect(await waitUntil(timeout: .seconds(60)) { fixture.simulator.deliveryCount >= fixture.users }, "\(first.output.suffix(3_000))")
        let second = try fixture.startRelay("second", environment: window)
        #expect(await second.waitFor("badge state restored"), "the second took partitions over: \(second.output.suffix(3_000))")
        #expect(try await fixture.waitForResults(total), "\(first.output.suffix(2_000))\n\(second.output.suffix(2_000))")
        #expect(await second.stopGracefully(), "\(second.output.suffix(3_000))")
        #expect(await first.stopGracefully(), "\(first.output.suffix(3_000))")
        try await fixture.expectExactlyOnce(seqs: seqs, replayedCounts: true)
        try await fixture.stop()
    }

    @Test("forwards written again byte for byte after the home's owner restarted (what a relay that crashed after forwarding and before storing its progress does): finished unsent, no second result")
    func repeatedForwardsAfterARestart() async throws {
        let fixture = try await BrokerRelayFixture.start(users: 16, devicesPerUser: 1)
        try await fixture.createTopicsThenRegisterDevices()
        for seq in 1...3 { try await fixture.produceEvents(seq: seq) { _ in .eventID } }
        let total = fixture.users * 3
        let first = try fixture.startRelay("first")
        #expect(try await fixture.waitForResults(total), "\(first.output.suffix(3_000))")
        #expect(await first.stopGracefully(), "\(first.output.suffix(3_000))")

        // The forwards on the home partitions, as they were written.
        let reader = try KafkaPartitionReader(configuration: fixture.kafka, logger: fixture.logger)
        let forwards = Mutex<[KafkaRecord]>([])
        _ = try await reader.readToEnd((0..<fixture.partitionCount).map { TopicPartition("push.events", Int32($0)) }) { message in
            guard message.headers.contains(where: { $0.key == ForwardSource.header }) else { return }
            forwards.withLock {
                $0.append(KafkaRecord(topic: "push.events", partition: message.partition, key: message.key.map(Array.init),
                                      value: message.value.map(Array.init), headers: message.headers))
            }
        }
        let repeated = forwards.withLock { $0 }
        #expect(repeated.count >= fixture.users, "events keyed by event id were forwarded: \(repeated.count)")
        let deliveredBefore = fixture.simulator.deliveryCount
        let resultsBefore = try await fixture.results().count

        // A new owner (the home's previous owner stored its progress as it stopped), then the same forwards again.
        let second = try fixture.startRelay("second")
        #expect(await second.waitFor("badge state restored"), "\(second.output.suffix(3_000))")
        try await fixture.produce(repeated)
        try await fixture.produceEvents(seq: 4) { _ in .eventID }
        #expect(try await fixture.waitForResults(fixture.users * 4), "\(second.output.suffix(3_000))")
        #expect(await second.stopGracefully(), "\(second.output.suffix(3_000))")
        #expect(fixture.simulator.deliveryCount == deliveredBefore + fixture.users, "only seq 4 was sent: \(fixture.simulator.deliveryCount - deliveredBefore) sent")
        #expect(try await fixture.results().count == resultsBefore + fixture.users, "only seq 4 has results")
        try await fixture.expectExactlyOnce(seqs: 4)
        try await fixture.stop()
    }

    @Test("both topics grown 4 -> 8 with CreatePartitions (committed offsets kept): the running relay stops (exit 2, naming the command) having served nothing under the old layout, a restarted one refuses, a migrate refuses while the group has a member, until `partitions migrate --execute` moved the users; then every count continues")
    func growthOfBothTopics() async throws {
        let fixture = try await BrokerRelayFixture.start(users: 24, devicesPerUser: 1)
        fixture.partitionCount = 4
        fixture.resultPartitions = 4
        let admin = try KafkaAdmin(configuration: fixture.kafka, logger: fixture.logger)
        try await admin.createTopics([
            KafkaTopicSpecification(name: "push.events", partitions: 4),
            KafkaTopicSpecification(name: "push.badge-state", partitions: 4, configs: ["cleanup.policy": "compact"]),
        ])
        try await fixture.createTopicsThenRegisterDevices()
        for seq in 1...3 { try await fixture.produceEvents(seq: seq) }
        let before = try fixture.startRelay("before")
        #expect(try await fixture.waitForResults(fixture.users * 3), "\(before.output.suffix(3_000))")
        // Idle from here on: it writes nothing more to push.badge-state (its layout records and markers are stored).
        let badgeState = (0..<4).map { TopicPartition("push.badge-state", Int32($0)) }
        func ends() async throws -> [Int64] {
            var ends: [Int64] = []
            for partition in badgeState { ends.append(try await admin.watermarks(of: partition).high) }
            return ends
        }
        var last = try await ends()
        for _ in 0..<30 {
            try await Task.sleep(for: .seconds(2))
            let now = try await ends()
            if now == last { break }
            last = now
        }

        // As `kafka-topics --alter --partitions 8` on both; events produced meanwhile land by the new count.
        try await admin.createPartitions(of: "push.events", growingTo: 8)
        try await admin.createPartitions(of: "push.badge-state", growingTo: 8)
        fixture.partitionCount = 8
        // The running relay sees the new count (it asks every 10 s) and stops as a restarted one refuses, before it
        // served a partition under the old layout: the new badge-state partitions stay empty.
        #expect(await waitUntil(timeout: .seconds(60)) { !before.process.isRunning }, "\(before.output.suffix(3_000))")
        // (A running process has no status: Foundation traps.)
        #expect(!before.process.isRunning && before.process.terminationStatus == 2, "\(before.output.suffix(3_000))")
        #expect(before.output.contains("the events topic grew while the relay ran") && before.output.contains("apns-relay partitions migrate"),
                "\(before.output.suffix(3_000))")
        let grown = try KafkaAdmin(configuration: fixture.kafka, logger: fixture.logger)  // one whose metadata has the new partitions
        for partition in 4..<8 {
            let written = try await grown.watermarks(of: TopicPartition("push.badge-state", Int32(partition))).high
            #expect(written == 0, "push.badge-state[\(partition)] has \(written) records: served under the old layout")
        }

        // An operator who migrates while a member is in the relays' group (here an idle consumer of the group, as a
        // relay left running would be): refused, naming the member, and nothing is written.
        let member = try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(kafka: fixture.kafka, groupID: "apns-relay", topics: ["push.events"]), logger: fixture.logger)
        var joined = false
        for _ in 0..<300 where !joined {
            joined = (try? await admin.describeGroup("apns-relay").members.count) == 1
            if !joined { try await Task.sleep(for: .milliseconds(200)) }
        }
        #expect(joined, "the member joined the relays' group")
        let early = try await migrate(fixture, "early", ["--execute"])
        #expect(early.status == 1 && early.output.contains("consumer group apns-relay has 1 member(s)")
                && !early.output.contains("recorded the layout"), "\(early.output)")
        await member.close()
        try await fixture.produceEvents(seq: 4)

        let refused = try fixture.startRelay("refused")
        #expect(await waitUntil(timeout: .seconds(60)) { !refused.process.isRunning }, "\(refused.output.suffix(3_000))")
        #expect(refused.process.terminationStatus == 2, "\(refused.output.suffix(3_000))")
        #expect(refused.output.contains("apns-relay partitions migrate"), "\(refused.output.suffix(3_000))")
        // A relay that gives up leaves the group on its way out: noida-db, like a broker whose session timeout is
        // long, would otherwise hold its partitions for a member that is gone, and the next relay could not start.
        let group = try await admin.describeGroup("apns-relay")
        #expect(group.members.isEmpty, "members left behind by the relay that gave up: \(group)")

        let dryRun = try await migrate(fixture, "dry-run", [])
        #expect(dryRun.status == 0 && dryRun.output.contains("to move") && dryRun.output.contains("dry run"), "\(dryRun.output)")
        let moved = try await migrate(fixture, "migrate", ["--execute"])
        #expect(moved.status == 0 && moved.output.contains("recorded the layout"), "\(moved.output)")
        let again = try await migrate(fixture, "again", [])
        #expect(again.status == 0 && again.output.contains("the layout holds"), "\(again.output)")

        for seq in 5...6 { try await fixture.produceEvents(seq: seq) }
        let after = try fixture.startRelay("after")
        #expect(try await fixture.waitForResults(fixture.users * 6), "\(after.output.suffix(3_000))")
        #expect(await after.stopGracefully(), "\(after.output.suffix(3_000))")
        try await fixture.expectExactlyOnce(seqs: 6)
        try await fixture.stop()
    }

    /// Runs `apns-relay partitions migrate` on the fixture's configuration to its end.
    private func migrate(_ fixture: BrokerRelayFixture, _ name: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
        let log = "\(fixture.directory)/\(name).log"
        let process = try startRelay(["partitions", "migrate", "--config", fixture.configPath] + arguments, log: log)
        _ = await waitUntil(timeout: .seconds(120)) { !process.isRunning }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        return (process.terminationStatus, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    }
}

/// Users' home partitions on librdkafka's mock cluster, where a relay killed with SIGKILL leaves the group after its
/// session timeout (the noida-db broker keeps a dead member).
@Suite("Users' home partitions: producers keying wrongly, a relay killed", .serialized)
struct HomePartitionKillProcessTests {
    @Test("events keyed by event id, with no key, and by crc32 beside murmur2; one relay killed (SIGKILL) midway, another joining later: every user counted once at its home, no device's badge going down, every event delivered")
    func misKeyedWithAKill() async throws {
        let fixture = try await RelayProcessFixture.start(
            kafkaLines: RelayProcessFixture.shortGroupTimeouts,
            relayLines: """
                  http_port: 0
                  shutdown_timeout_s: 20
                  reorder_window_ms: 20000
                """)
        var logger = Logger(label: "home-partition-test")
        logger.logLevel = .error
        let users = 12
        let seqs = 6
        let tokens = (0..<users).map { RelayProcessFixture.deviceToken(user: $0) }
        try await fixture.register((0..<users).map { (tokens[$0], "u-\($0)") }, logger: logger)
        // APNs answers in 250 ms: work is in flight when the first relay is killed and when the third joins.
        fixture.simulator.addFault(.delay(.milliseconds(250)), count: nil)
        let kafka = KafkaConfiguration(bootstrapServers: fixture.cluster.bootstrapServers)
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        for seq in 1...seqs {
            for user in 0..<users {
                let value = Array("{\"id\":\"u\(user)-e\(seq)\",\"user\":\"u-\(user)\",\"seq\":\(seq),\"badge\":{\"increment\":1},\"apns\":{\"payload\":{\"aps\":{\"alert\":\"n\(seq)\"}}}}".utf8)
                let userKey = Array("u-\(user)".utf8)
                let record = switch user % 4 {
                case 0: KafkaRecord(topic: "push.events", key: userKey, value: value)
                case 1: KafkaRecord(topic: "push.events", key: Array("u\(user)-e\(seq)".utf8), value: value)
                case 2: KafkaRecord(topic: "push.events", key: nil, value: value)
                default: KafkaRecord(topic: "push.events", partition: KafkaPartitioner.crc32(key: userKey, partitionCount: 3), key: userKey, value: value)
                }
                _ = try await producer.enqueue(record)
            }
        }
        try await producer.flush()
        await producer.close()

        let first = try startRelay(["run", "--config", fixture.configPath], log: "\(fixture.directory)/first.log")
        try await HandOverProcessTests.wait(upTo: .seconds(60)) { fixture.simulator.deliveryCount >= users }
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        let second = try startRelay(["run", "--config", fixture.configPath], log: "\(fixture.directory)/second.log")
        try await HandOverProcessTests.wait(upTo: .seconds(60)) { HandOverProcessTests.log("\(fixture.directory)/second.log").contains("badge state restored") }
        let third = try startRelay(["run", "--config", fixture.configPath], log: "\(fixture.directory)/third.log")
        try await HandOverProcessTests.wait(upTo: .seconds(60)) { HandOverProcessTests.log("\(fixture.directory)/third.log").contains("partitions assigned") }
        let everyEvent = Set((0..<users).flatMap { user in (1...seqs).map { "u\(user)-e\($0)" } })
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        try await HandOverProcessTests.wait(upTo: .seconds(120)) {
            Set(fixture.simulator.allDeliveries().compactMap { delivery in delivery.badge.map { _ in delivery.apnsID } }).count >= users * seqs
        }
        try await Task.sleep(for: .seconds(3))
        try await HandOverProcessTests.stop(third)
        try await HandOverProcessTests.stop(second)

        let results = try await keyCounts(reader, topic: "push.results")
        #expect(Set(results.keys).isSuperset(of: everyEvent), "every event has a result: missing \(everyEvent.subtracting(results.keys).sorted().prefix(6))")
        let wrongBadges = tokens.compactMap { token -> String? in
            let badges = fixture.simulator.deliveries(for: token).compactMap(\.badge)
            return badges == badges.sorted() && badges.last == seqs && badges.count >= seqs ? nil : "\(token.suffix(8)): \(badges)"
        }
        #expect(wrongBadges.isEmpty, "devices whose badges go down or do not end at \(seqs): \(wrongBadges)")
        let states = try await lastBadgeStates(reader)
        let wrongCounts = states.filter { !($0.value.contains("\"badge\":\(seqs),") && $0.value.contains("\"seq\":\(seqs),")) }
        #expect(states.count == users && wrongCounts.isEmpty, "every user once, at \(seqs): \(wrongCounts.sorted { $0.key < $1.key }.prefix(4))")
        #expect(HandOverProcessTests.log("\(fixture.directory)/third.log").contains("partitions assigned"), "the third joined")
        await fixture.stop()
    }
}
