public import Crypto
public import Foundation
import Metrics
import Synchronization

/// Errors while loading keys and certificates.
public struct APNsCredentialError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong (never contains secret material).
    public let message: String
    /// Creates an error.
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Base64url without padding (RFC 7515).
enum Base64URL {
    static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var string = Data(bytes).base64EncodedString()
        string = string.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while string.hasSuffix("=") { string.removeLast() }
        return string
    }

    static func decode(_ string: some StringProtocol) -> [UInt8]? {
        var base64 = string.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64.append("=") }
        return Data(base64Encoded: base64).map { Array($0) }
    }
}

/// Signs APNs provider tokens: ES256 JWTs with header `alg`/`kid` and claims `iss`/`iat`.
public struct APNsJWTSigner: Sendable {
    /// The 10-character key id (`kid`).
    public let keyID: String
    /// The 10-character team id (`iss`).
    public let teamID: String
    /// The key's raw scalar; `P256.Signing.PrivateKey` is not `Sendable`, so the key is rebuilt to sign
    /// (once per token renewal).
    private let keyBytes: Data

    /// Creates a signer from a private key.
    public init(key: P256.Signing.PrivateKey, keyID: String, teamID: String) throws(APNsCredentialError) {
        for (name, value) in [("key id", keyID), ("team id", teamID)] {
            guard !value.isEmpty, value.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5a) || ($0 >= 0x61 && $0 <= 0x7a) })
            else { throw APNsCredentialError("apns.auth: \(name) must be alphanumeric") }
        }
        self.keyBytes = key.rawRepresentation
        self.keyID = keyID
        self.teamID = teamID
    }

    /// Creates a signer from the contents of a `.p8` file (PKCS#8 PEM).
    public init(p8PEM: String, keyID: String, teamID: String) throws(APNsCredentialError) {
        let key: P256.Signing.PrivateKey
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: p8PEM)
        } catch {
            throw APNsCredentialError("apns.auth.key_file: not a PKCS#8 PEM P-256 private key")
        }
        try self.init(key: key, keyID: keyID, teamID: teamID)
    }

    /// Creates a signer from a `.p8` file.
    public init(p8File path: String, keyID: String, teamID: String) throws(APNsCredentialError) {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw APNsCredentialError("apns.auth.key_file: cannot read \(path)")
        }
        try self.init(p8PEM: text, keyID: keyID, teamID: teamID)
    }

    /// The public key matching the signing key (for verifiers such as the simulator).
    public var publicKey: P256.Signing.PublicKey? { (try? P256.Signing.PrivateKey(rawRepresentation: keyBytes))?.publicKey }

    /// Signs a token issued at `issuedAt` (epoch seconds).
    public func sign(issuedAt: Int64) -> String {
        let header = Base64URL.encode(Array("{\"alg\":\"ES256\",\"kid\":\"\(keyID)\"}".utf8))
        let claims = Base64URL.encode(Array("{\"iss\":\"\(teamID)\",\"iat\":\(issuedAt)}".utf8))
        let signingInput = header + "." + claims
        // ECDSA signing can only fail on a broken key; fall back to an unsigned token APNs will reject (403)
        // rather than crash.
        let key = try? P256.Signing.PrivateKey(rawRepresentation: keyBytes)
        let signature = (try? key?.signature(for: Array(signingInput.utf8)).rawRepresentation) ?? Data()
        return signingInput + "." + Base64URL.encode(signature)
    }
}

/// The renewal rules for the shared provider token, as a pure state machine.
///
/// - A token is renewed when it is `renewalAge` old (50 minutes).
/// - After a 403 `ExpiredProviderToken` for the current token it is renewed at once, unless the current
///   token is younger than `minimumRenewalInterval` (20 minutes): APNs answers 429
///   `TooManyProviderTokenUpdates` to more frequent updates.
public struct APNsTokenRenewalStateMachine: Sendable, Hashable {
    /// The current token and its `iat` (epoch seconds).
    public private(set) var current: (token: String, issuedAt: Int64)?
    /// How old a token may get before it is renewed (seconds).
    public let renewalAge: Int64
    /// The minimum spacing between two renewals (seconds).
    public let minimumRenewalInterval: Int64

    /// What the caller must do.
    public enum Action: Sendable, Hashable {
        /// Use this token.
        case use(String)
        /// Sign a new token with this `iat`, then call ``installed(token:issuedAt:)``.
        case sign(issuedAt: Int64)
    }

    /// Creates the state machine.
    public init(renewalAge: Int64 = 50 * 60, minimumRenewalInterval: Int64 = 20 * 60) {
        self.renewalAge = renewalAge
        self.minimumRenewalInterval = minimumRenewalInterval
    }

    /// The token to use at `now` (epoch seconds).
    public func token(now: Int64) -> Action {
        guard let current else { return .sign(issuedAt: now) }
        if now - current.issuedAt >= renewalAge { return .sign(issuedAt: now) }
        return .use(current.token)
    }

    /// Records a freshly signed token.
    public mutating func installed(token: String, issuedAt: Int64) {
        current = (token, issuedAt)
    }

    /// APNs answered 403 ExpiredProviderToken to `token`. Returns `.sign` when a renewal is due now.
    public mutating func expiredProviderToken(_ token: String, now: Int64) -> Action {
        guard let current else { return .sign(issuedAt: now) }
        guard current.token == token else { return .use(current.token) }  // already renewed
        if now - current.issuedAt >= minimumRenewalInterval { return .sign(issuedAt: now) }
        return .use(current.token)
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.current?.token == rhs.current?.token && lhs.current?.issuedAt == rhs.current?.issuedAt
            && lhs.renewalAge == rhs.renewalAge && lhs.minimumRenewalInterval == rhs.minimumRenewalInterval
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(current?.token)
        hasher.combine(current?.issuedAt)
    }
}

/// The one provider token shared by every connection of a credential. Thread-safe.
public final class APNsTokenProvider: Sendable {
    private let signer: APNsJWTSigner
    private let now: @Sendable () -> Int64
    private let state: Mutex<State>

    private struct State {
        var machine: APNsTokenRenewalStateMachine
        /// `bearer <token>` for the current token, built once per token rather than once per request.
        var authorization: (token: String, header: String)?
    }

    /// Creates a provider. `now` returns UNIX epoch seconds (inject a fake clock in tests).
    public init(
        signer: APNsJWTSigner,
        renewalAge: Int64 = 50 * 60,
        minimumRenewalInterval: Int64 = 20 * 60,
        now: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }
    ) {
        self.signer = signer
        self.now = now
        self.state = Mutex(State(machine: APNsTokenRenewalStateMachine(renewalAge: renewalAge, minimumRenewalInterval: minimumRenewalInterval)))
    }

    /// The `kid` of the signing key.
    public var keyID: String { signer.keyID }

    /// The current token, renewed when it is due.
    public func currentToken() -> String { currentAuthorization().token }

    /// The current token (renewed when it is due) and its `authorization` header value, `bearer <token>`.
    public func currentAuthorization() -> (token: String, header: String) {
        let now = self.now()
        return state.withLock { state in
            let token: String
            switch state.machine.token(now: now) {
            case .use(let current): token = current
            case .sign(let iat):
                token = signer.sign(issuedAt: iat)
                state.machine.installed(token: token, issuedAt: iat)
                Counter(label: "apns_jwt_renewals_total", dimensions: [("reason", "scheduled")]).increment()
            }
            if let cached = state.authorization, cached.token == token { return cached }
            let authorization = (token: token, header: "bearer " + token)
            state.authorization = authorization
            return authorization
        }
    }

    /// Reports a 403 ExpiredProviderToken answered to `token`; renews at most once per minimum interval.
    /// Returns `true` when a new token was signed.
    @discardableResult
    public func providerTokenExpired(_ token: String) -> Bool {
        let now = self.now()
        return state.withLock { state in
            switch state.machine.expiredProviderToken(token, now: now) {
            case .use: return false
            case .sign(let iat):
                state.machine.installed(token: signer.sign(issuedAt: iat), issuedAt: iat)
                Counter(label: "apns_jwt_renewals_total", dimensions: [("reason", "expired_provider_token")]).increment()
                return true
            }
        }
    }
}
