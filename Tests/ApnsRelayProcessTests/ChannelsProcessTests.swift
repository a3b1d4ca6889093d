import Foundation
import Kafka
import Logging
import Testing
import TestSupport

/// Runs the built `apns-relay` with `arguments` to its end; returns its exit status, standard output and error.
private func runCLI(_ arguments: [String], environment: [String: String] = [:]) async throws -> (status: Int32, output: String, error: String) {
    let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("apns-relay")
    let directory = scratchPath("cli")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let (outputPath, errorPath) = ("\(directory)/out", "\(directory)/err")
    _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
    _ = FileManager.default.createFile(atPath: errorPath, contents: nil)
    let process = Process()
    process.executableURL = binary
    process.arguments = arguments
    process.environment = ["PATH": "/usr/bin:/bin"].merging(environment) { $1 }
    process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
    process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errorPath))
    try process.run()
    while process.isRunning { try await Task.sleep(for: .milliseconds(20)) }
    return (process.terminationStatus, try String(contentsOfFile: outputPath, encoding: .utf8), try String(contentsOfFile: errorPath, encoding: .utf8))
}

@Suite("apns-relay channels and broadcasts as processes", .serialized)
struct ChannelsProcessTests {
    @Test("channels create/read/list/delete against the simulator's management port; run delivers a broadcast event with one result")
    func channelsAndBroadcast() async throws {
        var logger = Logger(label: "channels-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(relayLines: "  http_port: 0\n  shutdown_timeout_s: 10\n", broadcastManagement: true)
        let (cluster, simulator, directory) = (fixture.cluster, fixture.simulator, fixture.directory)
        let config = ["--config", fixture.configPath]

        let created = try await runCLI(["channels", "create", "--topic", "com.example.app", "--storage-policy", "most-recent"] + config)
        #expect(created.status == 0, "\(created.error)")
        let channel = created.output.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(simulator.channels(of: "com.example.app") == [channel])

        let read = try await runCLI(["channels", "read", "--channel-id", channel] + config)  // apns.topic is the default bundle id
        #expect(read.status == 0, "\(read.error)")
        #expect(read.output == #"{"channel_id":"\#(channel)","push_type":"LiveActivity","storage_policy":"most-recent"}"# + "\n")
        let listed = try await runCLI(["channels", "list", "--topic", "com.example.app"] + config)
        #expect(listed.status == 0 && listed.output == channel + "\n", "\(listed)")

        // A broadcast event through `apns-relay run`: one send to the channel, one result with the channel id as token.
        let producer = try KafkaProducer(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
        _ = try await producer.enqueue(KafkaRecord(topic: "push.events", key: Array("live-1".utf8), value: Array("""
            {"id":"live-1","apns":{"channel_id":"\(channel)","push_type":"liveactivity",\
            "payload":{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"1-0"}}}}}
            """.utf8)))
        try await producer.flush()
        await producer.close()
        let relay = try startRelay(["run"] + config, log: "\(directory)/run.log")
        let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
        let results = LastValues()
        let doneBy = ContinuousClock.now.advanced(by: .seconds(60))
        while ContinuousClock.now < doneBy && relay.isRunning && results.all.isEmpty {
            _ = try await reader.readToEnd((0..<3).map { TopicPartition("push.results", Int32($0)) }) { message in
                results.set(String(decoding: message.key ?? [], as: UTF8.self), String(decoding: message.value ?? [], as: UTF8.self))
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        kill(relay.processIdentifier, SIGTERM)
        while relay.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        let runLog = (try? String(contentsOfFile: "\(directory)/run.log", encoding: .utf8)) ?? ""
        #expect(relay.terminationStatus == 0, "\(runLog.suffix(2_000))")
        let result = try #require(results.all["live-1"], "\(runLog.suffix(3_000))")
        let record = try #require(try JSONSerialization.jsonObject(with: Data(result.utf8)) as? [String: Any])
        #expect(record["token"] as? String == channel)
        #expect(record["status"] as? String == "delivered")
        #expect(simulator.broadcastCounts == [channel: 1])

        let deleted = try await runCLI(["channels", "delete", "--topic", "com.example.app", "--channel-id", channel] + config)
        #expect(deleted.status == 0 && deleted.output == "deleted \(channel)\n", "\(deleted)")
        let emptied = try await runCLI(["channels", "list"] + config)
        #expect(emptied.status == 0 && emptied.output.isEmpty, "\(emptied)")
        // APNs' reason, exit 1.
        let again = try await runCLI(["channels", "delete", "--channel-id", channel] + config)
        #expect(again.status == 1)
        #expect(again.error.contains("APNs answered 404 ChannelNotRegistered"), "\(again.error)")
        // A bad override key stops the command with exit 2 naming it, as for the send endpoints.
        let badKey = try await runCLI(["channels", "list"] + config, environment: ["APNS_RELAY_APNS_PRODUCTION_MANAGEMENT_ENDPOINT": "nowhere"])
        #expect(badKey.status == 2)
        #expect(badKey.error.contains("apns.production_management_endpoint"), "\(badKey.error)")
        let badID = try await runCLI(["channels", "delete", "--channel-id", "not base64!"] + config)
        #expect(badID.status == 2, "\(badID)")
        await fixture.stop()
    }
}
