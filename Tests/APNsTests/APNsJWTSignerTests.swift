import APNs
import Crypto
import Foundation
import Synchronization
import Testing

/// A settable wall clock (epoch seconds).
final class FakeWallClock: Sendable {
    private let value: Mutex<Int64>
    init(_ start: Int64) { value = Mutex(start) }
    func now() -> Int64 { value.withLock { $0 } }
    func advance(seconds: Int64) { value.withLock { $0 += seconds } }
}

func decodeSegment(_ segment: Substring) throws -> [String: Any] {
    var base64 = segment.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while base64.count % 4 != 0 { base64.append("=") }
    let data = try #require(Data(base64Encoded: base64))
    return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
}

@Suite("Provider token (JWT)")
struct APNsJWTSignerTests {
    let key = P256.Signing.PrivateKey()

    func signer() throws -> APNsJWTSigner {
        try APNsJWTSigner(p8PEM: key.pemRepresentation, keyID: "ABCDE12345", teamID: "TEAM123456")
    }

    @Test("ES256 token: header alg/kid, claims iss/iat, verifies with the public key")
    func verifies() throws {
        let token = try signer().sign(issuedAt: 1_700_000_000)
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        #expect(parts.count == 3)
        let header = try decodeSegment(parts[0])
        let claims = try decodeSegment(parts[1])
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == "ABCDE12345")
        #expect(claims["iss"] as? String == "TEAM123456")
        #expect((claims["iat"] as? NSNumber)?.int64Value == 1_700_000_000)
        var base64 = parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64.append("=") }
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Data(base64Encoded: base64)))
        #expect(key.publicKey.isValidSignature(signature, for: Data((parts[0] + "." + parts[1]).utf8)))
        #expect(!P256.Signing.PrivateKey().publicKey.isValidSignature(signature, for: Data((parts[0] + "." + parts[1]).utf8)))
    }

    @Test("a bad key or key id is refused")
    func badKey() {
        #expect(throws: APNsCredentialError.self) { try APNsJWTSigner(p8PEM: "nope", keyID: "ABCDE12345", teamID: "T") }
        #expect(throws: APNsCredentialError.self) { try APNsJWTSigner(key: key, keyID: "AB\"CD", teamID: "T") }
    }

    @Test("one token shared, renewed when 50 minutes old")
    func renewalAt50Minutes() throws {
        let clock = FakeWallClock(1_700_000_000)
        let provider = APNsTokenProvider(signer: try signer(), now: { clock.now() })
        let first = provider.currentToken()
        #expect(provider.currentToken() == first)
        clock.advance(seconds: 50 * 60 - 1)
        #expect(provider.currentToken() == first)
        clock.advance(seconds: 1)
        let second = provider.currentToken()
        #expect(second != first)
        let claims = try decodeSegment(second.split(separator: ".")[1])
        let expectedIAT: Int64 = 1_700_000_000 + 50 * 60
        #expect((claims["iat"] as? NSNumber)?.int64Value == expectedIAT)
    }

    @Test("a rotated key signs the next token at once, with its own kid; the renewal clock starts again from it")
    func replacedSigner() throws {
        let clock = FakeWallClock(1_700_000_000)
        let provider = APNsTokenProvider(signer: try signer(), now: { clock.now() })
        let first = provider.currentToken()
        let generation = provider.generation
        clock.advance(seconds: 600)
        let rotated = P256.Signing.PrivateKey()
        provider.replaceSigner(try APNsJWTSigner(key: rotated, keyID: "NEWKEY1234", teamID: "TEAM123456"))
        let second = provider.currentToken()
        #expect(second != first && provider.keyID == "NEWKEY1234" && provider.generation == generation + 1)
        #expect(try decodeSegment(second.split(separator: ".")[0])["kid"] as? String == "NEWKEY1234")
        #expect((try decodeSegment(second.split(separator: ".")[1])["iat"] as? NSNumber)?.int64Value == 1_700_000_600)
        clock.advance(seconds: 50 * 60 - 1)
        #expect(provider.currentToken() == second, "50 minutes from the rotation, not from the first token")
    }

    @Test("ExpiredProviderToken signs a new token at once, once for every request of the old one; forced renewals are 60 s apart")
    func expiredProviderToken() throws {
        let clock = FakeWallClock(1_700_000_000)
        let provider = APNsTokenProvider(signer: try signer(), now: { clock.now() })
        let first = provider.currentToken()
        let firstGeneration = provider.generation
        // Seconds after it was signed: renewed at once all the same (that token is of no use any more).
        clock.advance(seconds: 5)
        #expect(provider.renewAfterExpiredProviderToken(generation: firstGeneration) == .renewed)
        let second = provider.currentToken()
        #expect(second != first)
        #expect(provider.generation == firstGeneration + 1)
        // Every other request that carried the old token: no second renewal.
        #expect(provider.renewAfterExpiredProviderToken(generation: firstGeneration) == .alreadyRenewed)
        #expect(provider.currentToken() == second)
        // The new token answered ExpiredProviderToken too, within the floor: held back (TooManyProviderTokenUpdates).
        clock.advance(seconds: 59)
        #expect(provider.renewAfterExpiredProviderToken(generation: firstGeneration + 1) == .deferred)
        #expect(provider.currentToken() == second)
        // Once the floor has passed it renews again.
        clock.advance(seconds: 1)
        #expect(provider.renewAfterExpiredProviderToken(generation: firstGeneration + 1) == .renewed)
        #expect(provider.currentToken() != second)
    }
}
