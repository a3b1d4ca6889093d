import Foundation
import Testing

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
        #expect(output.contains("kafka.properties.sasl.password: <redacted>"))
        #expect(!output.contains("s3cret"))
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

    @Test("demo round-trips sample events through the embedded cluster and exits 0")
    func demo() throws {
        let (status, output) = try runRelay(["demo"])
        #expect(status == 0, "\(output)")
        #expect(output.contains("round trip complete: 5 of 5"))
    }
}
