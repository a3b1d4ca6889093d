import Crypto
public import Foundation
import SwiftASN1
import X509

/// A throwaway certificate authority for the simulator: a self-signed P-256 CA, a server certificate valid
/// for `localhost` and `127.0.0.1`, and a client certificate for mutual TLS, all written as PEM files.
public struct SimulatorCertificates: Sendable {
    /// The directory the files are in.
    public let directory: String
    /// `DIR/ca.pem`: the CA certificate (the trust anchor clients use).
    public var caPath: String { directory + "/ca.pem" }
    /// `DIR/server.pem`: the server certificate.
    public var serverCertificatePath: String { directory + "/server.pem" }
    /// `DIR/server.key`: the server's private key (PKCS#8 PEM).
    public var serverKeyPath: String { directory + "/server.key" }
    /// `DIR/client.pem`: a client certificate signed by the CA (subject CN `apns-relay simulator client`).
    public var clientCertificatePath: String { directory + "/client.pem" }
    /// `DIR/client.key`: the client's private key (PKCS#8 PEM).
    public var clientKeyPath: String { directory + "/client.key" }

    /// The CA certificate PEM.
    public let caPEM: String
    /// The server certificate PEM.
    public let serverCertificatePEM: String
    /// The server private key PEM.
    public let serverKeyPEM: String

    /// `DIR/client-<topic>.pem`: a client certificate for one app (subject CN = its bundle id), as Apple issues
    /// one per app; generated for each of ``SimulatorOptions/clientCertificateTopics``.
    public func clientCertificatePath(forTopic topic: String) -> String { directory + "/client-\(topic).pem" }
    /// `DIR/client-<topic>.key`: its private key.
    public func clientKeyPath(forTopic topic: String) -> String { directory + "/client-\(topic).key" }

    /// Generates a fresh CA, server and client certificate (and one client certificate per topic of
    /// `clientTopics`) and writes them to `directory` (created if missing).
    public static func generate(in directory: String, now: Date = Date(), clientTopics: [String] = []) throws -> SimulatorCertificates {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let caKey = P256.Signing.PrivateKey()
        // A name of its own per CA: a client trusting two simulators (production and sandbox hosts, both CAs in
        // one file) looks a server certificate's issuer up by name, and would try the wrong key on a shared one.
        let caName = try DistinguishedName {
            OrganizationName("apns-relay")
            CommonName("apns-relay simulator CA \(UUID().uuidString.prefix(8).lowercased())")
        }
        let notBefore = now.addingTimeInterval(-3600)
        let notAfter = now.addingTimeInterval(365 * 86_400)
        let ca = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: Certificate.PublicKey(caKey.publicKey),
            notValidBefore: notBefore,
            notValidAfter: notAfter,
            issuer: caName,
            subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(digitalSignature: true, keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: Certificate.PrivateKey(caKey)
        )

        func leaf(commonName: String, usage: ExtendedKeyUsage.Usage, names: [GeneralName]) throws -> (Certificate, P256.Signing.PrivateKey) {
            let key = P256.Signing.PrivateKey()
            let subject = try DistinguishedName {
                OrganizationName("apns-relay")
                CommonName(commonName)
            }
            let certificate = try Certificate(
                version: .v3,
                serialNumber: Certificate.SerialNumber(),
                publicKey: Certificate.PublicKey(key.publicKey),
                notValidBefore: notBefore,
                notValidAfter: notAfter,
                issuer: caName,
                subject: subject,
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.notCertificateAuthority)
                    Critical(KeyUsage(digitalSignature: true))
                    try ExtendedKeyUsage([usage])
                    if !names.isEmpty { SubjectAlternativeNames(names) }
                },
                issuerPrivateKey: Certificate.PrivateKey(caKey)
            )
            return (certificate, key)
        }

        let (server, serverKey) = try leaf(
            commonName: "localhost", usage: .serverAuth,
            names: [.dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))])
        let (client, clientKey) = try leaf(commonName: "apns-relay simulator client", usage: .clientAuth, names: [])

        let result = SimulatorCertificates(
            directory: directory,
            caPEM: try ca.serializeAsPEM().pemString,
            serverCertificatePEM: try server.serializeAsPEM().pemString,
            serverKeyPEM: serverKey.pemRepresentation)
        try write(result.caPEM, to: result.caPath)
        try write(result.serverCertificatePEM, to: result.serverCertificatePath)
        try write(result.serverKeyPEM, to: result.serverKeyPath, secret: true)
        try write(try client.serializeAsPEM().pemString, to: result.clientCertificatePath)
        try write(clientKey.pemRepresentation, to: result.clientKeyPath, secret: true)
        for topic in clientTopics {
            let (certificate, key) = try leaf(commonName: topic, usage: .clientAuth, names: [])
            try write(try certificate.serializeAsPEM().pemString, to: result.clientCertificatePath(forTopic: topic))
            try write(key.pemRepresentation, to: result.clientKeyPath(forTopic: topic), secret: true)
        }
        return result
    }

    private static func write(_ text: String, to path: String, secret: Bool = false) throws {
        try (text.hasSuffix("\n") ? text : text + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        if secret {
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        }
    }
}
