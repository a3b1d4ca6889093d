import APNs
import Crypto
import Foundation
import NIOHPACK

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
