import APNs
import Crypto
import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import X509

/// Per-connection state of the simulator; confined to the connection's event loop.
final class SimulatorConnectionState {
    let channel: any Channel
    var highestStreamID = 0
    var goAwayLastStreamID: Int?
    var openAcceptedStreams = 0
    var frozen = false
    var closeScheduled = false
    /// The last token that passed every check on this connection (signature checks are skipped for it).
    var lastVerifiedJWT: VerifiedProviderToken?
    /// The last `authorization` value this connection presented (the simulator notes each new one once).
    var lastAuthorization: String?
    /// The app of the connection's client certificate (one of `clientCertificateTopics`), looked up once.
    var certificateTopic: String?
    var certificateTopicLookedUp = false

    init(channel: any Channel) {
        self.channel = channel
    }

    /// Sends GOAWAY once, naming `lastStreamID` (by default the highest stream seen); the connection closes when
    /// the streams up to it are answered.
    func goAway(lastStreamID: Int? = nil) {
        guard goAwayLastStreamID == nil else { return }
        let last = lastStreamID ?? highestStreamID
        goAwayLastStreamID = last
        let frame = HTTP2Frame(
            streamID: .rootStream,
            payload: .goAway(lastStreamID: HTTP2StreamID(last), errorCode: .noError, opaqueData: nil))
        channel.writeAndFlush(frame, promise: nil)
        closeIfDone()
    }

    /// Once every stream up to last-stream-id is answered, the connection closes after a grace period; a
    /// well-behaved client closes it first, once it has read every answer, so no answer is ever cut off.
    func closeIfDone() {
        if goAwayLastStreamID != nil && openAcceptedStreams == 0 && !closeScheduled {
            closeScheduled = true
            let channel = self.channel
            channel.eventLoop.scheduleTask(in: .seconds(10)) { channel.close(promise: nil) }
        }
    }
}

/// Drops every inbound byte once the connection is frozen (no responses, no PING ACKs).
final class FreezeHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    private let connection: SimulatorConnectionState

    init(connection: SimulatorConnectionState) { self.connection = connection }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if connection.frozen { return }
        context.fireChannelRead(data)
    }
}

/// The answer to one request.
enum SimulatorVerdict: Sendable, Hashable {
    case accept(SimulatedDelivery)
    case acceptBroadcast(SimulatedBroadcast)
    case reject(status: Int, reason: String, timestamp: Int64?)
}

/// A provider token that passed the checks, the bundle ids its team may push to (`nil`: any), and those its key is
/// limited to (`nil`: the team's).
struct VerifiedProviderToken: Sendable {
    var jwt: String
    var kid: String = ""
    var iat: Int64
    var topics: Set<String>?
    var keyTopics: Set<String>? = nil
}

/// Apple's request validation, as a pure function of the request.
struct SimulatorValidator {
    let options: SimulatorOptions
    let publicKey: Data?
    /// ``SimulatorOptions/providerKeys`` by key id, with their keys as X9.63 bytes.
    private let providerKeys: [String: (key: SimulatorProviderKey, publicKey: Data)]

    init(options: SimulatorOptions, publicKey: Data?) {
        self.options = options
        self.publicKey = publicKey
        var keys: [String: (key: SimulatorProviderKey, publicKey: Data)] = [:]
        for key in options.providerKeys {
            // `APNsSimulator.start` refuses a key that does not parse.
            guard let parsed = try? P256.Signing.PublicKey(pemRepresentation: key.publicKeyPEM) else { continue }
            keys[key.keyID] = (key, parsed.x963Representation)
        }
        self.providerKeys = keys
    }

    /// A push to `bundleID` authenticated by a provider token whose key is limited to other topics of its team: 403
    /// `UnrelatedKeyIdInToken`, as Apple answers a topic-specific key; `nil` otherwise.
    func keyScopeProblem(_ headers: HPACKHeaders, bundleID: String, lastVerifiedJWT: VerifiedProviderToken?) -> SimulatorVerdict? {
        guard headers.first(name: "authorization") != nil, let keyTopics = lastVerifiedJWT?.keyTopics, !keyTopics.contains(bundleID) else { return nil }
        return Self.reject(.unrelatedKeyIdInToken)
    }

    static func reject(_ reason: APNsReason, timestamp: Int64? = nil) -> SimulatorVerdict {
        .reject(status: reason.httpStatus, reason: reason.rawValue, timestamp: timestamp)
    }

    /// The path prefix of broadcasts; the bundle id follows.
    static let broadcastPathPrefix = "/4/broadcasts/apps/"

    func validate(
        headers: HPACKHeaders, body: [UInt8], now: Date, certificateAuthenticated: Bool, certificateTopic: String? = nil,
        lastVerifiedJWT: inout VerifiedProviderToken?, tokenStatus: (String) -> (dead: Int64?, bad: Bool),
        channelExists: (_ bundleID: String, _ channelID: String) -> Bool = { _, _ in false }
    ) -> SimulatorVerdict {
        func reject(_ reason: APNsReason, timestamp: Int64? = nil) -> SimulatorVerdict { Self.reject(reason, timestamp: timestamp) }
        for name in ["apns-id", "apns-request-id", "apns-topic", "apns-channel-id", "apns-push-type", "apns-priority", "apns-expiration", "apns-collapse-id", "authorization"]
        where headers[name].count > 1 {
            return reject(.duplicateHeaders)
        }
        guard headers.first(name: ":method") == "POST" else { return reject(.methodNotAllowed) }
        if let path = headers.first(name: ":path"), path.hasPrefix(Self.broadcastPathPrefix) {
            return validateBroadcast(
                bundleID: String(path.dropFirst(Self.broadcastPathPrefix.count)), headers: headers, body: body, now: now,
                certificateAuthenticated: certificateAuthenticated, certificateTopic: certificateTopic, lastVerifiedJWT: &lastVerifiedJWT,
                channelExists: channelExists)
        }
        guard let path = headers.first(name: ":path"), path.hasPrefix("/3/device/") else { return reject(.badPath) }
        let token = String(path.dropFirst("/3/device/".count))
        if token.isEmpty { return reject(.missingDeviceToken) }
        guard (try? APNsDeviceToken(hex: token)) != nil else { return reject(.badDeviceToken) }
        let tokenHex = token.lowercased()

        // Authentication; what the credential may push to (a team's apps, a certificate's app; nil: any).
        let credentialTopics: Set<String>?
        switch authenticate(headers, now: now, certificateAuthenticated: certificateAuthenticated, certificateTopic: certificateTopic,
                            lastVerifiedJWT: &lastVerifiedJWT) {
        case .success(let topics): credentialTopics = topics
        case .failure(let problem): return problem.verdict
        }

        guard let topic = headers.first(name: "apns-topic"), !topic.isEmpty else { return reject(.missingTopic) }
        let pushTypeName = headers.first(name: "apns-push-type") ?? "alert"
        guard let pushType = APNsPushType(rawValue: pushTypeName) else { return reject(.invalidPushType) }
        let priority: Int
        let apnsID: String
        switch deliveryHeaders(headers, idHeader: "apns-id") {
        case .success(let values): (priority, apnsID) = values
        case .failure(let problem): return reject(problem.reason)
        }
        if pushType == .background && priority == 10 { return reject(.badPriority) }
        let collapseID = headers.first(name: "apns-collapse-id")
        if let collapseID, collapseID.utf8.count > 64 { return reject(.badCollapseId) }
        if (try? APNsNotification.validateTopic(topic, pushType: pushType)) == nil { return reject(.topicDisallowed) }
        let base = pushType.requiredTopicSuffixes.reduce(topic) { topic, suffix in
            topic.hasSuffix(suffix) ? String(topic.dropLast(suffix.count)) : topic
        }
        if let allowed = options.allowedTopics, !allowed.contains(base) { return reject(.topicDisallowed) }
        // Like Apple, a team's token pushes only to that team's apps, an app's certificate only to that app.
        if let credentialTopics, !credentialTopics.contains(base) { return reject(.topicDisallowed) }
        if let problem = keyScopeProblem(headers, bundleID: base, lastVerifiedJWT: lastVerifiedJWT) { return problem }

        let badge: Int?
        switch checkPayload(body, pushType: pushType) {
        case .success(let value): badge = value
        case .failure(let problem): return problem.verdict
        }

        // The device.
        let status = tokenStatus(tokenHex)
        if let timestamp = status.dead { return reject(.unregistered, timestamp: timestamp) }
        if status.bad { return reject(.badDeviceToken) }

        let authenticatedAs = headers.first(name: "authorization") != nil
            ? lastVerifiedJWT.map { "key:\($0.kid)" } : "certificate:\(certificateTopic ?? "*")"
        return .accept(
            SimulatedDelivery(
                token: tokenHex, apnsID: apnsID, collapseID: collapseID, topic: topic, pushType: pushTypeName,
                priority: priority, payload: body, badge: badge, sequence: 0, authenticatedAs: authenticatedAs))
    }

    /// A broadcast (`POST /4/broadcasts/apps/{bundleID}`): the channel header, push type `liveactivity`, then the
    /// checks every notification gets; the channel must exist for the app (else 404 `ChannelNotRegistered`).
    func validateBroadcast(
        bundleID: String, headers: HPACKHeaders, body: [UInt8], now: Date, certificateAuthenticated: Bool, certificateTopic: String?,
        lastVerifiedJWT: inout VerifiedProviderToken?, channelExists: (_ bundleID: String, _ channelID: String) -> Bool
    ) -> SimulatorVerdict {
        if bundleID.isEmpty || bundleID.contains("/") { return Self.reject(.badPath) }
        let credentialTopics: Set<String>?
        switch authenticate(headers, now: now, certificateAuthenticated: certificateAuthenticated, certificateTopic: certificateTopic,
                            lastVerifiedJWT: &lastVerifiedJWT) {
        case .success(let topics): credentialTopics = topics
        case .failure(let problem): return problem.verdict
        }
        guard let channelID = headers.first(name: "apns-channel-id"), !channelID.isEmpty else { return Self.reject(.missingChannelId) }
        guard (try? APNsChannelID(channelID)) != nil else { return Self.reject(.badChannelId) }
        guard let pushType = headers.first(name: "apns-push-type") else { return Self.reject(.missingPushType) }
        guard pushType == APNsPushType.liveactivity.rawValue else { return Self.reject(.invalidPushType) }
        let priority: Int
        let requestID: String
        switch deliveryHeaders(headers, idHeader: "apns-request-id") {
        case .success(let values): (priority, requestID) = values
        case .failure(let problem): return Self.reject(problem.reason)
        }
        if let allowed = options.allowedTopics, !allowed.contains(bundleID) { return Self.reject(.topicDisallowed) }
        if let credentialTopics, !credentialTopics.contains(bundleID) { return Self.reject(.topicDisallowed) }
        if let problem = keyScopeProblem(headers, bundleID: bundleID, lastVerifiedJWT: lastVerifiedJWT) { return problem }
        if case .failure(let problem) = checkPayload(body, pushType: .liveactivity) { return problem.verdict }
        guard channelExists(bundleID, channelID) else { return Self.reject(.channelNotRegistered) }
        return .acceptBroadcast(
            SimulatedBroadcast(channelID: channelID, bundleID: bundleID, requestID: requestID, priority: priority, payload: body, sequence: 0))
    }

    /// A rejection as an error value, so the shared checks can return it through `Result`.
    struct Problem: Error {
        var reason: APNsReason
        var verdict: SimulatorVerdict { SimulatorValidator.reject(reason) }
        /// The scanner's rejection, which has no reason of Apple's.
        static let payloadInvalid = Problem(reason: .other("PayloadInvalid"))
    }

    /// The provider token, or the client certificate: the bundle ids the credential may push to (a team's apps, a
    /// certificate's app; `nil`: any), or why it is refused.
    func authenticate(
        _ headers: HPACKHeaders, now: Date, certificateAuthenticated: Bool, certificateTopic: String?, lastVerifiedJWT: inout VerifiedProviderToken?
    ) -> Result<Set<String>?, Problem> {
        if let authorization = headers.first(name: "authorization") {
            if let problem = checkJWT(authorization, now: now, lastVerified: &lastVerifiedJWT) { return .failure(Problem(reason: problem)) }
            return .success(lastVerifiedJWT?.topics)
        }
        guard certificateAuthenticated else { return .failure(Problem(reason: .missingProviderToken)) }
        return .success(certificateTopic.map { [$0] })
    }

    /// `apns-priority` (default 10), `apns-expiration` and the UUID in `idHeader` (a new one when absent).
    func deliveryHeaders(_ headers: HPACKHeaders, idHeader: String) -> Result<(priority: Int, id: String), Problem> {
        var priority = 10
        if let value = headers.first(name: "apns-priority") {
            guard let parsed = Int(value), [10, 5, 1].contains(parsed) else { return .failure(Problem(reason: .badPriority)) }
            priority = parsed
        }
        if let expiration = headers.first(name: "apns-expiration"), Int64(expiration) == nil { return .failure(Problem(reason: .badExpirationDate)) }
        guard let value = headers.first(name: idHeader) else { return .success((priority, APNsUUIDText.format(UUID()))) }
        guard APNsUUIDText.parse(value) != nil else { return .failure(Problem(reason: .badMessageId)) }
        return .success((priority, value.lowercased()))
    }

    /// The payload's size and form; its `aps.badge`, if any.
    func checkPayload(_ body: [UInt8], pushType: APNsPushType) -> Result<Int?, Problem> {
        if body.isEmpty { return .failure(Problem(reason: .payloadEmpty)) }
        if body.count > pushType.maximumPayloadSize { return .failure(Problem(reason: .payloadTooLarge)) }
        guard case .valid(let badge) = APNsPayloadScanner.scan(body) else { return .failure(.payloadInvalid) }
        return .success(badge)
    }

    /// Checks a provider token; returns the reason to reject it, or nil.
    func checkJWT(_ authorization: String, now: Date, lastVerified: inout VerifiedProviderToken?) -> APNsReason? {
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return .invalidProviderToken }
        let jwt = String(parts[1])
        if let cached = lastVerified, cached.jwt == jwt {
            return Int64(now.timeIntervalSince1970) - cached.iat > options.maxTokenAge ? .expiredProviderToken : nil
        }
        let sections = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard sections.count == 3,
            let headerBytes = Self.base64URL(sections[0]), let claimBytes = Self.base64URL(sections[1]),
            let signature = Self.base64URL(sections[2]),
            let header = try? JSONSerialization.jsonObject(with: Data(headerBytes)) as? [String: Any],
            let claims = try? JSONSerialization.jsonObject(with: Data(claimBytes)) as? [String: Any],
            header["alg"] as? String == "ES256", let kid = header["kid"] as? String, !kid.isEmpty,
            let iss = claims["iss"] as? String, !iss.isEmpty, let iat = (claims["iat"] as? NSNumber)?.int64Value
        else { return .invalidProviderToken }
        if let expected = options.jwtKeyID, expected != kid { return .invalidProviderToken }
        let age = Int64(now.timeIntervalSince1970) - iat
        if age > options.maxTokenAge { return .expiredProviderToken }
        var topics: Set<String>?
        var keyTopics: Set<String>?
        var verificationKey = publicKey
        if !providerKeys.isEmpty {
            // Several teams: the key id names the key, which must belong to the issuing team.
            guard let known = providerKeys[kid], known.key.teamID == iss else { return .invalidProviderToken }
            verificationKey = known.publicKey
            topics = known.key.topics
            keyTopics = known.key.keyTopics
            // An environment-restricted key signs for its environment's host only.
            if let limit = known.key.environment, let host = options.environment, limit != host { return .badEnvironmentKeyIdInToken }
        }
        if let publicKeyBytes = verificationKey {
            guard let publicKey = try? P256.Signing.PublicKey(x963Representation: publicKeyBytes),
                let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
                publicKey.isValidSignature(ecdsa, for: Data((sections[0] + "." + sections[1]).utf8))
            else { return .invalidProviderToken }
        }
        lastVerified = VerifiedProviderToken(jwt: jwt, kid: kid, iat: iat, topics: topics, keyTopics: keyTopics)
        return nil
    }

    static func base64URL(_ text: Substring) -> [UInt8]? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64.append("=") }
        return Data(base64Encoded: base64).map { Array($0) }
    }
}


/// One request stream of a simulator connection, from its HEADERS to its answer.
struct SimulatorStream {
    var headers: HPACKHeaders?
    var body: ByteBuffer?
    /// The request ended (END_STREAM seen) and was handled.
    var handled = false
    /// Counted in ``SimulatorConnectionState/openAcceptedStreams`` until the stream closes.
    var accepted = false
    /// The answer held back by a `.delay` fault.
    var delayed: Scheduled<Void>?
}

/// Serves APNs requests on one HTTP/2 connection at the frame level: HEADERS and DATA are collected per stream id,
/// the request is validated when the stream ends, and the answer goes out on the same stream. No per-stream child
/// channel is created (a channel and pipeline per request would cost more than the request itself).
final class SimulatorConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private let simulator: APNsSimulator
    private let connection: SimulatorConnectionState
    private let validator: SimulatorValidator
    private let role: APNsSimulator.Role
    private var streams: [HTTP2StreamID: SimulatorStream] = [:]

    init(simulator: APNsSimulator, connection: SimulatorConnectionState, role: APNsSimulator.Role) {
        self.simulator = simulator
        self.connection = connection
        self.role = role
        self.validator = SimulatorValidator(options: simulator.options, publicKey: simulator.jwtPublicKey)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let payload):
            if let existing = streams[frame.streamID] {
                // Trailers: only their END_STREAM matters.
                if payload.endStream && !existing.handled { handle(context: context, streamID: frame.streamID) }
                return
            }
            connection.highestStreamID = max(connection.highestStreamID, Int(frame.streamID))
            streams[frame.streamID] = SimulatorStream(headers: payload.headers)
            if payload.endStream { handle(context: context, streamID: frame.streamID) }
        case .data(let payload):
            guard streams[frame.streamID] != nil else { return }
            if case .byteBuffer(var buffer) = payload.data {
                if streams[frame.streamID]?.body == nil {
                    streams[frame.streamID]?.body = buffer
                } else {
                    streams[frame.streamID]?.body?.writeBuffer(&buffer)
                }
            }
            if payload.endStream { handle(context: context, streamID: frame.streamID) }
        default:
            // SETTINGS, PING (acknowledged by NIOHTTP2Handler), WINDOW_UPDATE, RST_STREAM (the stream-closed event
            // follows), GOAWAY from the client.
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let closed = event as? StreamClosedEvent, let stream = streams.removeValue(forKey: closed.streamID) {
            // A reset stream is never answered (a delayed answer is dropped, and not recorded).
            stream.delayed?.cancel()
            if stream.accepted {
                connection.openAcceptedStreams -= 1
                connection.closeIfDone()
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        for stream in streams.values { stream.delayed?.cancel() }
        streams.removeAll()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        simulator.logger.debug("simulator connection error", metadata: ["error": "\(error)"])
        // Stream-level problems are reported here too (NIOHTTP2Handler has reset the stream already); they must
        // not take down the other streams. Transport and TLS failures end the connection.
        if error is IOError || error is NIOSSLError || error is BoringSSLError || error is ChannelError {
            context.close(promise: nil)
        }
    }

    private func handle(context: ChannelHandlerContext, streamID: HTTP2StreamID) {
        guard var stream = streams[streamID], !stream.handled, let headers = stream.headers else { return }
        stream.handled = true
        if let last = connection.goAwayLastStreamID, Int(streamID) > last {
            streams[streamID] = stream
            write(context: context, HTTP2Frame(streamID: streamID, payload: .rstStream(.refusedStream)))
            return
        }
        stream.accepted = true
        connection.openAcceptedStreams += 1
        // Faults match a device token, or a broadcast's channel id.
        let path = headers.first(name: ":path") ?? ""
        let target = path.hasPrefix(SimulatorValidator.broadcastPathPrefix)
            ? headers.first(name: "apns-channel-id") ?? "" : String(path.dropFirst("/3/device/".count)).lowercased()
        let authorization = headers.first(name: "authorization")
        if let authorization, authorization != connection.lastAuthorization {
            connection.lastAuthorization = authorization
            simulator.noteAuthorization(authorization)
        }
        let fault = role == .management ? nil : simulator.takeFault(token: target, authorization: authorization)
        if case .delay(let amount) = fault {
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            stream.delayed = context.eventLoop.scheduleTask(in: amount) {
                let (handler, context) = bound.value
                guard handler.streams[streamID] != nil else { return }
                handler.streams[streamID]?.delayed = nil
                handler.answer(context: context, streamID: streamID, fault: nil)
            }
            streams[streamID] = stream
            return
        }
        streams[streamID] = stream
        answer(context: context, streamID: streamID, fault: fault)
    }

    private func answer(context: ChannelHandlerContext, streamID: HTTP2StreamID, fault: SimulatorFault?) {
        guard let stream = streams[streamID], let headers = stream.headers else { return }
        if role == .management {
            answerManagement(context: context, streamID: streamID, headers: headers, body: stream.body.map { Array($0.readableBytesView) } ?? [])
            return
        }
        let requestID = headers.first(name: "apns-id") ?? headers.first(name: "apns-request-id")
        // Apple's sandbox host names each device request's entry in the Push Notifications Console's delivery log.
        let uniqueID = simulator.options.environment == .sandbox && (headers.first(name: ":path") ?? "").hasPrefix("/3/device/")
            ? APNsUUIDText.format(UUID()) : nil
        let extra = uniqueID.map { [("apns-unique-id", $0)] } ?? []
        switch fault {
        case .status(let status, let reason):
            respond(context: context, streamID: streamID, status: status, apnsID: requestID, reason: reason, timestamp: nil, extraHeaders: extra)
            return
        case .unregistered(let timestamp):
            respond(context: context, streamID: streamID, status: 410, apnsID: requestID, reason: "Unregistered", timestamp: timestamp, extraHeaders: extra)
            return
        case .badDeviceToken:
            respond(context: context, streamID: streamID, status: 400, apnsID: requestID, reason: "BadDeviceToken", timestamp: nil, extraHeaders: extra)
            return
        case .closeConnection:
            connection.channel.close(promise: nil)
            return
        case .freeze:
            connection.frozen = true
            return
        case .shutdown:
            respond(context: context, streamID: streamID, status: 503, apnsID: requestID, reason: "Shutdown", timestamp: nil, extraHeaders: extra)
            return
        case .tooManyRequests(let retryAfterSeconds):
            respond(context: context, streamID: streamID, status: 429, idHeader: "apns-id", id: requestID,
                    extraHeaders: (retryAfterSeconds.map { [("retry-after", String($0))] } ?? []) + extra, json: "{\"reason\":\"TooManyRequests\"}")
            return
        case .expiredProviderToken:
            respond(context: context, streamID: streamID, status: 403, apnsID: requestID, reason: "ExpiredProviderToken", timestamp: nil, extraHeaders: extra)
            return
        case .resetStream:
            write(context: context, HTTP2Frame(streamID: streamID, payload: .rstStream(.internalError)))
            return
        case .delay, .goAway, .goAwayAfterStream, .setMaxConcurrentStreams, .binaryStatus, nil:
            break
        }
        var lastVerified = connection.lastVerifiedJWT
        let simulator = self.simulator
        lookUpCertificateTopic(context: context)
        let body = stream.body.map { Array($0.readableBytesView) } ?? []
        let verdict = validator.validate(
            headers: headers, body: body, now: simulator.options.now(),
            certificateAuthenticated: simulator.options.requireClientCertificate, certificateTopic: connection.certificateTopic,
            lastVerifiedJWT: &lastVerified, tokenStatus: { simulator.tokenStatus($0) },
            channelExists: { simulator.channelExists(bundleID: $0, channelID: $1) })
        connection.lastVerifiedJWT = lastVerified
        switch verdict {
        case .reject(let status, let reason, let timestamp):
            respond(context: context, streamID: streamID, status: status, apnsID: requestID, reason: reason, timestamp: timestamp, extraHeaders: extra)
        case .accept(var delivery):
            delivery.uniqueID = uniqueID
            simulator.record(delivery)
            respond(context: context, streamID: streamID, status: 200, apnsID: delivery.apnsID, reason: nil, timestamp: nil, extraHeaders: extra)
            afterAcceptance(fault, streamID: streamID)
        case .acceptBroadcast(let broadcast):
            simulator.record(broadcast)
            respond(context: context, streamID: streamID, status: 200, idHeader: "apns-request-id", id: broadcast.requestID, extraHeaders: [], json: nil)
            afterAcceptance(fault, streamID: streamID)
        }
    }

    /// The faults that act once a request was accepted.
    private func afterAcceptance(_ fault: SimulatorFault?, streamID: HTTP2StreamID) {
        if case .goAway = fault { connection.goAway() }
        if case .goAwayAfterStream = fault { connection.goAway(lastStreamID: Int(streamID)) }
        if case .setMaxConcurrentStreams(let limit) = fault { simulator.setMaxConcurrentStreams(limit) }
    }

    /// A channel management request: path, method and authentication, then the channel table answers.
    private func answerManagement(context: ChannelHandlerContext, streamID: HTTP2StreamID, headers: HPACKHeaders, body: [UInt8]) {
        let requestID = headers.first(name: "apns-request-id")
        var answer: SimulatorManagementAnswer
        if let (bundleID, resource) = SimulatorChannels.parseManagementPath(headers.first(name: ":path") ?? "") {
            lookUpCertificateTopic(context: context)
            var lastVerified = connection.lastVerifiedJWT
            let authenticated = validator.authenticate(
                headers, now: simulator.options.now(), certificateAuthenticated: simulator.options.requireClientCertificate,
                certificateTopic: connection.certificateTopic, lastVerifiedJWT: &lastVerified)
            connection.lastVerifiedJWT = lastVerified
            if case .failure(let problem) = authenticated {
                answer = .reject(problem.reason)
            } else if let allowed = simulator.options.allowedTopics, !allowed.contains(bundleID) {
                answer = .reject(.topicDisallowed)
            } else if case .success(let topics?) = authenticated, !topics.contains(bundleID) {
                // A team's key, an app's certificate: its own apps' channels only.
                answer = .reject(.topicDisallowed)
            } else {
                answer = simulator.manage(
                    method: headers.first(name: ":method") ?? "", bundleID: bundleID, resource: resource,
                    channelHeader: headers.first(name: "apns-channel-id"), body: body)
            }
        } else {
            answer = .reject(.badPath)
        }
        var extra: [(String, String)] = []
        if let channelID = answer.channelID { extra.append(("apns-channel-id", channelID)) }
        let json = answer.reason.map { "{\"reason\":\"\($0)\"}" } ?? answer.body
        respond(context: context, streamID: streamID, status: answer.status, idHeader: "apns-request-id", id: requestID, extraHeaders: extra, json: json)
    }

    /// Looks up, once per connection, the app of its client certificate (certificate auth).
    private func lookUpCertificateTopic(context: ChannelHandlerContext) {
        guard simulator.options.requireClientCertificate && !connection.certificateTopicLookedUp else { return }
        connection.certificateTopic = Self.certificateTopic(of: context.channel, among: simulator.options.clientCertificateTopics)
        connection.certificateTopicLookedUp = true
    }

    /// The bundle id of the peer's client certificate (its subject CN) when it is one of `topics`.
    static func certificateTopic(of channel: any Channel, among topics: [String]) -> String? {
        guard !topics.isEmpty,
              let peer = try? channel.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self).peerCertificate,
              let der = try? peer.toDERBytes(),
              let certificate = try? Certificate(derEncoded: der)
        else { return nil }
        for name in certificate.subject {
            for attribute in name where attribute.type == .RDNAttributeType.commonName {
                let commonName = String(describing: attribute.value)
                if topics.contains(commonName) { return commonName }
            }
        }
        return nil
    }

    private func respond(context: ChannelHandlerContext, streamID: HTTP2StreamID, status: Int, apnsID: String?, reason: String?, timestamp: Int64?,
                         extraHeaders: [(String, String)] = []) {
        var json: String?
        if let reason {
            json = "{\"reason\":\"\(reason)\"" + (timestamp.map { ",\"timestamp\":\($0)" } ?? "") + "}"
        }
        respond(context: context, streamID: streamID, status: status, idHeader: "apns-id", id: apnsID, extraHeaders: extraHeaders, json: json)
    }

    /// An answer: the status, the request's id under `idHeader` (a new UUID when it sent none), and a JSON body if any.
    private func respond(
        context: ChannelHandlerContext, streamID: HTTP2StreamID, status: Int, idHeader: String, id: String?, extraHeaders: [(String, String)], json: String?
    ) {
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: String(status))
        headers.add(name: idHeader, value: id ?? APNsUUIDText.format(UUID()), indexing: .nonIndexable)
        for (name, value) in extraHeaders { headers.add(name: name, value: value, indexing: .nonIndexable) }
        guard let json else {
            write(context: context, HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: true))))
            return
        }
        headers.add(name: "content-type", value: "application/json")
        write(context: context, HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: false))))
        var buffer = context.channel.allocator.buffer(capacity: json.utf8.count)
        buffer.writeString(json)
        write(context: context, HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(buffer), endStream: true))))
    }

    /// Writes and flushes each frame: NIOHTTP2Handler releases the DATA frames of one flush in hash order, so a flush
    /// per many answers would reorder them. APNsFlushCoalescingHandler makes it one socket write per event-loop tick.
    private func write(context: ChannelHandlerContext, _ frame: HTTP2Frame) {
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
    }
}
