import APNs
import Crypto
import Foundation
import Logging
import Metrics
import ServiceLifecycle

/// Whether a credential's files changed since it was loaded, as a pure state: what the reloader compares each
/// check's digest of the files with. A digest that failed to load is not tried again until the files change
/// once more (a broken file is logged once, not every check).
struct CredentialReloadState: Sendable, Equatable {
    /// The digest of the files the credential in use was loaded from.
    private(set) var loaded: [UInt8]
    /// The digest of files that did not load (the credential in use stayed).
    private(set) var failed: [UInt8]?

    init(loaded: [UInt8]) {
        self.loaded = loaded
    }

    enum Decision: Sendable, Equatable {
        /// The files are those in use, or those that failed already.
        case unchanged
        /// The files changed: load them.
        case reload
    }

    func decide(_ digest: [UInt8]) -> Decision {
        digest == loaded || digest == failed ? .unchanged : .reload
    }

    /// The files of `digest` are now the credential in use.
    mutating func reloaded(_ digest: [UInt8]) {
        loaded = digest
        failed = nil
    }

    /// The files of `digest` did not load; the credential in use stays.
    mutating func failedToLoad(_ digest: [UInt8]) {
        failed = digest
    }
}

/// One credential the relay sends with, and what uses it: the pools' factories (new connections) and supervisors
/// (open connections).
struct ReloadableCredential: Sendable {
    let group: APNsCredentialGroup
    let factories: [any APNsConnectionFactory]
    let supervisors: [APNsSupervisor]

    /// The files it is loaded from, in a fixed order: the key (and its id's file), the certificate and its key, or
    /// the PKCS#12 bundle. Read through symlinks, so a Kubernetes Secret's atomic swap of `..data` is a change.
    var files: [String] {
        switch group.source.authentication {
        case .none: []
        case .token(let keyFile, _, _): [keyFile] + (group.source.keyIDFile.map { [$0] } ?? [])
        case .certificate(let certificateFile, let privateKeyFile): [certificateFile, privateKeyFile]
        case .pkcs12(let file, _): [file]
        }
    }

    /// What names the credential in use: `key:<key id>` or `certificate:<serial, hex>`.
    static func inUse(_ credential: APNsCredential) -> String {
        switch credential {
        case .token(let provider): "key:\(provider.keyID)"
        case .certificate(let certificate): "certificate:" + certificate.chain[0].serialNumber.map { String(format: "%02x", $0) }.joined()
        }
    }
}

/// Loads a credential again when its files change, without a restart (`apns.credential_check_interval_s`): a
/// rotated .p8 key (and the key id of `key_id_file`) signs the next JWT at once; a renewed certificate is used by new
/// connections and the open ones are replaced gracefully (no notification fails for it). Files that do not load
/// leave the credential in use as it is: the error is logged and counted, and readiness keeps answering for the
/// old credential.
///
/// Metrics: `apns_credential_info{credential,in_use}` (1 for the key id or certificate serial in use, 0 for one
/// replaced), `apns_credential_loaded_timestamp_seconds{credential}`, `apns_credential_reloads_total{credential}`,
/// `apns_credential_reload_failures_total{credential}`.
struct CredentialReloadService: Service, CustomStringConvertible {
    let credentials: [ReloadableCredential]
    let interval: Duration
    let logger: Logger

    /// What the service lifecycle logs: the credentials' names, nothing they were loaded from.
    var description: String { "CredentialReloadService(\(credentials.map(\.group.name)))" }

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown { try await watch() }
        } catch is CancellationError {
            // The stop: nothing to hand over.
        }
    }

    /// Checks every credential's files each interval, until cancelled.
    private func watch() async throws {
        var states = credentials.map { CredentialReloadState(loaded: Self.digest(of: $0.files) ?? []) }
        var inUse = credentials.map { ReloadableCredential.inUse($0.group.credential) }
        for (credential, name) in zip(credentials, inUse) { Self.reportLoaded(credential.group.name, inUse: name, replacing: nil) }
        while true {
            try await Task.sleep(for: interval)
            for index in credentials.indices {
                check(credentials[index], state: &states[index], inUse: &inUse[index])
            }
        }
    }

    /// Loads `credential` again when its files changed since the last check.
    func check(_ credential: ReloadableCredential, state: inout CredentialReloadState, inUse: inout String) {
        let name = credential.group.name
        // Unreadable files digest to nothing: reported once, like files that do not load.
        let digest = Self.digest(of: credential.files) ?? []
        guard state.decide(digest) == .reload else { return }
        guard !digest.isEmpty else {
            state.failedToLoad(digest)
            return fail(name, "a file of the credential cannot be read (\(credential.files.joined(separator: ", ")))")
        }
        do {
            let replaced = try Self.reload(credential, logger: logger)
            state.reloaded(digest)
            Self.reportLoaded(name, inUse: replaced, replacing: inUse)
            logger.notice("APNs credential reloaded from its changed files", metadata: [
                "apns_credential": "\(name)", "in_use": "\(replaced)", "replaced": "\(inUse)"])
            inUse = replaced
        } catch {
            state.failedToLoad(digest)
            fail(name, "\(error)")
        }
    }

    private func fail(_ name: String, _ reason: String) {
        Counter(label: "apns_credential_reload_failures_total", dimensions: [("credential", name)]).increment()
        logger.error("APNs credential files changed but do not load; the credential in use stays", metadata: [
            "apns_credential": "\(name)", "error": "\(reason)"])
    }

    /// Loads the credential's files and puts them in use; returns what names the new one. Throws, changing nothing,
    /// when they do not load.
    static func reload(_ credential: ReloadableCredential, logger: Logger) throws -> String {
        var source = credential.group.source
        if let keyIDFile = source.keyIDFile, case .token(let keyFile, _, let teamID) = source.authentication {
            source.authentication = .token(keyFile: keyFile, keyID: try ConfigurationLoader.readKeyID(keyIDFile), teamID: teamID)
        }
        switch (credential.group.credential, source.authentication) {
        case (.token(let provider), .token(let keyFile, let keyID, let teamID)):
            provider.replaceSigner(try APNsJWTSigner(p8File: keyFile, keyID: keyID, teamID: teamID))
            return ReloadableCredential.inUse(.token(provider))
        case (.certificate, _):
            let loaded = try RelayConfiguration.APNsSettings.load(source, logger: logger)
            guard case .certificate(let certificate) = loaded else { throw ConfigurationError(key: source.keyPrefix, problem: "not a certificate") }
            var replacedAny = false
            for factory in credential.factories { replacedAny = try factory.replaceClientCertificate(certificate) || replacedAny }
            guard replacedAny else {
                throw ConfigurationError(key: source.keyPrefix, problem: "this transport keeps its certificate until a restart")
            }
            for supervisor in credential.supervisors { supervisor.replaceConnections() }
            return ReloadableCredential.inUse(loaded)
        default:
            throw ConfigurationError(key: source.keyPrefix, problem: "the credential's kind cannot change without a restart")
        }
    }

    /// `apns_credential_info` and `apns_credential_loaded_timestamp_seconds` for the credential now in use.
    static func reportLoaded(_ name: String, inUse: String, replacing: String?) {
        if let replacing, replacing != inUse { Gauge(label: "apns_credential_info", dimensions: [("credential", name), ("in_use", replacing)]).record(0) }
        Gauge(label: "apns_credential_info", dimensions: [("credential", name), ("in_use", inUse)]).record(1)
        Gauge(label: "apns_credential_loaded_timestamp_seconds", dimensions: [("credential", name)]).record(Date().timeIntervalSince1970)
        if replacing != nil { Counter(label: "apns_credential_reloads_total", dimensions: [("credential", name)]).increment() }
    }

    /// SHA-256 over the files' contents (each with its length, so two files' bytes cannot shift between them);
    /// `nil` when one cannot be read.
    static func digest(of files: [String]) -> [UInt8]? {
        var hash = SHA256()
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else { return nil }
            withUnsafeBytes(of: UInt64(data.count).littleEndian) { hash.update(bufferPointer: $0) }
            hash.update(data: data)
        }
        return Array(hash.finalize())
    }
}
