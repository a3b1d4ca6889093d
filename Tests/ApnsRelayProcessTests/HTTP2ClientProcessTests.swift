import APNs
import APNsNGHTTP2
import Crypto
import Foundation
import Kafka
import Logging
import Testing

@testable import apns_relay

@Suite("apns.http2_client: the provider API on swift-nio-http2 or on nghttp2", .serialized)
struct HTTP2ClientProcessTests {
    @Test("the key picks the factory of the relay's connections, and a bad value is refused naming it")
    func keyPicksTheFactory() async throws {
        let credential = APNsCredential.token(APNsTokenProvider(
            signer: try APNsJWTSigner(key: P256.Signing.PrivateKey(), keyID: "ABCDE12345", teamID: "TEAM123456")))
        let settings = try await ConfigurationLoader.load(file: nil, environment: ["APNS_RELAY_APNS_HTTP2_CLIENT": "nghttp2"], requireService: false).apns
        #expect(settings.http2Client == .nghttp2)
        #expect(try settings.http2ConnectionFactory(for: .production, credential: credential, logger: Logger(label: "t")) is APNsNGHTTP2ConnectionFactory)
        let nio = try await ConfigurationLoader.load(file: nil, environment: ["APNS_RELAY_APNS_HTTP2_CLIENT": "nio"], requireService: false).apns
        #expect(try nio.http2ConnectionFactory(for: .sandbox, credential: credential, logger: Logger(label: "t")) is APNsHTTP2ConnectionFactory)
        let defaults = try await ConfigurationLoader.load(file: nil, environment: [:], requireService: false).apns
        #expect(defaults.http2Client == RelayConfiguration.APNsSettings().http2Client)
        await #expect {
            _ = try await ConfigurationLoader.load(file: nil, environment: ["APNS_RELAY_APNS_HTTP2_CLIENT": "curl"], requireService: false)
        } throws: { error in
            "\(error)".contains("apns.http2_client")
        }
    }

    @Test("apns-relay run delivers every event in order on each client", arguments: ["nio", "nghttp2"])
    func runDeliversOnEachClient(client: String) async throws {
        var logger = Logger(label: "run-test")
        logger.logLevel = .error
        let fixture = try await RelayProcessFixture.start(apnsLines: "  http2_client: \(client)\n", relayLines: "  http_port: 0\n  shutdown_timeout_s: 10\n")
        let (users, eventsPerUser) = (40, 3)
        try await fixture.produceUsers(users, eventsPerUser: eventsPerUser, logger: logger)

        let relay = try startRelay(["run", "--config", fixture.configPath], log: "\(fixture.directory)/run.log")
        let kafka = KafkaConfiguration(bootstrapServers: fixture.cluster.bootstrapServers)
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        let results = LastValues()
        let doneBy = ContinuousClock.now.advanced(by: .seconds(60))
        while ContinuousClock.now < doneBy && relay.isRunning && results.all.count < users * eventsPerUser {
            _ = try await reader.readToEnd((0..<3).map { TopicPartition("push.results", Int32($0)) }) { message in
                let value = String(decoding: message.value ?? [], as: UTF8.self)
                results.set(value, value)
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        kill(relay.processIdentifier, SIGTERM)
        while relay.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        let output = (try? String(contentsOfFile: "\(fixture.directory)/run.log", encoding: .utf8)) ?? ""
        #expect(relay.terminationStatus == 0, "\(output.suffix(2_000))")
        #expect(results.all.count == users * eventsPerUser, "\(output.suffix(3_000))")
        #expect(results.all.keys.allSatisfy { $0.contains("\"status\":\"delivered\"") })
        for user in 0..<users {
            let token = String(repeating: String(format: "%02x", user % 256), count: 31) + String(format: "%02x", user / 256)
            #expect(fixture.simulator.deliveries(for: token).compactMap(\.badge) == [1, 2, 3], "user \(user)")
        }
        await fixture.stop()
    }
}
