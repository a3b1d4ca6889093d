package import APNs
import APNsNGHTTP2
package import APNsSimulator
package import Crypto
import Foundation
import Metrics
package import MetricsTestKit
package import NIOCore
import NIOPosix
import Synchronization

/// Builds tokens, notifications, a simulator and a supervisor for the in-process tests of the APNs client and of
/// the simulator.
package enum Harness {
    package static let topic = "com.example.app"

    package static func token(_ index: Int) -> String {
        let hex = String(index, radix: 16)
        return String(repeating: "0", count: 64 - hex.count) + hex
    }

    package static func notification(token: String, badge: Int = 1, pushType: APNsPushType = .alert, topic: String = topic, expiration: Int64? = nil) throws -> APNsNotification {
        try APNsNotification(
            token: try APNsDeviceToken(hex: token), topic: topic, pushType: pushType,
            priority: pushType == .background ? .conservePower : .immediate, expiration: expiration,
            collapseID: "c-\(badge)",
            payload: Array(#"{"aps":{"badge":\#(badge),"alert":"n\#(badge)"}}"#.utf8))
    }

    /// Sends every notification at once (a notification that could not be built counts as not delivered); returns
    /// how many were delivered.
    package static func deliveredCount(through supervisor: APNsSupervisor, _ notifications: [APNsNotification?]) async -> Int {
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

    /// The HTTP/2 client of the supervisor's connections.
    package enum HTTP2Client: Sendable, CaseIterable {
        /// swift-nio-http2 (`APNsHTTP2ConnectionFactory`), the relay's.
        case nio
        /// The nghttp2 client (`APNsNGHTTP2ConnectionFactory`).
        case nghttp2
    }

    package struct Setup {
        package var simulator: SimulatorOptions
        package var client: HTTP2Client
        package var connections: Int
        package var maxQueued = 50_000
        package var requestTimeout: Duration = .seconds(10)
        package var pingInterval: Duration = .seconds(30)
        package var pingTimeout: Duration = .seconds(10)
        /// TCP + TLS + first SETTINGS budget of a connect.
        package var connectTimeout: Duration = .seconds(10)
        package var maxAttempts = 5
        /// How long a notification is retried and may wait for a connection (`relay.max_retry_s`).
        package var maxRetry: Duration
        package var retryBackoff = Backoff(base: .milliseconds(10), cap: .milliseconds(200))
        package var connectsOnDemand: Bool
        /// When set, connects fail while it is closed: APNs unreachable.
        package var gate: ReachabilityGate?
        /// The supervisor's sleep, when a test needs to see or hold its waits.
        package var sleep: (@Sendable (TimeAmount) async -> Void)?
        package var signingKey = P256.Signing.PrivateKey()
        package var verifyJWT = true
        /// The host the client connects to (and verifies the certificate against); the simulator listens on 127.0.0.1.
        package var endpointHost = "127.0.0.1"
        /// The HTTP proxy connections are tunnelled through, if any.
        package var proxy: APNsProxy?

        package init(
            simulator: SimulatorOptions = SimulatorOptions(), client: HTTP2Client = .nio, connections: Int = 2,
            maxRetry: Duration = .seconds(300), connectsOnDemand: Bool = false, gate: ReachabilityGate? = nil
        ) {
            self.simulator = simulator
            self.client = client
            self.connections = connections
            self.maxRetry = maxRetry
            self.connectsOnDemand = connectsOnDemand
            self.gate = gate
        }
    }

    /// Starts a simulator and a supervisor (token auth unless a client certificate is given), runs `body`,
    /// drains the supervisor and stops the simulator.
    package static func run(
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
            credential = try tokenCredential(setup)
        }
        try await supervise(simulator: simulator, factory: try factory(simulator, setup, credential: credential), setup, body)
    }

    /// The HTTP/2 factory of `setup` for `simulator` (its client, endpoint host and proxy), trusting `caFile` (the
    /// simulator's CA unless given).
    package static func factory(_ simulator: APNsSimulator, _ setup: Setup, credential: APNsCredential, caFile: String? = nil) throws -> any APNsConnectionFactory {
        let configuration = APNsHTTP2ConnectionConfiguration(
            endpoint: APNsEndpoint(host: setup.endpointHost, port: simulator.http2Port),
            credential: credential,
            caFile: caFile ?? simulator.certificates.caPath,
            pingInterval: setup.pingInterval,
            pingTimeout: setup.pingTimeout,
            connectTimeout: setup.connectTimeout,
            proxy: setup.proxy)
        return switch setup.client {
        case .nio: try APNsHTTP2ConnectionFactory(configuration: configuration)
        case .nghttp2: try APNsNGHTTP2ConnectionFactory(configuration: configuration)
        }
    }

    /// Token auth with `setup`'s signing key, as the simulator of ``run(_:loadCertificate:_:)`` expects it.
    package static func tokenCredential(_ setup: Setup) throws -> APNsCredential {
        .token(APNsTokenProvider(signer: try APNsJWTSigner(key: setup.signingKey, keyID: "ABCDE12345", teamID: "TEAM123456")))
    }

    /// Runs a supervisor on `factory` (test timings: quick reconnects and retries) with the supervisor settings of
    /// `setup` around `body`, drains it, and stops the simulator, also when `body` throws.
    package static func supervise(
        simulator: APNsSimulator, factory: any APNsConnectionFactory, _ setup: Setup,
        _ body: (APNsSimulator, APNsSupervisor) async throws -> Void
    ) async throws {
        let configuration = APNsSupervisorConfiguration(
            pool: .init(connections: setup.connections, maxQueued: setup.maxQueued, minimumConnectSpacing: .milliseconds(5),
                        backoff: Backoff(base: .milliseconds(20), cap: .milliseconds(500)), connectsOnDemand: setup.connectsOnDemand),
            retry: APNsRetryPolicy(maxAttempts: setup.maxAttempts, backoff: setup.retryBackoff, maxRetryDuration: setup.maxRetry),
            requestTimeout: setup.requestTimeout)
        let factory: any APNsConnectionFactory = setup.gate.map { GatedFactory(base: factory, gate: $0) } ?? factory
        let supervisor = if let sleep = setup.sleep {
            APNsSupervisor(configuration: configuration, factory: factory, sleep: sleep)
        } else {
            APNsSupervisor(configuration: configuration, factory: factory)
        }
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

/// The process's metrics, read by tests that count what the supervisor reports: bootstrapped once, on first use
/// (nothing else in this process bootstraps the metrics system). Tests read the change over their run.
package enum ProcessMetrics {
    package static let shared: TestMetrics = {
        let metrics = TestMetrics()
        MetricsSystem.bootstrap(metrics)
        return metrics
    }()

    /// The total of the counters `label` with these dimensions so far.
    package static func total(_ label: String, _ dimensions: [(String, String)] = []) -> Int64 {
        shared.counters(label: label, dimensions: dimensions).map(\.totalValue).reduce(0, +)
    }
}

/// A count tests can wait on: they wait for counts, not for time.
package final class WaitableCount: Sendable {
    private struct State {
        var value = 0
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Mutex(State())

    package init() {}

    package var value: Int { state.withLock { $0.value } }

    package func increment() {
        let reached = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.value += 1
            let value = state.value
            defer { state.waiters.removeAll { $0.count <= value } }
            return state.waiters.filter { $0.count <= value }.map(\.continuation)
        }
        for waiter in reached { waiter.resume() }
    }

    /// Returns once the count is at least `count`.
    package func reached(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                if state.value >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if done { continuation.resume() }
        }
    }
}

/// Stands between a supervisor and the simulator: while closed, every connect fails as if APNs were unreachable.
package final class ReachabilityGate: Sendable {
    package struct Unreachable: Error {}

    private let isOpen: Mutex<Bool>
    private let refusals = WaitableCount()

    package init(open: Bool = false) { isOpen = Mutex(open) }

    /// Connects refused so far.
    package var refusedConnects: Int { refusals.value }

    /// From now on connects go through.
    package func open() { isOpen.withLock { $0 = true } }

    /// Returns once `count` connects have been refused (the pool keeps reconnecting while it is closed).
    package func refused(atLeast count: Int) async { await refusals.reached(count) }

    /// Throws while closed.
    package func admit() throws(Unreachable) {
        guard !isOpen.withLock({ $0 }) else { return }
        refusals.increment()
        throw Unreachable()
    }
}

/// A factory whose connects pass through a ``ReachabilityGate``.
package struct GatedFactory: APNsConnectionFactory {
    package let base: any APNsConnectionFactory
    package let gate: ReachabilityGate

    package var tokenProvider: APNsTokenProvider? { base.tokenProvider }

    package func makeConnection(id: APNsConnectionID, delegate: any APNsConnectionDelegate) async throws -> APNsEstablishedConnection {
        try gate.admit()
        return try await base.makeConnection(id: id, delegate: delegate)
    }
}
