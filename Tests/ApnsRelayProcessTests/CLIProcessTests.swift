import Foundation
import Relay
import Testing
import TestSupport

/// Runs the built `apns-relay` binary (built next to the test bundle by `swift build --build-tests`).
func runRelay(_ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
    let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("apns-relay")
    let process = Process()
    process.executableURL = binary
    process.arguments = arguments
    process.environment = environment.merging(["PATH": "/usr/bin:/bin"]) { current, _ in current }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

@Suite("The apns-relay binary")
struct CLIProcessTests {
    @Test("check-config prints effective values with secrets redacted and exits 0")
    func checkConfigOK() throws {
        let fixture = try ConfigFixture()
        let file = try fixture.write(fixture.validYAML)
        let (status, output) = try runRelay(["check-config", "--config", file], environment: ["APNS_RELAY_APNS_AUTH_KEY_ID": "ZZZ123DEFG"])
        #expect(status == 0, "\(output)")
        #expect(output.contains("apns.auth.key_id: ZZZ123DEFG"))
        #expect(output.contains("apns.production_endpoint: (Apple's production host)"))
        #expect(output.contains("apns.sandbox_endpoint: (Apple's sandbox host)"))
        #expect(output.contains("relay.max_retry_s: 300"))
        #expect(output.contains("kafka.properties.sasl.password: <redacted>"))
        #expect(!output.contains("s3cret"))
    }

    @Test("schema prints a topic's JSON Schema by its default name, its configuration key or its configured name; lists the topics; an unknown topic exits 2 naming them")
    func schemaCommand() throws {
        for schema in RecordSchema.allCases {
            for name in [schema.topic, schema.configurationKey] {
                let (status, output) = try runRelay(["schema", name])
                #expect(status == 0 && output == schema.text, "schema \(name): exit \(status)\n\(output.prefix(300))")
            }
        }
        let fixture = try ConfigFixture()
        let file = try fixture.write(fixture.validYAML)
        let renamed = try runRelay(["schema", "--config", file, "team.notifications"], environment: ["APNS_RELAY_KAFKA_TOPICS_EVENTS": "team.notifications"])
        #expect(renamed.status == 0 && renamed.output == RecordSchema.events.text, "\(renamed.output.prefix(300))")
        let list = try runRelay(["schema"])
        #expect(list.status == 0 && list.output == RecordSchema.allCases.map { "\($0.topic)\n" }.joined(), "\(list.output)")
        let unknown = try runRelay(["schema", "push.event"])
        #expect(unknown.status == 2 && unknown.output.contains("no schema for topic \"push.event\"") && unknown.output.contains("push.badge-state"),
                "exit \(unknown.status): \(unknown.output)")
    }

    @Test("a bad or missing key exits 2 naming it, without echoing secrets")
    func checkConfigErrors() throws {
        let fixture = try ConfigFixture()
        let file = try fixture.write(fixture.validYAML)
        let bad = try runRelay(["check-config", "--config", file], environment: ["APNS_RELAY_RELAY_MAX_ATTEMPTS": "many"])
        #expect(bad.status == 2)
        #expect(bad.output.contains("relay.max_attempts"))
        #expect(!bad.output.contains("s3cret"))

        let missing = try runRelay(["check-config"])
        #expect(missing.status == 2)
        #expect(missing.output.contains("kafka.brokers"))

        let usage = try runRelay(["check-config", "--no-such-flag"])
        #expect(usage.status == 2)
    }

    @Test("run: each bad or missing key exits 2 before anything starts, naming the key and what is expected",
          arguments: 0..<ConfigFixture.badValues.count)
    func runRefusesBadKey(_ index: Int) throws {
        let (environment, key, problem) = ConfigFixture.badValues[index]
        let fixture = try ConfigFixture()
        let file = try fixture.write(fixture.validYAML)
        let (status, output) = try runRelay(["run", "--config", file], environment: environment)
        #expect(status == 2, "\(output)")
        #expect(output.contains(key) && output.contains(problem), "\(output)")
        #expect(!output.contains("s3cret"))
    }

    @Test("run: a missing required key exits 2 naming it")
    func runRefusesMissingKey() throws {
        let fixture = try ConfigFixture()
        let noBrokers = try fixture.write("apns:\n  auth:\n    key_file: \(fixture.keyFile)\n    key_id: ABC123DEFG\n    team_id: TEAM123456\n")
        let withoutBrokers = try runRelay(["run", "--config", noBrokers])
        #expect(withoutBrokers.status == 2 && withoutBrokers.output.contains("kafka.brokers"), "\(withoutBrokers.output)")
        let noAuth = try fixture.write("kafka:\n  brokers: embedded\n")
        let withoutAuth = try runRelay(["run", "--config", noAuth])
        #expect(withoutAuth.status == 2 && withoutAuth.output.contains("apns.auth"), "\(withoutAuth.output)")
    }

    @Test("demo runs the relay on the embedded cluster and simulator, reports devices, results, failed tokens, dead letters; exits 0")
    func demo() throws {
        let (status, output) = try runRelay(["demo"])
        #expect(status == 0, "\(output)")
        // The flicker burst ends at 10 and never goes down on alice's iPhone.
        let iPhone = output.split(separator: "\n").first { $0.contains("alice's iPhone") }.map(String.init) ?? ""
        #expect(iPhone.hasSuffix(" (from production)"), "\(iPhone)")
        let badges = iPhone.replacingOccurrences(of: " (from production)", with: "").components(separatedBy: " -> ")
            .compactMap { Int($0.split(separator: " ").last ?? "") }
        #expect(badges.last == 10, "\(iPhone)")
        #expect(badges == badges.sorted(), "\(iPhone)")
        #expect(output.split(separator: "\n").contains { $0.contains("carol's old iPhone (uninstalled)") && $0.hasSuffix("(nothing)") })
        // The development build's device got its notification from the sandbox host, and is not reported dead.
        let sandboxDevice = output.split(separator: "\n").first { $0.contains("dave's iPhone (development build)") }.map(String.init) ?? ""
        #expect(sandboxDevice.hasSuffix("1 (from sandbox)"), "\(sandboxDevice)")
        #expect(!output.contains("BadDeviceToken"))
        #expect(output.contains("\"reason\":\"Unregistered\""))
        #expect(output.contains("x-error: badge.increment"))
        #expect(output.contains("duplicate"))
        #expect(output.contains("invalid"))
    }
}
