import APNs
import APNsSimulator
import Crypto
import Foundation
import NIOCore
import NIOPosix

/// Builds tokens, notifications, a simulator and a supervisor for in-process tests.
enum Harness {
    static let topic = "com.example.app"

    static func token(_ index: Int) -> String {
        let hex = String(index, radix: 16)
        return String(repeating: "0", count: 64 - hex.count) + hex
    }

    static func notification(token: String, badge: Int = 1, pushType: APNsPushType = .alert, topic: String = topic) throws -> APNsNotification {
        try APNsNotification(
            token: try APNsDeviceToken(hex: token), topic: topic, pushType: pushType,
            priority: pushType == .background ? .conservePower : .immediate,
            collapseID: "c-\(badge)",
            payload: Array(#"{"aps":{"badge":\#(badge),"alert":"n\#(badge)"}}"#.utf8))
    }

    /// Sends every notification at once (a notification that could not be built counts as not delivered); returns
    /// how many were delivered.
    static func deliveredCount(through supervisor: APNsSupervisor, _ notifications: [APNsNotification?]) async -> Int {
        await withTaskGroup(of: Bool.self) { group in
            for notification in notifications {
                group.addTask {
                    guard let notification else { return false }
                    return await supervisor.send(notification).classification == .delivered
                }
            }
            var count = 0
            for await delivered in group where delivered { count += 1 }
            return count
        }
    }

    struct Setup {
        var simulator = SimulatorOptions()
        var connections = 2
        var maxQueued = 50_000
        var requestTimeout: TimeAmount = .seconds(10)
        var pingInterval: TimeAmount = .seconds(30)
        var pingTimeout: TimeAmount = .seconds(10)
        var maxAttempts = 5
        var signingKey = P256.Signing.PrivateKey()
        var verifyJWT = true
    }

    /// Starts a simulator and a supervisor (token auth unless a client certificate is given), runs `body`,
    /// drains the supervisor and stops the simulator.
    static func run(
        _ setup: Setup,
        loadCertificate: ((APNsSimulator) throws -> APNsClientCertificate)? = nil,
        _ body: (APNsSimulator, APNsSupervisor) async throws -> Void
    ) async throws {
        var options = setup.simulator
        if setup.verifyJWT && loadCertificate == nil {
            options.jwtPublicKeyPEM = setup.signingKey.publicKey.pemRepresentation
            options.jwtKeyID = "ABCDE12345"
        }
        let simulator = try await APNsSimulator.start(options)
        let credential: APNsCredential
        if let loadCertificate {
            do {
                credential = .certificate(try loadCertificate(simulator))
            } catch {
                await simulator.shutdown()
                throw error
            }
        } else {
            let signer = try APNsJWTSigner(key: setup.signingKey, keyID: "ABCDE12345", teamID: "TEAM123456")
            credential = .token(APNsTokenProvider(signer: signer))
        }
        let factory = try APNsHTTP2ConnectionFactory(configuration: APNsHTTP2ConnectionConfiguration(
            endpoint: APNsEndpoint(host: "127.0.0.1", port: simulator.http2Port),
            credential: credential,
            caFile: simulator.certificates.caPath,
            pingInterval: setup.pingInterval,
            pingTimeout: setup.pingTimeout))
        try await supervise(simulator: simulator, factory: factory, connections: setup.connections, maxQueued: setup.maxQueued,
                            maxAttempts: setup.maxAttempts, requestTimeout: setup.requestTimeout, body)
    }

    /// Runs a supervisor on `factory` (test timings: quick reconnects and retries) around `body`, drains it, and
    /// stops the simulator, also when `body` throws.
    static func supervise(
        simulator: APNsSimulator, factory: any APNsConnectionFactory, connections: Int, maxQueued: Int = 50_000, maxAttempts: Int = 5,
        requestTimeout: TimeAmount = .seconds(10), _ body: (APNsSimulator, APNsSupervisor) async throws -> Void
    ) async throws {
        let supervisor = APNsSupervisor(
            configuration: APNsSupervisorConfiguration(
                pool: .init(connections: connections, maxQueued: maxQueued, minimumConnectSpacing: .milliseconds(5),
                            backoff: APNsBackoff(base: .milliseconds(20), cap: .milliseconds(500))),
                retry: APNsRetryPolicy(maxAttempts: maxAttempts, backoff: APNsBackoff(base: .milliseconds(10), cap: .milliseconds(200))),
                requestTimeout: requestTimeout),
            factory: factory)
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await supervisor.run() }
                do {
                    try await body(simulator, supervisor)
                } catch {
                    await supervisor.shutdown(gracePeriod: .seconds(1))
                    throw error
                }
                await supervisor.shutdown(gracePeriod: .seconds(5))
                try await group.waitForAll()
            }
        } catch {
            await simulator.shutdown()
            throw error
        }
        await simulator.shutdown()
    }
}
