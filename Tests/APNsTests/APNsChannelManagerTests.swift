@testable import APNs
@testable import APNsSimulator
import APNsTestSupport
import Crypto
import Foundation
import NIOCore
import NIOHPACK
import Testing

/// Broadcast push (iOS 18 Live Activities): the channel management client against the simulator's management
/// listener, and broadcasts sent through the supervisor to the simulator's HTTP/2 port.
@Suite("Broadcast channels")
struct APNsChannelManagerTests {
    static let bundleID = "com.example.app"
    static let payload = Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#.utf8)

    /// A simulator serving management on a free port, a supervisor for sends, and a channel manager with the same
    /// token credential (JWTs are verified).
    /// `teamApps`: the simulator knows the key as a team's, allowed these bundle ids only.
    static func run(
        teamApps: Set<String>? = nil,
        _ body: (APNsSimulator, APNsSupervisor, APNsChannelManager, APNsHTTP2ConnectionFactory) async throws -> Void
    ) async throws {
        var setup = Harness.Setup()
        setup.simulator.broadcastManagementPort = 0
        let signingKey = setup.signingKey
        if let teamApps {
            setup.simulator.providerKeys = [SimulatorProviderKey(
                keyID: "ABCDE12345", teamID: "TEAM123456", publicKeyPEM: signingKey.publicKey.pemRepresentation, topics: teamApps)]
        }
        try await Harness.run(setup) { simulator, supervisor in
            let signer = try APNsJWTSigner(key: signingKey, keyID: "ABCDE12345", teamID: "TEAM123456")
            let port = try #require(simulator.broadcastManagementPort)
            let factory = try APNsHTTP2ConnectionFactory(configuration: APNsHTTP2ConnectionConfiguration(
                endpoint: APNsEndpoint(host: "127.0.0.1", port: port), credential: .token(APNsTokenProvider(signer: signer)),
                caFile: simulator.certificates.caPath))
            let manager = APNsChannelManager(factory: factory)
            do {
                try await body(simulator, supervisor, manager, factory)
            } catch {
                await manager.close()
                throw error
            }
            await manager.close()
        }
    }

    /// The error a management call threw, or nil.
    static func failure(_ operation: () async throws(APNsChannelManagementError) -> Void) async -> APNsChannelManagementError? {
        do {
            try await operation()
            return nil
        } catch {
            return error
        }
    }

    /// A request the client cannot make (a missing or malformed channel id, a wrong body), sent raw on a connection
    /// from the same factory; returns "status reason".
    static func raw(_ factory: APNsHTTP2ConnectionFactory, method: String, path: String, headers: [(String, String)] = [], body: String = "") async -> String {
        guard let established = try? await factory.makeConnection(id: APNsConnectionID(99), delegate: NoDelegate()),
            let connection = established.connection as? APNsHTTP2Connection
        else { return "no connection" }
        let exchange = await connection.request(method: method, path: path, extraHeaders: headers, body: Array(body.utf8), deadline: .now() + .seconds(10))
        await connection.close(graceful: true)
        guard case .answered(let answer) = exchange else { return "no answer: \(exchange)" }
        guard answer.status >= 400 else { return "\(answer.status) -" }
        let reason = APNsResponse.parse(status: answer.status, apnsIDHeader: nil, retryAfterHeader: nil, body: answer.body).reason
        return "\(answer.status) \(reason?.rawValue ?? "-")"
    }

    @Test("create, read, list and delete a channel")
    func roundTrip() async throws {
        try await Self.run { simulator, _, manager, _ in
            let id = try await manager.create(bundleID: Self.bundleID, storagePolicy: .mostRecent)
            #expect(simulator.channels(of: Self.bundleID) == [id.value])
            let channel = try await manager.read(bundleID: Self.bundleID, channelID: id)
            #expect(channel == APNsChannel(id: id, storagePolicy: .mostRecent, pushType: "LiveActivity"))
            let second = try await manager.create(bundleID: Self.bundleID, storagePolicy: .noStorage)
            #expect(try await manager.list(bundleID: Self.bundleID) == [id, second])
            #expect(try await manager.list(bundleID: "com.example.other") == [])

            try await manager.delete(bundleID: Self.bundleID, channelID: id)
            #expect(try await manager.list(bundleID: Self.bundleID) == [second])
            let readDeleted = await Self.failure { () throws(APNsChannelManagementError) in _ = try await manager.read(bundleID: Self.bundleID, channelID: id) }
            #expect(readDeleted == .rejected(status: 404, reason: .channelNotRegistered))
            let deleteAgain = await Self.failure { () throws(APNsChannelManagementError) in try await manager.delete(bundleID: Self.bundleID, channelID: id) }
            #expect(deleteAgain == .rejected(status: 404, reason: .channelNotRegistered))
        }
    }

    @Test("an unknown channel is ChannelNotRegistered, also under another app")
    func unknownChannel() async throws {
        try await Self.run { _, _, manager, _ in
            let unknown = try APNsChannelID("dW5rbm93bi1jaGFubmVs")
            #expect(await Self.failure { () throws(APNsChannelManagementError) in _ = try await manager.read(bundleID: Self.bundleID, channelID: unknown) }
                == .rejected(status: 404, reason: .channelNotRegistered))
            let id = try await manager.create(bundleID: Self.bundleID, storagePolicy: .noStorage)
            #expect(await Self.failure { () throws(APNsChannelManagementError) in try await manager.delete(bundleID: "com.example.other", channelID: id) }
                == .rejected(status: 404, reason: .channelNotRegistered))
        }
    }

    @Test("management requests break Apple's rules one at a time and get Apple's answers")
    func managementErrors() async throws {
        try await Self.run { _, _, _, factory in
            let channels = "/1/apps/\(Self.bundleID)/channels"
            let good = #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#
            #expect(await Self.raw(factory, method: "GET", path: channels) == "400 MissingChannelId")
            #expect(await Self.raw(factory, method: "DELETE", path: channels) == "400 MissingChannelId")
            #expect(await Self.raw(factory, method: "GET", path: channels, headers: [("apns-channel-id", "not base64!")]) == "400 BadChannelId")
            #expect(await Self.raw(factory, method: "POST", path: channels, body: #"{"message-storage-policy":2,"push-type":"LiveActivity"}"#)
                == "400 BadMessageStoragePolicy")
            #expect(await Self.raw(factory, method: "POST", path: channels, body: #"{"message-storage-policy":1,"push-type":"Alert"}"#)
                == "400 InvalidPushType")
            #expect(await Self.raw(factory, method: "POST", path: channels, body: #"{"message-storage-policy":1}"#) == "400 MissingPushType")
            #expect(await Self.raw(factory, method: "PUT", path: channels, body: good) == "405 MethodNotAllowed")
            #expect(await Self.raw(factory, method: "POST", path: "/1/apps/\(Self.bundleID)/all-channels", body: good) == "405 MethodNotAllowed")
            #expect(await Self.raw(factory, method: "POST", path: "/2/apps/\(Self.bundleID)/channels", body: good) == "404 BadPath")
            #expect(await Self.raw(factory, method: "POST", path: channels, body: good) == "201 -")
        }
    }

    @Test("too many channels is CannotCreateChannelConfig")
    func channelLimit() {
        var channels = SimulatorChannels()
        channels.limit = 2
        let body = Array(#"{"message-storage-policy":0,"push-type":"LiveActivity"}"#.utf8)
        var next = 0
        func create() -> SimulatorManagementAnswer {
            channels.handle(method: "POST", bundleID: "a.b", resource: "channels", channelHeader: nil, body: body) {
                next += 1
                return Data("channel-\(next)".utf8).base64EncodedString()
            }
        }
        #expect(create().status == 201)
        #expect(create().status == 201)
        #expect(create() == .reject(.cannotCreateChannelConfig))
    }

    @Test("a broadcast is delivered once and counted for its channel; to a deleted channel it is ChannelNotRegistered")
    func broadcastDelivery() async throws {
        try await Self.run { simulator, supervisor, manager, _ in
            let id = try await manager.create(bundleID: Self.bundleID, storagePolicy: .mostRecent)
            let other = simulator.createChannel(bundleID: Self.bundleID)
            let apnsID = UUID()
            let notification = try APNsNotification(channel: id, bundleID: Self.bundleID, priority: .conservePower, expiration: 0, apnsID: apnsID, payload: Self.payload)
            let outcome = await supervisor.send(notification)
            #expect(outcome.classification == .delivered)
            #expect(outcome.apnsID == apnsID)
            let shown = simulator.broadcasts(for: id.value)
            #expect(shown.count == 1)
            #expect(shown.first?.requestID == APNsUUIDText.format(apnsID))
            #expect(shown.first?.payload == Self.payload)
            #expect(shown.first?.priority == 5)
            #expect(simulator.broadcastCounts == [id.value: 1])
            #expect(simulator.deliveryCount == 0)  // no device token was involved
            #expect(simulator.broadcasts(for: other).isEmpty)

            try await manager.delete(bundleID: Self.bundleID, channelID: id)
            let rejected = await supervisor.send(try APNsNotification(channel: id, bundleID: Self.bundleID, payload: Self.payload))
            #expect(rejected.classification == .permanent)
            #expect(rejected.reason == .channelNotRegistered)
            #expect(rejected.httpStatus == 404)
            #expect(rejected.attempts == 1)
            #expect(simulator.broadcastCounts == [id.value: 1])
        }
    }

    @Test("a team's key manages and broadcasts to its own apps' channels only")
    func teamKeyScope() async throws {
        try await Self.run(teamApps: [Self.bundleID]) { simulator, supervisor, manager, _ in
            _ = try await manager.create(bundleID: Self.bundleID, storagePolicy: .noStorage)
            #expect(await Self.failure { () throws(APNsChannelManagementError) in _ = try await manager.list(bundleID: "com.example.other") }
                == .rejected(status: 400, reason: .topicDisallowed))
            let foreign = try APNsChannelID(simulator.createChannel(bundleID: "com.example.other"))
            let outcome = await supervisor.send(try APNsNotification(channel: foreign, bundleID: "com.example.other", payload: Self.payload))
            #expect(outcome.reason == .topicDisallowed)
            #expect(simulator.allBroadcasts().isEmpty)
        }
    }
}

/// A delegate for a connection nobody supervises.
private struct NoDelegate: APNsConnectionDelegate {
    func connection(_ id: APNsConnectionID, maxConcurrentStreamsChanged limit: Int) {}
    func connectionGoingAway(_ id: APNsConnectionID) {}
    func connectionClosed(_ id: APNsConnectionID) {}
}
