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

/// What ``APNsTokenProvider/renewAfterExpiredProviderToken(generation:)`` did.
public enum APNsTokenRenewal: Sendable, Hashable {
    /// A new token was signed: retry with it.
    case renewed
    /// A newer token was signed already: retry with it.
    case alreadyRenewed
    /// No new token before the forced-renewal floor has passed: retry after a backoff.
    case deferred
}

/// The one provider token shared by every connection of a credential (a team). Thread-safe.
///
/// Metrics: `apns_jwt_renewals_total{reason}` (`scheduled`, `expired_provider_token`) and
/// `apns_jwt_renewals_deferred_total` (an `ExpiredProviderToken` within the forced-renewal floor).
public final class APNsTokenProvider: Sendable {
    private let now: @Sendable () -> Int64
    private let state: Mutex<State>
    private let scheduledRenewals = Counter(label: "apns_jwt_renewals_total", dimensions: [("reason", "scheduled")])
    private let forcedRenewals = Counter(label: "apns_jwt_renewals_total", dimensions: [("reason", "expired_provider_token")])
    private let deferredRenewals = Counter(label: "apns_jwt_renewals_deferred_total")

    private struct State {
        /// Signs new tokens; replaced when the key is rotated.
        var signer: APNsJWTSigner
        var machine: APNsTokenRenewalStateMachine
        /// `bearer <token>` for the current token, built once per token rather than once per request.
        var authorization: (token: String, header: String)?
    }

    /// Creates a provider. `now` returns UNIX epoch seconds (inject a fake clock in tests). `forcedRenewalFloor` is
    /// the least time between two renewals forced by `ExpiredProviderToken`, in seconds.
    public init(
        signer: APNsJWTSigner,
        renewalAge: Int64 = 50 * 60,
        forcedRenewalFloor: Int64 = 60,
        now: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }
    ) {
        self.now = now
        self.state = Mutex(State(signer: signer, machine: APNsTokenRenewalStateMachine(renewalAge: renewalAge, forcedRenewalFloor: forcedRenewalFloor)))
    }

    /// The `kid` of the signing key.
    public var keyID: String { state.withLock { $0.signer.keyID } }

    /// Signs with `signer` from now on (a rotated key): a token of it replaces the current one at once, so requests
    /// from now on carry the new key's token. Not a forced renewal: APNs sees one new token, as at a scheduled one.
    public func replaceSigner(_ signer: APNsJWTSigner) {
        let now = self.now()
        state.withLock { state in
            state.signer = signer
            state.machine.installed(token: signer.sign(issuedAt: now), issuedAt: now)
        }
    }

    /// Names the current token (how many were signed so far), without its text: what a sender keeps to report an
    /// `ExpiredProviderToken` for the token it sent.
    public var generation: UInt64 { state.withLock { $0.machine.generation } }

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
                token = state.signer.sign(issuedAt: iat)
                state.machine.installed(token: token, issuedAt: iat)
                scheduledRenewals.increment()
            }
            if let cached = state.authorization, cached.token == token { return cached }
            let authorization = (token: token, header: "bearer " + token)
            state.authorization = authorization
            return authorization
        }
    }

    /// APNs answered 403 ExpiredProviderToken to the token of `generation`: signs a new one at once, unless a newer
    /// one is there already or a renewal was forced less than the floor ago.
    @discardableResult
    public func renewAfterExpiredProviderToken(generation: UInt64) -> APNsTokenRenewal {
        let now = self.now()
        return state.withLock { state in
            switch state.machine.expiredProviderToken(generation: generation, now: now) {
            case .alreadyRenewed:
                return .alreadyRenewed
            case .deferred:
                deferredRenewals.increment()
                return .deferred
            case .sign(let iat):
                state.machine.installed(token: state.signer.sign(issuedAt: iat), issuedAt: iat)
                forcedRenewals.increment()
                return .renewed
            }
        }
    }
}
