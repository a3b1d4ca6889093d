import APNs
import Logging

/// The credential of one or more apps, loaded once, and the topics it sends for. APNs connections are
/// shared the way credentials are: token apps that name one key share its JWT and so one pool per
/// environment it is valid in; certificate apps share a pool when they name the same certificate.
struct APNsCredentialGroup: Sendable {
    /// Names the group in logs and in the `credential` label of connection gauges: `key:<key id>` or
    /// `certificate:<first app's topic>` (`certificate:*` for the single form).
    var name: String
    /// The topics it sends for; empty for the single `apns.auth.*` form, which sends for every topic.
    var topics: [String]
    /// The APNs environments its credential is valid in (a token key's `key_environment`; both otherwise).
    var environments: [APNsEnvironment]
    var credential: APNsCredential
    /// Where its settings live (the first app's), for messages.
    var keyPrefix: String
    /// The settings it was loaded from (the first app's), to load it again when its files change.
    var source: RelayConfiguration.App

    /// Whether this is the single form's group, which carries every topic.
    var carriesEveryTopic: Bool { topics.isEmpty }

    /// The client certificate of certificate auth.
    var clientCertificate: APNsClientCertificate? {
        if case .certificate(let certificate) = credential { return certificate }
        return nil
    }
}

extension RelayConfiguration.APNsSettings {
    /// Every app's credential, loaded and checked now (a bad file stops the start with exit 2 naming the app's
    /// key), grouped into the pools that share connections. Certificate expiry is exported per app as
    /// `apns_certificate_expiry_seconds{topic}` (`*` for the single form).
    func credentialGroups(logger: Logger) throws(ConfigurationError) -> [APNsCredentialGroup] {
        var groups: [APNsCredentialGroup] = []
        // Token apps are grouped by team, certificate apps by their files.
        var groupOfIdentity: [String: Int] = [:]
        for app in resolvedApps {
            let identity: String
            switch app.authentication {
            case .none: continue
            case .token(_, let keyID, _): identity = "key:\(keyID)"
            case .certificate(let certificateFile, let privateKeyFile): identity = "pem:\(certificateFile)\u{0}\(privateKeyFile)"
            case .pkcs12(let file, _): identity = "p12:\(file)"
            }
            if let index = groupOfIdentity[identity] {
                if let topic = app.topic { groups[index].topics.append(topic) }
                if let certificate = groups[index].clientCertificate { certificate.reportExpiry(logger: logger, dimensions: [("topic", app.topic ?? "*")]) }
                continue
            }
            let credential = try Self.load(app, logger: logger)
            let name: String
            switch app.authentication {
            case .token(_, let keyID, _): name = "key:\(keyID)"
            default: name = "certificate:\(app.topic ?? "*")"
            }
            groupOfIdentity[identity] = groups.count
            groups.append(APNsCredentialGroup(name: name, topics: app.topic.map { [$0] } ?? [], environments: app.environments, credential: credential,
                                              keyPrefix: app.keyPrefix, source: app))
        }
        return groups
    }

    /// Loads one app's credential: a JWT signer for token auth, or the client certificate (its expiry reported).
    static func load(_ app: RelayConfiguration.App, logger: Logger) throws(ConfigurationError) -> APNsCredential {
        do {
            switch app.authentication {
            case .token(let keyFile, let keyID, let teamID):
                return .token(APNsTokenProvider(signer: try APNsJWTSigner(p8File: keyFile, keyID: keyID, teamID: teamID)))
            case .certificate(let certificateFile, let privateKeyFile):
                let certificate = try APNsClientCertificate(certificatePEMFile: certificateFile, privateKeyPEMFile: privateKeyFile)
                certificate.reportExpiry(logger: logger, dimensions: [("topic", app.topic ?? "*")])
                return .certificate(certificate)
            case .pkcs12(let file, let password):
                let certificate = try APNsClientCertificate(pkcs12File: file, password: password)
                certificate.reportExpiry(logger: logger, dimensions: [("topic", app.topic ?? "*")])
                return .certificate(certificate)
            case .none:
                throw ConfigurationError(key: app.keyPrefix, problem: "required")
            }
        } catch let error as ConfigurationError {
            throw error
        } catch let error as APNsCredentialError {
            // The credential's message names the single form's key (`apns.auth.cert_file: ...`); an app's
            // settings live under its own prefix.
            throw ConfigurationError(key: app.keyPrefix, problem: error.description.replacingOccurrences(of: "apns.auth.", with: "\(app.keyPrefix)."))
        } catch {
            throw ConfigurationError(key: app.keyPrefix, problem: "\(error)")
        }
    }

    /// The client certificates of the legacy interfaces (every group; the loader refused token apps there).
    func requiredClientCertificates(logger: Logger) throws(ConfigurationError) -> [(group: APNsCredentialGroup, certificate: APNsClientCertificate)] {
        let groups = try credentialGroups(logger: logger)
        guard !groups.isEmpty else {
            throw ConfigurationError(key: "apns.auth", problem: "the legacy interfaces need a client certificate (cert_file and private_key_file, or p12_file)")
        }
        return try groups.map { group throws(ConfigurationError) in
            guard let certificate = group.clientCertificate else {
                throw ConfigurationError(key: group.keyPrefix, problem: "the legacy interfaces need a client certificate (cert_file and private_key_file, or p12_file)")
            }
            return (group, certificate)
        }
    }
}
