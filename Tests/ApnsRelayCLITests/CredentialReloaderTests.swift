import APNs
import Crypto
import Foundation
import Logging
import Testing
import TestSupport

@testable import apns_relay

@Suite("Credential reload")
struct CredentialReloaderTests {
    @Test("files are loaded again when their digest changes; a digest that failed is not tried again until it changes")
    func decisions() {
        var state = CredentialReloadState(loaded: [1])
        #expect(state.decide([1]) == .unchanged)
        #expect(state.decide([2]) == .reload)
        state.failedToLoad([2])
        #expect(state.decide([2]) == .unchanged, "a broken file is reported once")
        #expect(state.decide([3]) == .reload)
        state.reloaded([3])
        #expect(state.decide([3]) == .unchanged && state.decide([2]) == .reload && state.decide([1]) == .reload)
    }

    @Test("the digest follows a Secret's ..data swap; a broken key leaves the provider's key in use, a good one replaces it")
    func reloadThroughSymlinks() throws {
        let directory = scratchPath("reload")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let secret = try MountedSecret(directory: directory, files: [
            "AuthKey.p8": Data(P256.Signing.PrivateKey().pemRepresentation.utf8), "key-id": Data("KEYOLD0001".utf8),
        ])
        let files = [secret.path("AuthKey.p8"), secret.path("key-id")]
        let app = RelayConfiguration.App(topic: nil, authentication: .token(keyFile: files[0], keyID: "KEYOLD0001", teamID: "TEAM123456"),
                                         keyPrefix: "apns.auth", keyIDFile: files[1])
        let logger = Logger(label: "test")
        let credential = try RelayConfiguration.APNsSettings.load(app, logger: logger)
        guard case .token(let provider) = credential else { throw CocoaError(.featureUnsupported) }
        let reloadable = ReloadableCredential(
            group: APNsCredentialGroup(name: "key:KEYOLD0001", topics: [], environments: [.production, .sandbox], credential: credential,
                                       keyPrefix: "apns.auth", source: app),
            factories: [], supervisors: [])
        #expect(reloadable.files == files)
        let before = try #require(CredentialReloadService.digest(of: files))

        try secret.update(["AuthKey.p8": Data("not a key".utf8), "key-id": Data("KEYNEW0001".utf8)])
        #expect(CredentialReloadService.digest(of: files) != before)
        #expect(throws: (any Error).self) { try CredentialReloadService.reload(reloadable, logger: logger) }
        #expect(provider.keyID == "KEYOLD0001")

        try secret.update(["AuthKey.p8": Data(P256.Signing.PrivateKey().pemRepresentation.utf8), "key-id": Data("KEYNEW0001\n".utf8)])
        #expect(try CredentialReloadService.reload(reloadable, logger: logger) == "key:KEYNEW0001")
        #expect(provider.keyID == "KEYNEW0001")
    }
}
