import Foundation
import NIOCore
import Synchronization

/// What APNs keeps of a broadcast channel's messages for devices that are not reachable (`message-storage-policy`).
public enum APNsMessageStoragePolicy: Int, Sendable, Hashable, CaseIterable {
    /// `0`: nothing is stored; a device that is offline misses the message.
    case noStorage = 0
    /// `1`: the most recent message is stored.
    case mostRecent = 1
}

/// A channel as APNs describes it (`GET /1/apps/{bundle-id}/channels`).
public struct APNsChannel: Sendable, Hashable {
    /// The channel's id.
    public var id: APNsChannelID
    /// Its message storage policy.
    public var storagePolicy: APNsMessageStoragePolicy
    /// Its push type (`LiveActivity`, the only one Apple offers).
    public var pushType: String

    /// Creates the value.
    public init(id: APNsChannelID, storagePolicy: APNsMessageStoragePolicy, pushType: String) {
        self.id = id
        self.storagePolicy = storagePolicy
        self.pushType = pushType
    }
}

/// Why a channel management request failed.
public enum APNsChannelManagementError: Error, Sendable, Hashable, CustomStringConvertible {
    /// APNs answered with an error status and Apple's reason (`ChannelNotRegistered`, `BadChannelId`, ...).
    case rejected(status: Int, reason: APNsReason)
    /// No answer: the connection could not be made or was lost.
    case transport(String)
    /// APNs answered success, but not in the documented form.
    case malformedResponse(String)
    /// The request was not sent: the bundle id cannot go into a request path.
    case invalidBundleID(String)

    public var description: String {
        switch self {
        case .rejected(let status, let reason): "APNs answered \(status) \(reason.rawValue)"
        case .transport(let problem): "no answer from APNs: \(problem)"
        case .malformedResponse(let problem): "unexpected answer from APNs: \(problem)"
        case .invalidBundleID(let problem): "bad bundle id: \(problem)"
        }
    }
}

/// The request of each channel management operation and how its answer is read: pure, so the wire form is
/// testable without a connection.
enum APNsChannelRequests {
    /// Apple's `push-type` of a Live Activity channel (the only kind).
    static let liveActivityPushType = "LiveActivity"

    static func channelsPath(bundleID: String) throws(APNsChannelManagementError) -> String {
        try checked(bundleID)
        return "/1/apps/\(bundleID)/channels"
    }

    static func allChannelsPath(bundleID: String) throws(APNsChannelManagementError) -> String {
        try checked(bundleID)
        return "/1/apps/\(bundleID)/all-channels"
    }

    private static func checked(_ bundleID: String) throws(APNsChannelManagementError) {
        do {
            try APNsNotification.validateBundleID(bundleID)
        } catch {
            throw .invalidBundleID(error.description)
        }
    }

    static func createBody(storagePolicy: APNsMessageStoragePolicy) -> [UInt8] {
        Array(#"{"message-storage-policy":\#(storagePolicy.rawValue),"push-type":"\#(liveActivityPushType)"}"#.utf8)
    }

    /// An answer with another status than `expected` as the error it stands for.
    static func check(_ answer: APNsHTTP2Answer, expected: Int) throws(APNsChannelManagementError) {
        guard answer.status != expected else { return }
        let reason = APNsResponse.parse(status: answer.status, apnsIDHeader: nil, retryAfterHeader: nil, body: answer.body).reason
        throw .rejected(status: answer.status, reason: reason ?? .other("HTTP \(answer.status)"))
    }

    static func createdChannel(_ answer: APNsHTTP2Answer) throws(APNsChannelManagementError) -> APNsChannelID {
        try check(answer, expected: 201)
        guard let text = answer.channelID else { throw .malformedResponse("201 without apns-channel-id") }
        do {
            return try APNsChannelID(text)
        } catch {
            throw .malformedResponse("apns-channel-id: \(error)")
        }
    }

    static func channel(_ answer: APNsHTTP2Answer, id: APNsChannelID) throws(APNsChannelManagementError) -> APNsChannel {
        try check(answer, expected: 200)
        guard let object = try? JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any],
            let policyNumber = object["message-storage-policy"] as? NSNumber,
            let policy = APNsMessageStoragePolicy(rawValue: policyNumber.intValue),
            let pushType = object["push-type"] as? String
        else { throw .malformedResponse("a channel must be {\"message-storage-policy\":0|1,\"push-type\":...}") }
        return APNsChannel(id: id, storagePolicy: policy, pushType: pushType)
    }

    static func channelIDs(_ answer: APNsHTTP2Answer) throws(APNsChannelManagementError) -> [APNsChannelID] {
        try check(answer, expected: 200)
        guard let object = try? JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any],
            let texts = object["channels"] as? [String]
        else { throw .malformedResponse("a channel list must be {\"channels\":[...]}") }
        var ids: [APNsChannelID] = []
        for text in texts {
            do {
                ids.append(try APNsChannelID(text))
            } catch {
                throw .malformedResponse("channel id '\(text)': \(error)")
            }
        }
        return ids
    }
}

/// Manages an app's broadcast channels (iOS 18 Live Activities) on Apple's channel management host: create,
/// read, list, delete.
///
/// Its connection comes from an ``APNsHTTP2ConnectionFactory`` configured with the management endpoint
/// (``APNsEnvironment/managementEndpoint`` or a simulator's) and the credential used for sends, so it
/// authenticates, verifies TLS and reaches the host the way sends do. One connection, opened at the first request
/// and opened again after it closed; ``close()`` ends it.
///
/// ```swift
/// let factory = try APNsHTTP2ConnectionFactory(configuration: .init(endpoint: .sandboxManagement, credential: credential))
/// let manager = APNsChannelManager(factory: factory)
/// let id = try await manager.create(bundleID: "com.example.app", storagePolicy: .mostRecent)
/// await manager.close()
/// ```
public actor APNsChannelManager {
    private let factory: APNsHTTP2ConnectionFactory
    private let requestTimeout: Duration
    private var connection: APNsHTTP2Connection?
    private var watcher: ConnectionWatcher?
    private var nextConnectionID = 0

    /// Creates a manager that connects through `factory`; each request waits at most `requestTimeout` for its answer.
    public init(factory: APNsHTTP2ConnectionFactory, requestTimeout: Duration = .seconds(10)) {
        self.factory = factory
        self.requestTimeout = requestTimeout
    }

    /// Creates a Live Activity channel; returns the id APNs gave it (`201`, header `apns-channel-id`).
    public func create(bundleID: String, storagePolicy: APNsMessageStoragePolicy) async throws(APNsChannelManagementError) -> APNsChannelID {
        let answer = try await perform(
            method: "POST", path: try APNsChannelRequests.channelsPath(bundleID: bundleID), channel: nil,
            body: APNsChannelRequests.createBody(storagePolicy: storagePolicy))
        return try APNsChannelRequests.createdChannel(answer)
    }

    /// Reads a channel's configuration (`200`).
    public func read(bundleID: String, channelID: APNsChannelID) async throws(APNsChannelManagementError) -> APNsChannel {
        let answer = try await perform(method: "GET", path: try APNsChannelRequests.channelsPath(bundleID: bundleID), channel: channelID, body: [])
        return try APNsChannelRequests.channel(answer, id: channelID)
    }

    /// The ids of every channel of the app (`200`, `{"channels":[...]}`).
    public func list(bundleID: String) async throws(APNsChannelManagementError) -> [APNsChannelID] {
        let answer = try await perform(method: "GET", path: try APNsChannelRequests.allChannelsPath(bundleID: bundleID), channel: nil, body: [])
        return try APNsChannelRequests.channelIDs(answer)
    }

    /// Deletes a channel (`204`); broadcasts to it are then answered 404 `ChannelNotRegistered`.
    public func delete(bundleID: String, channelID: APNsChannelID) async throws(APNsChannelManagementError) {
        let answer = try await perform(method: "DELETE", path: try APNsChannelRequests.channelsPath(bundleID: bundleID), channel: channelID, body: [])
        try APNsChannelRequests.check(answer, expected: 204)
    }

    /// Closes the connection (GOAWAY first).
    public func close() async {
        let open = connection
        connection = nil
        await open?.close(graceful: true)
    }

    /// One request. A stream the server refused unprocessed (above a GOAWAY's last stream id, REFUSED_STREAM) is
    /// sent once more on a new connection: it cannot have had an effect.
    private func perform(method: String, path: String, channel: APNsChannelID?, body: [UInt8]) async throws(APNsChannelManagementError) -> APNsHTTP2Answer {
        let headers = channel.map { [("apns-channel-id", $0.value)] } ?? []
        for _ in 0..<2 {
            let connection = try await openConnection()
            let deadline = NIODeadline.now() + TimeAmount(requestTimeout)
            switch await connection.request(method: method, path: path, extraHeaders: headers, body: body, deadline: deadline) {
            case .answered(let answer):
                return answer
            case .failed(.refused), .failed(.goingAway):
                // Only a refused stream is certainly unprocessed: a lost one may have created a channel already.
                await close()
            case .failed(let failure):
                throw .transport("\(failure)")
            }
        }
        throw .transport("the connection was refused twice")
    }

    private func openConnection() async throws(APNsChannelManagementError) -> APNsHTTP2Connection {
        if let connection, watcher?.isClosed == false { return connection }
        nextConnectionID += 1
        let watcher = ConnectionWatcher()
        let established: APNsEstablishedConnection
        do {
            established = try await factory.makeConnection(id: APNsConnectionID(nextConnectionID), delegate: watcher)
        } catch {
            throw .transport("\(error)")
        }
        // The factory is the one place connections are made (TLS, credentials, the proxy when one is
        // configured); what it makes for HTTP/2 is this type, which can send requests other than notifications.
        guard let http2 = established.connection as? APNsHTTP2Connection else {
            await established.connection.close(graceful: false)
            throw .transport("the factory made a connection that is not HTTP/2")
        }
        self.connection = http2
        self.watcher = watcher
        return http2
    }
}

/// Remembers whether the manager's connection closed, so the next request opens a new one.
private final class ConnectionWatcher: APNsConnectionDelegate {
    private let closed = Mutex(false)

    var isClosed: Bool { closed.withLock { $0 } }

    func connection(_ id: APNsConnectionID, maxConcurrentStreamsChanged limit: Int) {}
    func connectionGoingAway(_ id: APNsConnectionID) { closed.withLock { $0 = true } }
    func connectionClosed(_ id: APNsConnectionID) { closed.withLock { $0 = true } }
}
