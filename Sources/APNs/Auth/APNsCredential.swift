public import Foundation
public import NIOSSL
import NIOCore
public import Logging
import Metrics

/// A client certificate and its private key (certificate auth).
public struct APNsClientCertificate: Sendable {
    /// The certificate chain, leaf first.
    public let chain: [NIOSSLCertificate]
    /// The private key.
    public let privateKey: NIOSSLPrivateKey

    /// Loads a PEM certificate (chain) and a PEM private key.
    public init(certificatePEMFile: String, privateKeyPEMFile: String) throws(APNsCredentialError) {
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificatePEMFile)
        } catch {
            throw APNsCredentialError("apns.auth.cert_file: cannot read a PEM certificate from \(certificatePEMFile)")
        }
        if chain.isEmpty { throw APNsCredentialError("apns.auth.cert_file: no certificate in \(certificatePEMFile)") }
        do {
            privateKey = try NIOSSLPrivateKey(file: privateKeyPEMFile, format: .pem)
        } catch {
            throw APNsCredentialError("apns.auth.private_key_file: cannot read a PEM private key from \(privateKeyPEMFile)")
        }
    }

    /// Loads a PKCS#12 bundle protected by `password`.
    public init(pkcs12File: String, password: String) throws(APNsCredentialError) {
        let bundle: NIOSSLPKCS12Bundle
        do {
            bundle = try NIOSSLPKCS12Bundle(file: pkcs12File, passphrase: Array(password.utf8))
        } catch {
            throw APNsCredentialError("apns.auth.p12_file: cannot open \(pkcs12File) (wrong password or not PKCS#12)")
        }
        if bundle.certificateChain.isEmpty { throw APNsCredentialError("apns.auth.p12_file: no certificate in \(pkcs12File)") }
        chain = bundle.certificateChain
        privateKey = bundle.privateKey
    }

    /// The leaf certificate's expiry.
    public var notValidAfter: Date {
        Date(timeIntervalSince1970: TimeInterval(chain[0].notValidAfter))
    }

    /// Seconds until the leaf certificate expires (negative once expired).
    public func secondsUntilExpiry(now: Date = Date()) -> Double {
        notValidAfter.timeIntervalSince(now)
    }

    /// Publishes the expiry as the gauges `apns_certificate_not_after_timestamp_seconds` (the leaf's notAfter, epoch
    /// seconds: what an alert compares with `time()`, true for as long as the process runs) and
    /// `apns_certificate_expiry_seconds` (the seconds left at this call), with `dimensions` (e.g. the app's topic, so
    /// several certificates each keep a series), and logs a warning when fewer than 30 days are left. Returns the
    /// seconds left.
    @discardableResult
    public func reportExpiry(logger: Logger, dimensions: [(String, String)] = [], now: Date = Date()) -> Double {
        let left = secondsUntilExpiry(now: now)
        Gauge(label: "apns_certificate_not_after_timestamp_seconds", dimensions: dimensions).record(notValidAfter.timeIntervalSince1970)
        Gauge(label: "apns_certificate_expiry_seconds", dimensions: dimensions).record(left)
        if left < 30 * 86_400 {
            var metadata: Logger.Metadata = ["not_valid_after": "\(notValidAfter)", "days_left": "\(Int(left / 86_400))"]
            for (name, value) in dimensions { metadata[name] = "\(value)" }
            logger.warning("APNs client certificate expires soon", metadata: metadata)
        }
        return left
    }
}

/// How the relay authenticates to APNs.
public enum APNsCredential: Sendable {
    /// Token auth: one shared ES256 provider token.
    case token(APNsTokenProvider)
    /// Certificate auth: mutual TLS.
    case certificate(APNsClientCertificate)
}
