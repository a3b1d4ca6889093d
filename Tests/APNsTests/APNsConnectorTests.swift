import APNs
import APNsSimulator
import APNsTestSupport
import Foundation
import Metrics
import MetricsTestKit
import NIOCore
import Testing
import TestSupport

/// `apns.proxy`: every APNs connection tunnelled through a real HTTP CONNECT proxy (tinyproxy), TLS still
/// verified end to end against the APNs host.
@Suite("apns.proxy: APNs connections through tinyproxy", .serialized)
struct APNsConnectorTests {
    static let user = "relay"
    static let password = "Pr0xy-Pa55-Zk4w"

    /// A setup whose connections go through `proxy` to `localhost` (a name in the simulator's certificate, so
    /// the name checked is the APNs host's, not the proxy's address).
    static func setup(through proxy: TinyProxy, credentials: APNsProxyCredentials? = nil, client: Harness.HTTP2Client = .nio) -> Harness.Setup {
        var setup = Harness.Setup(client: client)
        setup.endpointHost = "localhost"
        setup.proxy = APNsProxy(endpoint: APNsEndpoint(host: "127.0.0.1", port: proxy.port), credentials: credentials)
        return setup
    }

    static func notifications(_ range: ClosedRange<Int>) -> [APNsNotification?] {
        range.map { try? Harness.notification(token: Harness.token($0), badge: $0) }
    }

    /// The error of one connect through `setup`'s proxy, or `nil` when it connected.
    static func connectError(_ simulator: APNsSimulator, _ setup: Harness.Setup, caFile: String? = nil) async throws -> (any Error)? {
        let factory = try Harness.factory(simulator, setup, credential: try Harness.tokenCredential(setup), caFile: caFile)
        do {
            let established = try await factory.makeConnection(id: APNsConnectionID(1), delegate: NoDelegate())
            await established.connection.close(graceful: false)
            return nil
        } catch {
            return error
        }
    }

    /// Sends one notification through a supervisor whose connects keep failing, waiting `maxRetry` for a
    /// connection: the outcome is `noConnection`, and the failed connects are counted under `dimensions`.
    static func expectConnectsRefused(_ setup: Harness.Setup, counted dimensions: [(String, String)]) async throws {
        var setup = setup
        setup.maxRetry = .milliseconds(800)
        let before = ProcessMetrics.total("apns_proxy_connect_failures_total", dimensions)
        try await Harness.run(setup) { simulator, supervisor in
            let outcome = await supervisor.send(try Harness.notification(token: Harness.token(7)))
            #expect(outcome.classification != .delivered)
            #expect(outcome.lastAttempt == .failure(.noConnection))
            #expect(simulator.requestCount == 0, "nothing reached APNs")
        }
        let counted = ProcessMetrics.total("apns_proxy_connect_failures_total", dimensions) - before
        #expect(counted >= 2, "the refused connect is counted, and retried with backoff (counted \(counted))")
    }

    @Test("HTTP/2 notifications are delivered through the proxy, which saw the CONNECT to the APNs host", arguments: Harness.HTTP2Client.allCases)
    func http2ThroughProxy(client: Harness.HTTP2Client) async throws {
        let proxy = try TinyProxy(.init(connectPorts: []))
        defer { proxy.stop() }
        try await Harness.run(Self.setup(through: proxy, client: client)) { simulator, supervisor in
            let delivered = await Harness.deliveredCount(through: supervisor, Self.notifications(1...50))
            #expect(delivered == 50)
            #expect(simulator.deliveryCount == 50)
            #expect(proxy.log.contains("CONNECT localhost:\(simulator.http2Port)"), "the proxy carried it: \(proxy.log.suffix(1_000))")
        }
    }

    @Test("broadcast channel management goes through the proxy too: create, list, delete on the management host")
    func channelManagementThroughProxy() async throws {
        let proxy = try TinyProxy(.init(connectPorts: []))
        defer { proxy.stop() }
        var setup = Self.setup(through: proxy)
        setup.simulator.broadcastManagementPort = 0
        try await Harness.run(setup) { simulator, _ in
            let port = try #require(simulator.broadcastManagementPort)
            let factory = try APNsHTTP2ConnectionFactory(configuration: APNsHTTP2ConnectionConfiguration(
                endpoint: APNsEndpoint(host: "localhost", port: port), credential: try Harness.tokenCredential(setup),
                caFile: simulator.certificates.caPath, proxy: setup.proxy))
            let manager = APNsChannelManager(factory: factory)
            let created = try await manager.create(bundleID: Harness.topic, storagePolicy: .noStorage)
            #expect(try await manager.list(bundleID: Harness.topic) == [created])
            try await manager.delete(bundleID: Harness.topic, channelID: created)
            await manager.close()
            #expect(proxy.log.contains("CONNECT localhost:\(port)"), "the proxy carried it: \(proxy.log.suffix(1_000))")
        }
    }

    @Test("through the proxy, a server certificate from a CA the client does not trust is still refused; nothing is sent", arguments: Harness.HTTP2Client.allCases)
    func untrustedCertificateThroughProxy(client: Harness.HTTP2Client) async throws {
        let proxy = try TinyProxy(.init(connectPorts: []))
        defer { proxy.stop() }
        let setup = Self.setup(through: proxy, client: client)
        var options = SimulatorOptions()
        options.jwtPublicKeyPEM = setup.signingKey.publicKey.pemRepresentation
        let simulator = try await APNsSimulator.start(options)
        let other = try SimulatorCertificates.generate(in: scratchPath("apns-other-ca"))
        let error = try await Self.connectError(simulator, setup, caFile: other.caPath)
        let trusted = try await Self.connectError(simulator, setup)
        let requests = simulator.requestCount
        let port = simulator.http2Port
        await simulator.shutdown()
        let description = error.map { "\($0)" } ?? "(connected)"
        #expect(description.contains("CERTIFICATE_VERIFY_FAILED"), "a TLS error from the APNs host, got \(description)")
        #expect(!(error is APNsProxyError), "the tunnel was up; TLS refused the server")
        #expect(trusted == nil, "the same path with the right CA connects: \(String(describing: trusted))")
        #expect(requests == 0)
        #expect(proxy.log.contains("CONNECT localhost:\(port)"))
    }

    @Test("Basic auth: the right credentials deliver; wrong or missing ones are refused (401/407), a clear connect error, counted and retried")
    func basicAuthentication() async throws {
        let proxy = try TinyProxy(.init(connectPorts: [], basicAuth: (Self.user, Self.password)))
        defer { proxy.stop() }
        let right = APNsProxyCredentials(user: Self.user, password: Self.password)
        try await Harness.run(Self.setup(through: proxy, credentials: right)) { simulator, supervisor in
            #expect(await Harness.deliveredCount(through: supervisor, Self.notifications(1...10)) == 10)
            #expect(simulator.deliveryCount == 10)
        }

        let wrongPassword = "Wr0ng-Pa55-Qx7"
        // tinyproxy answers a missing Proxy-Authorization 407, and a wrong one 401: either way the error says which.
        let cases: [(credentials: APNsProxyCredentials?, status: Int)] = [(APNsProxyCredentials(user: Self.user, password: wrongPassword), 401), (nil, 407)]
        for (credentials, expectedStatus) in cases {
            let setup = Self.setup(through: proxy, credentials: credentials)
            let simulator = try await APNsSimulator.start(SimulatorOptions())
            let error = try await Self.connectError(simulator, setup)
            await simulator.shutdown()
            guard case .refused(_, _, let status, let statusLine) = error as? APNsProxyError else {
                Issue.record("expected a refusal, got \(String(describing: error))")
                continue
            }
            #expect(status == expectedStatus && statusLine.contains("\(expectedStatus)"))
            let description = "\(error.map { "\($0)" } ?? "")"
            #expect(description.contains("proxy 127.0.0.1:\(proxy.port) refused CONNECT localhost:") && description.contains("\(expectedStatus)"), "\(description)")
            #expect(!description.contains(Self.password) && !description.contains(wrongPassword), "no password in the error")

            try await Self.expectConnectsRefused(setup, counted: [("reason", "refused"), ("status", "\(expectedStatus)")])
        }
    }

    @Test("a proxy that refuses CONNECT to the APNs port (403): a connect error naming the status, counted and retried")
    func refusedConnect() async throws {
        // Port 1 only: any other target is answered 403.
        let proxy = try TinyProxy(.init(connectPorts: [1]))
        defer { proxy.stop() }
        let simulator = try await APNsSimulator.start(SimulatorOptions())
        let error = try await Self.connectError(simulator, Self.setup(through: proxy))
        await simulator.shutdown()
        let description = error.map { "\($0)" } ?? "(connected)"
        #expect(description.contains("refused CONNECT") && description.contains("403"), "\(description)")

        try await Self.expectConnectsRefused(Self.setup(through: proxy), counted: [("reason", "refused"), ("status", "403")])
    }

    @Test("a proxy that cannot be reached is a connect failure counted as unreachable")
    func unreachableProxy() async throws {
        let proxy = try TinyProxy(.init(connectPorts: []))
        proxy.stop()
        let simulator = try await APNsSimulator.start(SimulatorOptions())
        let error = try await Self.connectError(simulator, Self.setup(through: proxy))
        await simulator.shutdown()
        guard case .unreachable = error as? APNsProxyError else {
            Issue.record("expected the proxy unreachable, got \(String(describing: error))")
            return
        }
        try await Self.expectConnectsRefused(Self.setup(through: proxy), counted: [("reason", "unreachable")])
    }

    @Test("the proxy killed (SIGKILL) with notifications in flight, then started again on its port: every one delivered, none failed")
    func proxyCrashesMidStream() async throws {
        let proxy = try TinyProxy(.init(connectPorts: []))
        defer { proxy.stop() }
        var setup = Self.setup(through: proxy)
        setup.maxRetry = .seconds(60)
        let total = 200
        try await Harness.run(setup) { simulator, supervisor in
            // Answers are held back, so that every request is on the wire when the proxy dies.
            simulator.addFault(.delay(.milliseconds(300)), count: nil)
            let outcomes = try await withThrowingTaskGroup(of: (String, APNsOutcome).self) { group in
                for notification in Self.notifications(1...total) {
                    guard let notification else { continue }
                    group.addTask { (notification.token?.hex ?? "", await supervisor.send(notification)) }
                }
                let deadline = ContinuousClock.now.advanced(by: .seconds(30))
                while simulator.requestCount < total / 2 && ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(5))
                }
                proxy.crash()
                let answeredAtCrash = simulator.deliveryCount
                #expect(answeredAtCrash < total, "notifications were in flight when the proxy died")
                try await Task.sleep(for: .milliseconds(200))  // reconnects fail meanwhile: the proxy is down
                try proxy.restart()
                var outcomes: [String: APNsOutcome] = [:]
                for try await (token, outcome) in group { outcomes[token] = outcome }
                return outcomes
            }
            #expect(outcomes.count == total)
            let notDelivered = outcomes.filter { $0.value.classification != .delivered }
            #expect(notDelivered.isEmpty, "\(notDelivered.count) not delivered, e.g. \(notDelivered.first.map { "\($0.value)" } ?? "")")
            #expect(Set(simulator.allDeliveries().map(\.token)).count == total, "every device got its notification")
            #expect(proxy.log.components(separatedBy: "CONNECT localhost:\(simulator.http2Port)").count > 2, "connections before and after the crash went through the proxy")
        }
    }

    @Test("the legacy binary gateway and the feedback service through the proxy")
    func legacyInterfacesThroughProxy() async throws {
        let proxy = try TinyProxy(.init(connectPorts: [], basicAuth: (Self.user, Self.password)))
        defer { proxy.stop() }
        let apnsProxy = APNsProxy(endpoint: APNsEndpoint(host: "127.0.0.1", port: proxy.port),
                                  credentials: APNsProxyCredentials(user: Self.user, password: Self.password))
        var setup = BinaryHarness.Setup()
        setup.endpointHost = "localhost"
        setup.proxy = apnsProxy
        setup.simulator.deadTokens = [Harness.token(99): 1_700_000_000_000]
        try await BinaryHarness.run(setup) { simulator, supervisor in
            let outcomes = try await BinaryHarness.sendBatch(supervisor, count: 20)
            #expect(outcomes.count == 20 && outcomes.values.allSatisfy { $0.classification == .delivered })
            #expect((1...20).allSatisfy { simulator.deliveries(for: Harness.token($0)).map(\.badge) == [$0] })
            let gatewayPort = try #require(simulator.binaryGatewayPort)
            #expect(proxy.log.contains("CONNECT localhost:\(gatewayPort)"))

            let feedbackPort = try #require(simulator.feedbackServicePort)
            let client = try APNsFeedbackClient(configuration: APNsFeedbackConfiguration(
                endpoint: APNsEndpoint(host: "localhost", port: feedbackPort),
                certificate: try BinaryHarness.clientCertificate(simulator), caFile: simulator.certificates.caPath, proxy: apnsProxy))
            let poll = try await client.poll()
            #expect(poll.tuples.map(\.tokenHex) == [Harness.token(99)])
            #expect(proxy.log.contains("CONNECT localhost:\(feedbackPort)"))

            // Without the credentials the feedback poll fails with the proxy's 407.
            var refused = apnsProxy
            refused.credentials = nil
            let unauthenticated = try APNsFeedbackClient(configuration: APNsFeedbackConfiguration(
                endpoint: APNsEndpoint(host: "localhost", port: feedbackPort),
                certificate: try BinaryHarness.clientCertificate(simulator), caFile: simulator.certificates.caPath, proxy: refused))
            await #expect { try await unauthenticated.poll() } throws: { error in
                guard case .refused(_, _, 407, _) = error as? APNsProxyError else { return false }
                return true
            }
        }
    }
}

/// A delegate for a connection that is only opened and closed.
private struct NoDelegate: APNsConnectionDelegate {
    func connection(_ id: APNsConnectionID, maxConcurrentStreamsChanged limit: Int) {}
    func connectionGoingAway(_ id: APNsConnectionID) {}
    func connectionClosed(_ id: APNsConnectionID) {}
}
