import APNs
import APNsSimulator
import APNsTestSupport
import Foundation
import Logging
import Testing
import TestSupport

@Suite("Certificate auth (mutual TLS) against the simulator", .serialized)
struct APNsCredentialTests {
    static func setup(client: Harness.HTTP2Client = .nio) -> Harness.Setup {
        var setup = Harness.Setup(client: client)
        setup.simulator.requireClientCertificate = true
        setup.verifyJWT = false
        return setup
    }

    static func deliverOne(_ simulator: APNsSimulator, _ supervisor: APNsSupervisor) async throws {
        let token = Harness.token(70)
        let outcome = await supervisor.send(try Harness.notification(token: token))
        #expect(outcome.classification == .delivered)
        #expect(simulator.deliveries(for: token).count == 1)
    }

    @Test("PEM certificate and key", arguments: Harness.HTTP2Client.allCases)
    func pem(client: Harness.HTTP2Client) async throws {
        try await Harness.run(Self.setup(client: client), loadCertificate: { simulator in
            try APNsClientCertificate(
                certificatePEMFile: simulator.certificates.clientCertificatePath,
                privateKeyPEMFile: simulator.certificates.clientKeyPath)
        }, Self.deliverOne)
    }

    @Test("an app's own certificate pushes to its app only, as Apple's per-app certificates do", arguments: Harness.HTTP2Client.allCases)
    func perAppCertificate(client: Harness.HTTP2Client) async throws {
        var setup = Self.setup(client: client)
        setup.simulator.clientCertificateTopics = ["com.c.one"]
        try await Harness.run(setup, loadCertificate: { simulator in
            try APNsClientCertificate(
                certificatePEMFile: simulator.certificates.clientCertificatePath(forTopic: "com.c.one"),
                privateKeyPEMFile: simulator.certificates.clientKeyPath(forTopic: "com.c.one"))
        }) { simulator, supervisor in
            let own = await supervisor.send(try Harness.notification(token: Harness.token(72), topic: "com.c.one"))
            #expect(own.classification == .delivered)
            let other = await supervisor.send(try Harness.notification(token: Harness.token(73), topic: "com.c.two"))
            #expect(other.classification == .permanent && other.reason == .topicDisallowed)
            #expect(simulator.deliveries(for: Harness.token(73)).isEmpty)
        }
    }

    @Test("PKCS#12 bundle with password", .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")))
    func pkcs12() async throws {
        try await Harness.run(Self.setup(), loadCertificate: { simulator in
            let certificates = simulator.certificates
            let p12 = certificates.directory + "/client.p12"
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            process.arguments = [
                "pkcs12", "-export", "-in", certificates.clientCertificatePath, "-inkey", certificates.clientKeyPath,
                "-out", p12, "-passout", "pass:s3cret", "-name", "apns-relay client",
            ]
            try process.run()
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
            #expect(throws: APNsCredentialError.self) { try APNsClientCertificate(pkcs12File: p12, password: "wrong") }
            return try APNsClientCertificate(pkcs12File: p12, password: "s3cret")
        }, Self.deliverOne)
    }

    @Test("without a client certificate the mutual-TLS simulator is unreachable: the send fails, nothing recorded", arguments: Harness.HTTP2Client.allCases)
    func noCertificate(client: Harness.HTTP2Client) async throws {
        var setup = Self.setup(client: client)
        setup.maxAttempts = 2
        // Refused handshakes are APNs unreachable: the send waits for a connection this long, then fails.
        setup.maxRetry = .milliseconds(300)
        setup.verifyJWT = true
        try await Harness.run(setup) { simulator, supervisor in
            let outcome = await supervisor.send(try Harness.notification(token: Harness.token(71)))
            #expect(outcome.classification == .retryable)
            #expect(simulator.deliveryCount == 0)
        }
    }

    @Test("certificate expiry is read and reported")
    func expiry() throws {
        let directory = scratchPath("apns-sim-certs")
        let certificates = try SimulatorCertificates.generate(in: directory, now: Date(timeIntervalSince1970: 1_700_000_000))
        let certificate = try APNsClientCertificate(
            certificatePEMFile: certificates.clientCertificatePath, privateKeyPEMFile: certificates.clientKeyPath)
        #expect(certificate.notValidAfter == Date(timeIntervalSince1970: 1_700_000_000 + 365 * 86_400))
        let nearEnd = certificate.notValidAfter.addingTimeInterval(-10 * 86_400)
        let dimensions = [("topic", "expiry-test")]
        _ = ProcessMetrics.shared
        #expect(certificate.reportExpiry(logger: Logger(label: "test"), dimensions: dimensions, now: nearEnd) == 10 * 86_400)
        // The time left as of the report, and the date itself: an alert compares that with the time it evaluates.
        #expect(try ProcessMetrics.shared.expectGauge("apns_certificate_expiry_seconds", dimensions).lastValue == 10 * 86_400)
        #expect(try ProcessMetrics.shared.expectGauge("apns_certificate_not_after_timestamp_seconds", dimensions).lastValue
            == 1_700_000_000 + 365 * 86_400)
    }
}
