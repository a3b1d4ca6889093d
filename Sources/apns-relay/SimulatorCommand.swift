import APNs
import APNsSimulator
import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle

/// `apns-relay simulator`: the APNs simulator as a standalone process on 127.0.0.1.
struct SimulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulator",
        abstract: "Run the APNs simulator (HTTP/2 over TLS with its own CA) on 127.0.0.1 until SIGTERM/SIGINT.",
        discussion: """
            One simulator plays one APNs host. To serve both environments, point apns.production_endpoint and \
            apns.sandbox_endpoint at it; to tell them apart, run a second simulator (another port and --cert-dir) as the \
            sandbox host (--environment sandbox), give both the same --production-tokens and --sandbox-tokens (each \
            refuses the other environment's tokens with 400 BadDeviceToken, as Apple's hosts do), and trust both CAs in \
            apns.ca_file.
            """
    )

    @Option(name: .long, help: "HTTP/2 port (0 picks a free one).") var http2Port: Int = 2197
    @Option(name: .long, help: "Legacy binary gateway port (0 picks a free one; client certificate required).") var binaryPort: Int?
    @Option(name: .long, help: "Legacy feedback service port (0 picks a free one; client certificate required).") var feedbackPort: Int?
    @Option(name: .long, help: "Directory for ca.pem, client.pem and client.key.") var certDir: String = "./simulator-certs"
    @Option(name: .long, help: "PEM public key that JWTs must be signed with.") var jwtPublicKey: String?
    @Option(name: .long, help: "Tokens (hex, one a line) that answer 410 Unregistered (binary: not shown, reported by feedback).") var deadTokens: String?
    @Option(name: .long, help: "Tokens (hex, one a line) that answer 400 BadDeviceToken (binary: error 8).") var badTokens: String?
    @Option(name: .long, help: "The APNs environment this host plays, production or sandbox: the sandbox answers device requests with an apns-unique-id header, and each refuses the other environment's tokens (--production-tokens, --sandbox-tokens).")
    var environment: String?
    @Option(name: .long, help: "Tokens (hex, one a line) of production builds: a host playing the sandbox answers them 400 BadDeviceToken.") var productionTokens: String?
    @Option(name: .long, help: "Tokens (hex, one a line) of development builds: a host playing production answers them 400 BadDeviceToken.") var sandboxTokens: String?
    @Option(name: .long, help: "SETTINGS_MAX_CONCURRENT_STREAMS.") var maxStreams: Int?
    @Option(name: .long, help: "Append one JSON line per accepted notification or broadcast to this file (the process keeps none in memory).") var deviceLog: String?
    @Option(name: .long, help: ArgumentHelp(
        "A team's signing key, KEY_ID:TEAM_ID:PEM_FILE:BUNDLE_ID[,BUNDLE_ID...][:environment=production|sandbox][:topics=BUNDLE_ID[,...]] (repeatable): JWTs are checked against the key their kid names, must come from its team and may push only to its bundle ids; a key limited to the other environment is answered 403 BadEnvironmentKeyIdInToken, one limited to other topics 403 UnrelatedKeyIdInToken.",
        valueName: "spec")) var providerKey: [String] = []
    @Option(name: .long, help: ArgumentHelp(
        "An app with a client certificate of its own (repeatable): writes DIR/client-BUNDLE_ID.pem/.key (CN = the bundle id), and a connection authenticated by it may push only to that app. Turns on certificate auth on the HTTP/2 port: every connection then needs a client certificate from the simulator's CA.",
        valueName: "bundle-id")) var appCertificate: [String] = []
    @Option(name: .long, help: "Serve the broadcast channel management API (Apple's api-manage-broadcast host) on this port (0 picks a free one).")
    var broadcastManagementPort: Int?

    func validate() throws {
        for (flag, port) in [("--http2-port", http2Port), ("--binary-port", binaryPort), ("--feedback-port", feedbackPort),
                             ("--broadcast-management-port", broadcastManagementPort)] {
            if let port, !(0...65_535).contains(port) { throw ValidationError("\(flag) must be 0...65535, not \(port)") }
        }
        if let environment, APNsEnvironment(rawValue: environment) == nil {
            throw ValidationError("--environment must be production or sandbox, not '\(environment)'")
        }
    }

    func run() async throws {
        var options = try SimulatorOptions(
            http2Port: http2Port, binaryPort: binaryPort, feedbackPort: feedbackPort, certDirectory: certDir, jwtPublicKeyFile: jwtPublicKey,
            deadTokensFile: deadTokens, badTokensFile: badTokens, maxStreams: maxStreams, deviceLogPath: deviceLog,
            providerKeys: providerKey, broadcastManagementPort: broadcastManagementPort,
            environment: environment.flatMap(APNsEnvironment.init(rawValue:)), productionTokensFile: productionTokens, sandboxTokensFile: sandboxTokens
        )
        // Nothing reads the history of a simulator in its own process (the device log is its record).
        options.deliveryHistory = 0
        options.clientCertificateTopics = appCertificate
        if !appCertificate.isEmpty { options.requireClientCertificate = true }
        let simulator = try await APNsSimulator.start(options)
        // Unbuffered, so a parent process reading our output learns the port at once.
        var banner = "APNs simulator on 127.0.0.1:\(simulator.http2Port) (HTTP/2\(environment.map { ", \($0)" } ?? ""))"
        if let port = simulator.binaryGatewayPort { banner += ", 127.0.0.1:\(port) (binary)" }
        if let port = simulator.feedbackServicePort { banner += ", 127.0.0.1:\(port) (feedback)" }
        if let port = simulator.broadcastManagementPort { banner += ", 127.0.0.1:\(port) (channel management)" }
        let service = SimulatorService(simulator: simulator, banner: "\(banner); CA in \(certDir)/ca.pem\n")
        let group = ServiceGroup(services: [service], gracefulShutdownSignals: [.sigterm, .sigint], logger: Logger(label: "apns-simulator"))
        try await group.run()
    }
}

struct SimulatorService: Service {
    let simulator: APNsSimulator
    let banner: String

    func run() async throws {
        // The group traps the stop signals from here: one that came before is sent to it again.
        StopSignals.handOverToServiceGroup()
        // Announced only once the group traps SIGTERM/SIGINT: a parent that stops us as soon as it
        // reads the banner gets a graceful stop (exit 0), not death by signal.
        FileHandle.standardOutput.write(Data(banner.utf8))
        try? await gracefulShutdown()
        await simulator.shutdown()
    }
}
