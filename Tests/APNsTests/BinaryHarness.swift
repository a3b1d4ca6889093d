import APNs
import APNsSimulator
import APNsTestSupport
import Testing

/// Starts a simulator with the binary gateway and feedback service, and a supervisor on binary connections.
enum BinaryHarness {
    struct Setup {
        var simulator = SimulatorOptions()
        var connections = 1
        var format = APNsBinaryFormat.framed
        var window = APNsBinaryWindowConfiguration(capacity: 1_000, quietPeriod: .milliseconds(300), confirmAfterWrites: 1_000)
        var maxAttempts = 5
        /// The host the client connects to; the simulator listens on 127.0.0.1.
        var endpointHost = "127.0.0.1"
        /// The HTTP proxy connections are tunnelled through, if any.
        var proxy: APNsProxy?
    }

    static func clientCertificate(_ simulator: APNsSimulator) throws -> APNsClientCertificate {
        try APNsClientCertificate(certificatePEMFile: simulator.certificates.clientCertificatePath, privateKeyPEMFile: simulator.certificates.clientKeyPath)
    }

    static func run(_ setup: Setup, _ body: (APNsSimulator, APNsSupervisor) async throws -> Void) async throws {
        var options = setup.simulator
        options.binaryPort = 0
        options.feedbackPort = 0
        let simulator = try await APNsSimulator.start(options)
        let factory: APNsBinaryConnectionFactory
        do {
            factory = try APNsBinaryConnectionFactory(configuration: APNsBinaryConnectionConfiguration(
                endpoint: APNsEndpoint(host: setup.endpointHost, port: try #require(simulator.binaryGatewayPort)),
                certificate: try clientCertificate(simulator), caFile: simulator.certificates.caPath,
                format: setup.format, window: setup.window, proxy: setup.proxy))
        } catch {
            await simulator.shutdown()
            throw error
        }
        var supervision = Harness.Setup()
        supervision.connections = setup.connections
        supervision.maxAttempts = setup.maxAttempts
        try await Harness.supervise(simulator: simulator, factory: factory, supervision, body)
    }

    /// Sends notifications for tokens 1...count at once and returns the outcomes by token.
    static func sendBatch(_ supervisor: APNsSupervisor, count: Int) async throws -> [String: APNsOutcome] {
        let notifications = try (1...count).map { try Harness.notification(token: Harness.token($0), badge: $0) }
        return await withTaskGroup(of: (String, APNsOutcome).self) { group in
            for notification in notifications {
                group.addTask { (notification.token?.hex ?? "", await supervisor.send(notification)) }
            }
            var outcomes: [String: APNsOutcome] = [:]
            for await (token, outcome) in group { outcomes[token] = outcome }
            return outcomes
        }
    }
}
