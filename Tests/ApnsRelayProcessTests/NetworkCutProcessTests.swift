import Foundation
import Kafka
import Logging
import Synchronization
import TestSupport
import Testing

import Relay

/// A process's connections to Kafka held (packets dropped, connections kept: no reset), as a network partition
/// between a pod and its brokers holds them, then released: what was queued then lands late.
///
/// The relay runs under a group id of its own (`gid`); an iptables rule drops its TCP packets to the brokers'
/// ports. Root only (the tests run as root in CI).
final class NetworkCut {
    let gid: Int
    private let ports: [Int]
    private var active = false

    init(gid: Int, bootstrapServers: String) {
        self.gid = gid
        ports = bootstrapServers.split(separator: ",").compactMap { $0.split(separator: ":").last.flatMap { Int($0) } }
    }

    private func rule(_ action: String, port: Int) -> [String] {
        [action, "OUTPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", "\(port)", "-m", "owner", "--gid-owner", "\(gid)", "-j", "DROP"]
    }

    /// Holds the traffic from now on.
    func begin() throws {
        for port in ports { try Self.iptables(rule("-I", port: port)) }
        active = true
    }

    /// Lets it through again; queued packets are retransmitted.
    func heal() {
        guard active else { return }
        for port in ports { try? Self.iptables(rule("-D", port: port)) }
        active = false
    }

    deinit { heal() }

    private static func iptables(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/iptables")
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw LocalServerProcess.StartError("iptables \(arguments.joined(separator: " ")) exited \(process.terminationStatus)")
        }
    }

    /// Starts `apns-relay` with `arguments` under the cut's group id.
    func startRelay(_ arguments: [String], log: String) throws -> Process {
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("apns-relay").path
        let script = "import os, sys\nos.setgroups([])\nos.setgid(\(gid))\nos.execv(sys.argv[1], sys.argv[1:])\n"
        return try ApnsRelayProcessTests.startRelay(["-c", script, binary] + arguments, log: log, executable: "/usr/bin/python3")
    }
}

@Suite("apns-relay run cut off from Kafka", .serialized)
struct NetworkCutProcessTests {
    static let logger: Logger = {
        var logger = Logger(label: "cut-test")
        logger.logLevel = .error
        return logger
    }()

    /// `transactions`: the relay's `kafka.transactions` (`off` shows what the test finds without them).
    static func cutOffRelay(transactions: String) async throws -> (stale: [String], wentBack: [String]) {
        let fixture = try await RelayProcessFixture.start(
            // Records may wait a minute for delivery (the cut outlasts librdkafka's default 30 s otherwise).
            kafkaLines: RelayProcessFixture.shortGroupTimeouts + "\n    message.timeout.ms: 60000\n  transactions: \(transactions)",
            relayLines: """
                  http_port: 0
                  shutdown_timeout_s: 20
                  reorder_window_ms: 2000
                """)
        let users = 20
        try await fixture.register((0..<users).map { (RelayProcessFixture.deviceToken(user: $0), "u-\($0)") }, logger: Self.logger)
        let cut = NetworkCut(gid: 4242, bootstrapServers: fixture.cluster.bootstrapServers)
        defer { cut.heal() }
        let first = try cut.startRelay(["run", "--config", fixture.configPath], log: "\(fixture.directory)/first.log")
        let second = try startRelay(["run", "--config", fixture.configPath], log: "\(fixture.directory)/second.log")
        try await fixture.produceSeqs([1, 2], users: users, logger: Self.logger)
        try await HandOverProcessTests.wait(upTo: .seconds(60)) {
            (0..<users).allSatisfy { fixture.simulator.deliveries(for: RelayProcessFixture.deviceToken(user: $0)).last?.badge == 2 }
        }
        // Seq 4 is held for seq 3 (2 s); the first relay is cut off meanwhile: when the wait ends it applies 4 and
        // its changelog append is queued behind the cut.
        try await fixture.produceSeqs([4], users: users, logger: Self.logger)
        try await Task.sleep(for: .milliseconds(300))
        try cut.begin()
        // Past the session timeout (6 s) the group gives the first's partitions to the second, which gets 3, 5...10.
        try await Task.sleep(for: .seconds(9))
        try await fixture.produceSeqs([3, 5, 6, 7, 8, 9, 10], users: users, logger: Self.logger)
        try await HandOverProcessTests.wait(upTo: .seconds(60)) {
            (0..<users).allSatisfy { fixture.simulator.deliveries(for: RelayProcessFixture.deviceToken(user: $0)).last?.badge == 10 }
        }
        // The cut heals 20 s after it began; TCP retransmits what it held about 25 s after the cut began.
        try await Task.sleep(for: .seconds(max(0, 20 - 9 - 1)))
        cut.heal()
        try await Task.sleep(for: .seconds(15))  // what the first had queued lands by now
        try await HandOverProcessTests.stop(second)
        try await HandOverProcessTests.stop(first)

        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: fixture.cluster.bootstrapServers), logger: Self.logger)
        let last = try await lastBadgeStates(reader)
        let stale = (0..<users).compactMap { user -> String? in
            let state = last["u-\(user)"] ?? "none"
            return state.contains("\"seq\":10,") ? nil : "u-\(user): \(state)"
        }
        let wentBack = (0..<users).compactMap { user -> String? in
            let badges = fixture.simulator.deliveries(for: RelayProcessFixture.deviceToken(user: user)).compactMap(\.badge)
            return badges == badges.sorted() ? nil : "u-\(user): \(badges)"
        }
        await fixture.stop()
        return (stale, wentBack)
    }

    @Test("a relay cut off from Kafka past its session timeout while a changelog append is queued, then healed: its late write is fenced, no badge state goes back")
    func cutOffRelayWritesNothingStale() async throws {
        let (stale, wentBack) = try await Self.cutOffRelay(transactions: "on")
        #expect(stale.isEmpty, "users whose last badge state is not seq 10: \(stale.prefix(3))")
        #expect(wentBack.isEmpty, "devices whose badge went back: \(wentBack.prefix(3))")
    }

    /// On noida-db (transaction markers, producer-epoch fencing; it never expires a member, so the partitions'
    /// next owner is played by the test): the relay is cut off with a changelog append queued, the test initialises
    /// the partitions' transactional ids as a new owner does, then the cut heals.
    static func lateWriteOnBroker(transactions: String) async throws
        -> (lastStates: [String: String], results: [PublishedResult], exit: Int32?, log: String) {
        let fixture = try await BrokerRelayFixture.start(users: 12, devicesPerUser: 1, kafkaLines: "\n  transactions: \(transactions)")
        try await fixture.createTopicsThenRegisterDevices()
        let cut = NetworkCut(gid: 4243, bootstrapServers: fixture.broker.bootstrapServers)
        defer { cut.heal() }
        let log = "\(fixture.directory)/cut.log"
        let relay = RelayProcess(process: try cut.startRelay(["run", "--config", fixture.configPath], log: log), log: log)
        try await fixture.produceEvents(seq: 1)
        try await fixture.produceEvents(seq: 2)
        #expect(try await fixture.waitForResults(fixture.users * 2), "\(relay.output.suffix(2_000))")
        // Seq 4 waits 2 s for seq 3; the cut begins meanwhile: when the wait ends the relay applies 4 and its append
        // waits behind the cut.
        try await fixture.produceEvents(seq: 4)
        try await Task.sleep(for: .milliseconds(300))
        try cut.begin()
        try await Task.sleep(for: .milliseconds(2_500))
        for partition in 0..<Int32(BrokerRelayFixture.partitions) {
            let owner = try KafkaTransactionalProducer(
                configuration: fixture.kafka, logger: Self.logger,
                transactionalID: RelayKafkaClients.transactionalID(group: "apns-relay", events: "push.events", partition: partition))
            try await owner.initTransactions(timeout: .seconds(30))
            await owner.close()
        }
        cut.heal()
        // Within relay.failure_timeout_s (60 s): a commit that kept failing retriably through the cut ends it too.
        _ = await waitUntil(timeout: .seconds(90)) { !relay.process.isRunning }
        let exit = relay.process.isRunning ? nil : relay.process.terminationStatus
        if relay.process.isRunning { _ = await relay.stopGracefully() }
        let reader = try KafkaPartitionReader(configuration: fixture.kafka, logger: Self.logger)
        let last = try await lastBadgeStates(reader, partitions: BrokerRelayFixture.partitions)
        let results = try await fixture.results()
        let output = relay.output  // before the fixture's stop removes its directory
        try await fixture.stop()
        return (last, results, exit, output)
    }

    @Test("on a broker with markers: a write that reaches Kafka after the partition's next owner initialised its transactions is never visible, and the relay exits 1")
    func lateWriteAfterTheNextOwnerIsFenced() async throws {
        let (last, results, exit, log) = try await Self.lateWriteOnBroker(transactions: "on")
        let applied = last.filter { !$0.value.contains("\"seq\":2,") }
        #expect(last.count == 12 && applied.isEmpty, "states past seq 2 visible: \(applied.prefix(3))")
        // What a read_committed reader of push.results sees: each of seqs 1 and 2 once per device, nothing of seq 4.
        let counts = Dictionary(grouping: results, by: \.eventID).mapValues(\.count)
        #expect(counts.count == 24 && counts.values.allSatisfy { $0 == 1 } && !counts.keys.contains { $0.hasSuffix("-e4") }, "\(counts.filter { $0.value != 1 || $0.key.hasSuffix("-e4") })")
        // Fenced at its next commit ("were fenced") or write (its producer "failed for good": fenced); or, when a
        // commit was under way through the cut, its transaction failed first. Crash-only, whichever comes first.
        #expect(exit == 1 && log.contains("the relay cannot go on") && (log.contains("fenced") || log.contains("a transaction of push.events")),
                "exit \(exit.map(String.init) ?? "none")\n\(log.suffix(2_000))")
    }
}
