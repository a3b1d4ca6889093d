import APNs
import APNsNGHTTP2
import APNsSimulator
import APNsTestSupport
import Crypto
import Foundation
import Logging
import NIOCore
import Synchronization
import Testing
import TestSupport

/// The client always verifies APNs' certificate: a server signed by a CA it does not trust, or one
/// whose certificate names another host, is refused during the handshake and nothing is sent.
@Suite("TLS server verification", .serialized)
struct APNsTLSTests {
    /// Connects to the simulator through `endpoint` trusting `caFile`; returns the connect error, the
    /// outcome of one send through a supervisor, and what the supervisor logged.
    static func attempt(
        client: Harness.HTTP2Client, simulatorHost: String = "127.0.0.1", endpointHost: String, trust caFile: (APNsSimulator) throws -> String
    ) async throws
        -> (connectError: (any Error)?, outcome: APNsOutcome, requests: Int, log: [String])
    {
        let signingKey = P256.Signing.PrivateKey()
        var options = SimulatorOptions()
        options.host = simulatorHost
        options.jwtPublicKeyPEM = signingKey.publicKey.pemRepresentation
        let simulator = try await APNsSimulator.start(options)
        let capture = CapturedLog()
        do {
            let credential = APNsCredential.token(APNsTokenProvider(signer: try APNsJWTSigner(key: signingKey, keyID: "ABCDE12345", teamID: "TEAM123456")))
            let configuration = APNsHTTP2ConnectionConfiguration(
                endpoint: APNsEndpoint(host: endpointHost, port: simulator.http2Port), credential: credential, caFile: try caFile(simulator))
            let factory: any APNsConnectionFactory = switch client {
            case .nio: try APNsHTTP2ConnectionFactory(configuration: configuration, logger: capture.logger(label: "apns.http2"))
            case .nghttp2: try APNsNGHTTP2ConnectionFactory(configuration: configuration, logger: capture.logger(label: "apns.nghttp2"))
            }

            var connectError: (any Error)?
            do {
                let established = try await factory.makeConnection(id: APNsConnectionID(1), delegate: IgnoringDelegate())
                await established.connection.close(graceful: false)
            } catch {
                connectError = error
            }

            let supervisor = APNsSupervisor(
                configuration: APNsSupervisorConfiguration(
                    pool: .init(connections: 1, maxQueued: 10, minimumConnectSpacing: .milliseconds(5),
                                backoff: Backoff(base: .milliseconds(10), cap: .milliseconds(50))),
                    // A refused handshake is APNs unreachable: the send waits for a connection this long, then fails.
                    retry: APNsRetryPolicy(maxAttempts: 2, backoff: Backoff(base: .milliseconds(10), cap: .milliseconds(50)), maxRetryDuration: .milliseconds(300)),
                    requestTimeout: .seconds(5)),
                factory: factory,
                logger: capture.logger(label: "apns.supervisor"))
            let outcome = try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await supervisor.run() }
                let outcome = await supervisor.send(try Harness.notification(token: Harness.token(90)))
                await supervisor.shutdown(gracePeriod: .seconds(1))
                try await group.waitForAll()
                return outcome
            }
            let requests = simulator.requestCount
            await simulator.shutdown()
            return (connectError, outcome, requests, capture.all)
        } catch {
            await simulator.shutdown()
            throw error
        }
    }

    /// The handshake failed with `tlsError` (BoringSSL's or NIOSSL's name for it), the supervisor said
    /// so in its log, and the server never saw a request.
    static func expectRefusedHandshake(_ result: (connectError: (any Error)?, outcome: APNsOutcome, requests: Int, log: [String]), tlsError: String) {
        let description = result.connectError.map { "\($0)" } ?? "(connected)"
        #expect(description.contains(tlsError), "a clear TLS error, got \(description)")
        #expect(result.outcome.classification != .delivered)
        #expect(result.outcome.lastAttempt == .failure(.noConnection))
        #expect(result.requests == 0, "no request reached the server")
        #expect(result.log.contains { $0.contains("APNs connect failed") && $0.contains(tlsError) }, "\(result.log)")
    }

    @Test("a server certificate from a CA the client does not trust is refused; nothing is sent", arguments: Harness.HTTP2Client.allCases)
    func unknownCertificateAuthority(client: Harness.HTTP2Client) async throws {
        let result = try await Self.attempt(client: client, endpointHost: "127.0.0.1") { _ in
            // A second, unrelated CA: the one the client is told to trust.
            let other = try SimulatorCertificates.generate(in: scratchPath("apns-other-ca"))
            return other.caPath
        }
        Self.expectRefusedHandshake(result, tlsError: "CERTIFICATE_VERIFY_FAILED")
    }

    @Test("a server certificate that does not name the host connected to is refused; nothing is sent", arguments: Harness.HTTP2Client.allCases)
    func wrongHostname(client: Harness.HTTP2Client) async throws {
        // The simulator's certificate names localhost and 127.0.0.1; the whole 127/8 block is loopback
        // on Linux, so 127.0.0.2 reaches the same kind of server under an address it does not name.
        let result = try await Self.attempt(client: client, simulatorHost: "127.0.0.2", endpointHost: "127.0.0.2") { $0.certificates.caPath }
        Self.expectRefusedHandshake(result, tlsError: "failedToValidateHostname")
    }

    @Test("the same simulator and CA are accepted under a name the certificate has (the checks above fail for the right reason)", arguments: Harness.HTTP2Client.allCases)
    func matchingNameAndCA(client: Harness.HTTP2Client) async throws {
        let result = try await Self.attempt(client: client, endpointHost: "localhost") { $0.certificates.caPath }
        #expect(result.connectError == nil, "\(String(describing: result.connectError))")
        #expect(result.outcome.classification == .delivered)
    }
}

/// A connection delegate for a connection that is only opened and closed.
private struct IgnoringDelegate: APNsConnectionDelegate {
    func connection(_ id: APNsConnectionID, maxConcurrentStreamsChanged limit: Int) {}
    func connectionGoingAway(_ id: APNsConnectionID) {}
    func connectionClosed(_ id: APNsConnectionID) {}
}
