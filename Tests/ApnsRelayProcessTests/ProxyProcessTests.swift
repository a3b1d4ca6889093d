import APNsSimulator
import Foundation
import Logging
import Testing
import TestSupport

@Suite("apns-relay run through an HTTP proxy (apns.proxy)", .serialized)
struct ProxyProcessTests {
    static let user = "relay"
    static let password = "Pr0c-Pr0xy-Pa55-Jm2"

    /// Runs the relay until `done` or `timeout`, then stops it with SIGTERM; returns its exit status and log.
    static func run(_ fixture: RelayProcessFixture, credentials: String, logName: String, timeout: Duration, until done: () -> Bool) async throws
        -> (status: Int32, log: String)
    {
        let logPath = "\(fixture.directory)/\(logName)"
        let relay = try startRelay(["run", "--config", fixture.configPath], log: logPath,
                                   environment: ["APNS_RELAY_APNS_PROXY_CREDENTIALS": credentials])
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while !done() && relay.isRunning && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        // Signalled once it handles signals (its "starting" line): before that a signal ends the process outright.
        while relay.isRunning && !((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").contains("starting") {
            try await Task.sleep(for: .milliseconds(20))
        }
        kill(relay.processIdentifier, SIGTERM)
        while relay.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        return (relay.terminationStatus, (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "")
    }

    @Test("run delivers through tinyproxy with Basic auth from the secret env variable; a wrong password is a clear refusal (tinyproxy: 401); no log shows a password")
    func runThroughProxy() async throws {
        let proxy = try TinyProxy(.init(connectPorts: [], basicAuth: (Self.user, Self.password)))
        defer { proxy.stop() }
        var logger = Logger(label: "proxy-run-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(relayLines: "  http_port: 0\n  shutdown_timeout_s: 10\n")
        let simulator = fixture.simulator
        let config = try String(contentsOfFile: fixture.configPath, encoding: .utf8)
            .replacingOccurrences(of: "apns:\n", with: "apns:\n  proxy: \(proxy.url)\n")
            + "log:\n  level: trace\n"
        try config.write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        try await fixture.produceUsers(5, eventsPerUser: 2, logger: logger)
        let basic = Data("\(Self.user):\(Self.password)".utf8).base64EncodedString()

        let (status, log) = try await Self.run(fixture, credentials: "\(Self.user):\(Self.password)", logName: "run.log", timeout: .seconds(60)) {
            simulator.deliveryCount >= 10
        }
        #expect(status == 0, "\(log.suffix(2_000))")
        #expect(simulator.deliveryCount == 10, "\(log.suffix(2_000))")
        #expect(proxy.log.contains("CONNECT 127.0.0.1:\(simulator.http2Port)"), "the relay went through the proxy")
        #expect(log.contains("apns.proxy=\(proxy.url)") && log.contains("apns.proxy_credentials=<redacted>"), "the configuration dump")
        #expect(!log.contains(Self.password) && !log.contains(basic), "no password in the trace-level log")

        let wrongPassword = "Wr0ng-Pr0c-Pa55-Tc8"
        let (wrongStatus, wrongLog) = try await Self.run(fixture, credentials: "\(Self.user):\(wrongPassword)", logName: "wrong.log", timeout: .seconds(30)) {
            ((try? String(contentsOfFile: "\(fixture.directory)/wrong.log", encoding: .utf8)) ?? "").contains("APNs connect failed")
        }
        #expect(wrongStatus == 0)
        let failure = wrongLog.split(separator: "\n").first { $0.contains("APNs connect failed") }.map(String.init) ?? ""
        #expect(failure.contains("proxy 127.0.0.1:\(proxy.port) refused CONNECT") && failure.contains("401 Unauthorized"), "\(failure)")
        #expect(!wrongLog.contains(wrongPassword) && !wrongLog.contains(Self.password))

        let checked = try runRelay(["check-config", "--config", fixture.configPath],
                                   environment: ["APNS_RELAY_APNS_PROXY_CREDENTIALS": "\(Self.user):\(Self.password)"])
        #expect(checked.status == 0, "\(checked.output)")
        #expect(checked.output.contains("apns.proxy_credentials: <redacted>") && !checked.output.contains(Self.password))
        let inURL = try runRelay(["check-config", "--config", fixture.configPath],
                                 environment: ["APNS_RELAY_APNS_PROXY": "http://\(Self.user):\(Self.password)@127.0.0.1:\(proxy.port)"])
        #expect(inURL.status == 2 && inURL.output.contains("apns.proxy") && !inURL.output.contains(Self.password), "\(inURL.output)")
        await fixture.stop()
    }
}
