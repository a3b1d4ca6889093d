import APNs
import Logging

/// The APNs credential the configuration names, loaded once for every connection that needs it.
extension RelayConfiguration.APNsSettings {
    /// The client certificate of certificate auth (`nil` for token auth or none); a bad file names `apns.auth`.
    func clientCertificate(logger: Logger) throws(ConfigurationError) -> APNsClientCertificate? {
        do {
            let certificate: APNsClientCertificate
            switch authentication {
            case .certificate(let certificateFile, let privateKeyFile):
                certificate = try APNsClientCertificate(certificatePEMFile: certificateFile, privateKeyPEMFile: privateKeyFile)
            case .pkcs12(let file, let password):
                certificate = try APNsClientCertificate(pkcs12File: file, password: password)
            case .token, .none:
                return nil
            }
            certificate.reportExpiry(logger: logger)
            return certificate
        } catch {
            throw ConfigurationError(key: "apns.auth", problem: "\(error)")
        }
    }

    /// The HTTP/2 credential: a JWT signer for token auth, or the client certificate; a bad or
    /// missing one names `apns.auth`.
    func credential(logger: Logger) throws(ConfigurationError) -> APNsCredential {
        if let certificate = try clientCertificate(logger: logger) { return .certificate(certificate) }
        guard case .token(let keyFile, let keyID, let teamID) = authentication else {
            throw ConfigurationError(key: "apns.auth", problem: "required")
        }
        do {
            return .token(APNsTokenProvider(signer: try APNsJWTSigner(p8File: keyFile, keyID: keyID, teamID: teamID)))
        } catch {
            throw ConfigurationError(key: "apns.auth", problem: "\(error)")
        }
    }
}
