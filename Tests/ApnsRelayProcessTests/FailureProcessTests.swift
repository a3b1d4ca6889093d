import APNsSimulator
import Foundation
import Kafka
import Logging
import Testing

/// `apns-relay run` as a process against faults: it never stalls quietly, and never turns a full
/// queue into `failed`.
@Suite("apns-relay run under failures", .serialized)
struct FailureProcessTests {
    @Test("a broker refusing every write for longer than message.timeout.ms: the relay gives up within relay.failure_timeout_s and exits 1, saying why")
    func brokerRefusesWrites() async throws {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(
            kafkaLines: """
                  properties:
                    message.timeout.ms: 2000
                """,
            relayLines: """
                  http_port: 0
                  failure_timeout_s: 3
                """)
        try await fixture.produceUsers(20, eventsPerUser: 2, logger: logger)
        // Every Produce request from now on (the relay's changelog appends, results) is refused
        // with a retriable error: librdkafka retries until message.timeout.ms, then reports.
        try fixture.cluster.failRequests(apiKey: 0, count: 1_000_000, code: 19)
        let log = "\(fixture.directory)/relay.log"
        let started = ContinuousClock.now
        let process = try startRelay(["run", "--config", fixture.configPath], log: log)
        while process.isRunning && ContinuousClock.now - started < .seconds(90) { try await Task.sleep(for: .milliseconds(100)) }
        #expect(!process.isRunning, "gave up instead of stalling")
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        #expect(process.terminationStatus == 1)
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(text.contains("the relay cannot go on"))
        // With transactions (the default) the append's failure fails the relay's transaction, which is aborted and its
        // records written again; the append keeps failing past the bound, which ends the relay (whichever of the
        // appends and the transactions reached its bound first).
        #expect((text.contains("publishing the badge changelog failed for") || text.contains("no transaction committed for")) && text.contains("timed out"),
                "\(text.suffix(2_000))")
        #expect(fixture.simulator.deliveryCount == 0, "nothing is sent before its badge change is stored")
        await fixture.stop()
    }

    @Test("relay.max_in_flight 8 under a backlog of 2,000 notifications: every one delivered, none failed (backpressure, not `overloaded`)")
    func smallQueue() async throws {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(relayLines: """
              http_port: 0
              max_in_flight: 8
            """)
        let users = 400
        let eventsPerUser = 5
        try await fixture.produceUsers(users, eventsPerUser: eventsPerUser, logger: logger)
        let process = try startRelay(["run", "--config", fixture.configPath], log: "\(fixture.directory)/relay.log")
        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: fixture.cluster.bootstrapServers), logger: logger)
        let total = users * eventsPerUser
        var statuses: [String: Int] = [:]
        let doneBy = ContinuousClock.now.advanced(by: .seconds(180))
        while ContinuousClock.now < doneBy {
            let counts = LastValues()
            _ = try await reader.readToEnd((0..<3).map { TopicPartition("push.results", Int32($0)) }) { message in
                counts.set(String(decoding: message.key ?? [], as: UTF8.self), String(decoding: message.value ?? [], as: UTF8.self))
            }
            statuses = Dictionary(grouping: counts.all.values) { value in
                value.range(of: #""status":"[a-z_]+""#, options: .regularExpression).map { String(value[$0]) } ?? "?"
            }.mapValues(\.count)
            if counts.all.count >= total { break }
            try await Task.sleep(for: .milliseconds(500))
        }
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        #expect(statuses[#""status":"failed""#] == nil, "\(statuses)")
        #expect(statuses.values.reduce(0, +) == total, "\(statuses)")
        await fixture.stop()
    }
}
