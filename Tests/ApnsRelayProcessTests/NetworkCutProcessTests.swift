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

    /// On noida-db behind a ``KafkaBrokerFront`` (markers, epoch fencing, and Kafka's session expiry and generation
    /// check): two relays serve; the first is cut off with a changelog append queued, the group (the front) expires
    /// it after its session timeout and the second takes its partitions over and serves seqs 3, 5...10; then the cut
    /// heals and what the first had queued lands late.
    static func cutOffRelay(transactions: String) async throws
        -> (lastStates: [String: String], wentBack: [String], results: [PublishedResult], firstExited: Int32?, log: String) {
        // Records and transactions may wait a minute for delivery: the cut outlasts librdkafka's default 30 s and the
        // relay's 10 s transaction timeout, and what it holds lands late rather than timing out.
        let fixture = try await BrokerRelayFixture.start(
            users: 20, devicesPerUser: 1, kafkaLines: "\n    message.timeout.ms: 60000\n  transactions: \(transactions)",
            relayLines: "\n  transaction_timeout_ms: 60000", throughFront: true)
        try await fixture.createTopicsThenRegisterDevices()
        let users = fixture.users
        let cut = NetworkCut(gid: 4242, bootstrapServers: fixture.front!.bootstrapServers)
        defer { cut.heal() }
        let log = "\(fixture.directory)/first.log"
        let first = RelayProcess(process: try cut.startRelay(["run", "--config", fixture.configPath], log: log), log: log)
        let second = try fixture.startRelay("second")
        try await fixture.produceEvents(seq: 1)
        try await fixture.produceEvents(seq: 2)
        func allAt(_ badge: Int) -> Bool {
            (0..<users).allSatisfy { fixture.simulator.deliveries(for: fixture.token(user: $0, device: 0)).last?.badge == badge }
        }
        #expect(await waitUntil(timeout: .seconds(60)) { allAt(2) }, "\(first.output.suffix(2_000))")
        // Seq 4 is held for seq 3 (2 s); the first relay is cut off meanwhile: when the wait ends it applies 4 and
        // its changelog append is queued behind the cut.
        try await fixture.produceEvents(seq: 4)
        try await Task.sleep(for: .milliseconds(300))
        try cut.begin()
        // Past the session timeout (6 s) the front expires the first; the second gets its partitions, and 3, 5...10.
        try await Task.sleep(for: .seconds(9))
        for seq in [3, 5, 6, 7, 8, 9, 10] { try await fixture.produceEvents(seq: seq) }
        #expect(await waitUntil(timeout: .seconds(60)) { allAt(10) }, "\(second.output.suffix(2_000))")
        // The cut heals 20 s after it began; TCP retransmits what it held, and it lands late.
        try await Task.sleep(for: .seconds(max(0, 20 - 9 - 1)))
        cut.heal()
        try await Task.sleep(for: .seconds(15))
        let firstExited = first.process.isRunning ? nil : first.process.terminationStatus
        #expect(await second.stopGracefully(), "\(second.output.suffix(2_000))")
        _ = await first.stopGracefully()

        let reader = try KafkaPartitionReader(configuration: fixture.kafka, logger: Self.logger)
        let last = try await lastBadgeStates(reader, partitions: BrokerRelayFixture.partitions)
        let wentBack = (0..<users).compactMap { user -> String? in
            let badges = fixture.simulator.deliveries(for: fixture.token(user: user, device: 0)).compactMap(\.badge)
            return badges == badges.sorted() ? nil : "u-\(user): \(badges)"
        }
        let results = try await fixture.results()
        let output = first.output
        try await fixture.stop()
        return (last, wentBack, results, firstExited, output)
    }

    @Test("a relay cut off from Kafka past its session timeout while a changelog append is queued, then healed: its late write is never visible (the group refused its offsets), no badge state or device goes back, every event has its results, and it stays in the group")
    func cutOffRelayWritesNothingStale() async throws {
        let (last, wentBack, results, firstExited, log) = try await Self.cutOffRelay(transactions: "on")
        let stale = last.filter { !$0.value.contains("\"seq\":10,") }
        #expect(last.count == 20 && stale.isEmpty, "users whose last badge state is not seq 10: \(stale.prefix(3))")
        #expect(wentBack.isEmpty, "devices whose badge went back: \(wentBack.prefix(3))")
        // What a read_committed reader of push.results sees: every seq of every device. To the group the cut relay died,
        // so what it finished after its last progress marker may have a second result, from its partitions' next owner.
        let counts = Dictionary(grouping: results, by: \.eventID).mapValues(\.count)
        #expect(counts.count == 20 * 10, "events with a result: \(counts.count) of 200")
        // Its transaction was refused and aborted; it was not the process's end.
        #expect(firstExited == nil, "the cut-off relay exited \(firstExited.map(String.init) ?? "-"): \(log.suffix(2_000))")
        #expect(log.contains("the relay's transaction failed"), "\(log.suffix(2_000))")
    }
}
