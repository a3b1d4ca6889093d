import APNsSimulator
import Foundation
import Kafka
import Logging
import NIOCore
import Testing

/// Hand-overs and freezes as an operator's cluster meets them, with `apns-relay run` as processes
/// on one embedded cluster and the in-process simulator as every device's view.
@Suite("apns-relay run: hand-overs, freezes and stops", .serialized)
struct HandOverProcessTests {
    static let logger: Logger = {
        var logger = Logger(label: "handover-test")
        logger.logLevel = .error
        return logger
    }()

    /// Waits (bounded) until `condition` holds; returns whether it did.
    @discardableResult
    static func wait(upTo timeout: Duration, _ condition: () throws -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try condition() { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return try condition()
    }

    static func log(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

    /// The lines of a relay's log about its partitions (assignments, revokes, hand-overs, restores): what a failed
    /// expectation about a rebalance needs to say.
    static func partitionLines(_ path: String) -> String {
        log(path).split(separator: "\n").filter { line in
            ["partitions", "revoke", "hand", "restored", "abandon"].contains { line.contains($0) }
        }.joined(separator: "\n")
    }

    static func stop(_ process: Process) async throws {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        try await wait(upTo: .seconds(60)) { !process.isRunning }
    }

    @Test("a second relay joins while a device answers slowly: nothing delivered is sent again, no result is published twice")
    func graceful_rebalance_with_a_slow_device() async throws {
        let fixture = try await RelayProcessFixture.start(
            kafkaLines: RelayProcessFixture.shortGroupTimeouts,
            relayLines: """
                  http_port: 0
                  shutdown_timeout_s: 20
                """)
        let users = 10
        var devices: [(token: String, user: String)] = []
        for user in 0..<users {
            devices.append((RelayProcessFixture.deviceToken(user: user), "u-\(user)"))
            devices.append((RelayProcessFixture.deviceToken(user: user, variant: 1), "u-\(user)"))
        }
        let slow = RelayProcessFixture.deviceToken(user: 0, variant: 1)
        fixture.simulator.addFault(.delay(.seconds(2)), token: slow, count: nil)
        try await fixture.register(devices, logger: Self.logger)
        try await fixture.produceSeqs([1, 2, 3, 4, 5, 6], users: users, logger: Self.logger)

        let first = try startRelay(["run", "--config", fixture.configPath], log: "\(fixture.directory)/first.log")
        try await Self.wait(upTo: .seconds(60)) { fixture.simulator.deliveries(for: RelayProcessFixture.deviceToken(user: 1)).count >= 1 }
        let second = try startRelay(["run", "--config", fixture.configPath], log: "\(fixture.directory)/second.log")
        // Every notification delivered, the slow device's last after its 2 s each.
        let total = users * 6 * 2
        try await Self.wait(upTo: .seconds(120)) { Set(fixture.simulator.allDeliveries().map(\.apnsID)).count >= total }
        try await Task.sleep(for: .seconds(3))  // anything sent twice would arrive by now
        try await Self.stop(second)
        try await Self.stop(first)

        let deliveries = fixture.simulator.allDeliveries()
        let sentTwice = Dictionary(grouping: deliveries, by: \.apnsID).filter { $0.value.count > 1 }
        #expect(Set(deliveries.map(\.apnsID)).count == total, """
            every (event, device) delivered
            first relay:
            \(Self.partitionLines("\(fixture.directory)/first.log"))
            second relay:
            \(Self.partitionLines("\(fixture.directory)/second.log"))
            """)
        #expect(sentTwice.isEmpty, "delivered notifications sent again: \(sentTwice.count), e.g. \(sentTwice.values.first?.first?.collapseID ?? "")")
        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: fixture.cluster.bootstrapServers), logger: Self.logger)
        let results = try await keyCounts(reader, topic: "push.results")
        #expect(results.count == users * 6 && results.values.allSatisfy { $0 == 2 }, "one result per (event, device): \(results.filter { $0.value != 2 })")
        #expect(Self.log("\(fixture.directory)/second.log").contains("partitions assigned"), "the rebalance happened")
        await fixture.stop()
    }

    @Test("a relay frozen past its session timeout (SIGSTOP), its partitions moved, then thawed: no device's badge and no changelog seq goes back")
    func frozen_owner_sends_and_writes_nothing_stale() async throws {
        let fixture = try await RelayProcessFixture.start(
            kafkaLines: RelayProcessFixture.shortGroupTimeouts,
            relayLines: """
                  http_port: 0
                  shutdown_timeout_s: 20
                  reorder_window_ms: 3000
                """)
        let users = 20
        try await fixture.register((0..<users).map { (RelayProcessFixture.deviceToken(user: $0), "u-\($0)") }, logger: Self.logger)
        // Seqs 1, 2 and 4: the first owner applies 1 and 2 and holds 4 for 3.
        try await fixture.produceSeqs([1, 2, 4], users: users, logger: Self.logger)
        let first = try startRelay(["run", "--config", fixture.configPath], log: "\(fixture.directory)/first.log")
        let reachedTwo = try await Self.wait(upTo: .seconds(60)) {
            (0..<users).allSatisfy { fixture.simulator.deliveries(for: RelayProcessFixture.deviceToken(user: $0)).last?.badge == 2 }
        }
        #expect(reachedTwo)
        try await Task.sleep(for: .milliseconds(300))
        kill(first.processIdentifier, SIGSTOP)

        // A second relay gets the partitions once the first's session timed out, and applies 3, 4, 5, 6.
        let second = try startRelay(["run", "--config", fixture.configPath], log: "\(fixture.directory)/second.log")
        try await fixture.produceSeqs([3, 5, 6], users: users, logger: Self.logger)
        let reachedSix = try await Self.wait(upTo: .seconds(90)) {
            (0..<users).allSatisfy { fixture.simulator.deliveries(for: RelayProcessFixture.deviceToken(user: $0)).last?.badge == 6 }
        }
        #expect(reachedSix)
        // The first is thawed long after its seq 4s' reorder window ran out.
        kill(first.processIdentifier, SIGCONT)
        try await Task.sleep(for: .seconds(6))
        try await Self.stop(second)
        try await Self.stop(first)

        for user in 0..<users {
            let badges = fixture.simulator.deliveries(for: RelayProcessFixture.deviceToken(user: user)).compactMap(\.badge)
            #expect(badges == badges.sorted() && badges.last == 6, "u-\(user)'s device: \(badges)")
        }
        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: fixture.cluster.bootstrapServers), logger: Self.logger)
        let last = try await lastBadgeStates(reader)
        for user in 0..<users {
            let state = last["u-\(user)"] ?? "none"
            #expect(state.contains("\"badge\":6,") && state.contains("\"seq\":6,"), "u-\(user)'s last badge state: \(state)")
        }
        await fixture.stop()
    }

    @Test("a graceful stop with Kafka and APNs unreachable ends within relay.shutdown_timeout_s, exit 1 (the hand-over could not be stored)")
    func stop_within_budget_with_everything_unreachable() async throws {
        // A session timeout longer than the stop: the partitions are still this relay's to hand over when it stops
        // (with the group's usual 45 s; a shorter one could have them reported lost first, and nothing to hand over).
        let fixture = try await RelayProcessFixture.start(
            kafkaLines: """
                  properties:
                    session.timeout.ms: 45000
                    heartbeat.interval.ms: 500
                """,
            relayLines: """
                  http_port: 0
                  shutdown_timeout_s: 8
                """)
        let users = 50
        try await fixture.produceUsers(users, eventsPerUser: 4, logger: Self.logger)
        let log = "\(fixture.directory)/relay.log"
        let relay = try startRelay(["run", "--config", fixture.configPath], log: log)
        try await Self.wait(upTo: .seconds(60)) { fixture.simulator.deliveryCount >= users }
        // APNs stops answering, then the cluster goes away; more events were consumed meanwhile.
        fixture.simulator.addFault(.freeze, count: nil)
        try await Task.sleep(for: .milliseconds(500))
        try fixture.cluster.setBrokerDown(1)
        try await Task.sleep(for: .seconds(1))
        let signalled = ContinuousClock.now
        kill(relay.processIdentifier, SIGTERM)
        try await Self.wait(upTo: .seconds(60)) { !relay.isRunning }
        let took = ContinuousClock.now - signalled
        #expect(!relay.isRunning)
        #expect(took < .seconds(8), "the stop took \(took) against relay.shutdown_timeout_s 8")
        #expect(relay.terminationReason == .exit && relay.terminationStatus == 1, "exit \(relay.terminationStatus)\n\(Self.log(log).suffix(2_000))")
        #expect(Self.log(log).contains("hand-over did not complete"), "\(Self.log(log).suffix(2_000))")
        await fixture.stop()
    }

    @Test("a SIGTERM that came before the relay's own code ran (pending when it starts) stops it cleanly with exit 0, not by the signal", arguments: 0..<2)
    func sigterm_before_the_relay_runs(attempt: Int) async throws {
        let fixture = try await RelayProcessFixture.start(relayLines: """
                  http_port: 0
                  shutdown_timeout_s: 10
                """)
        let log = "\(fixture.directory)/relay.log"
        // python3 blocks SIGTERM, sends it to itself (pending) and becomes the relay: the signal is there before the
        // relay's first instruction, as one sent while the dynamic loader works, or before the service group is up.
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("apns-relay").path
        let script = """
            import os, signal, sys
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            os.kill(os.getpid(), signal.SIGTERM)
            os.execv(sys.argv[1], sys.argv[1:])
            """
        let relay = try startRelay(["-c", script, binary, "run", "--config", fixture.configPath], log: log, executable: "/usr/bin/python3")
        try await Self.wait(upTo: .seconds(60)) { !relay.isRunning }
        if relay.isRunning { relay.terminate() }
        #expect(relay.terminationReason == .exit && relay.terminationStatus == 0,
                "ended by \(relay.terminationReason == .exit ? "exit" : "signal") \(relay.terminationStatus)\n\(Self.log(log).suffix(1_000))")
        #expect(Self.log(log).contains("stop signal received while starting"), "\(Self.log(log).suffix(1_000))")
        await fixture.stop()
    }
}
