import APNs
import Foundation
import Relay

// The credential parts of the configuration: `apns.auth.*` and `apns.apps.N.*`.

extension ConfigurationLoader {
    /// One credential, read from the keys under `prefix` (`apns.auth` for the single form, `apns.apps.N` for an
    /// app); every message names the key under that prefix.
    /// A token key's id comes from `key_id`, or from the file `key_id_file` (returned too, to be read again when the
    /// key is rotated).
    static func authentication(
        _ values: inout Values, prefix: String
    ) async throws(ConfigurationError) -> (RelayConfiguration.Authentication, keyIDFile: String?) {
        let keyFile = try await values.readableFile("\(prefix).key_file")
        let keyIDFile = try await values.readableFile("\(prefix).key_id_file")
        var keyID = try await values.string("\(prefix).key_id")
        if let keyIDFile {
            guard keyID == nil else { throw ConfigurationError(key: "\(prefix).key_id_file", problem: "set either key_id or key_id_file, not both") }
            do {
                keyID = try readKeyID(keyIDFile)
            } catch {
                throw ConfigurationError(key: "\(prefix).key_id_file", problem: "\(error)")
            }
        }
        let teamID = try await values.string("\(prefix).team_id")
        let certificateFile = try await values.readableFile("\(prefix).cert_file")
        let privateKeyFile = try await values.readableFile("\(prefix).private_key_file")
        let p12File = try await values.readableFile("\(prefix).p12_file")
        let p12Password = try await values.string("\(prefix).p12_password", isSecret: true)

        var methods: [String] = []
        if keyFile != nil || keyID != nil || teamID != nil { methods.append("token (\(prefix).key_file, key_id, team_id)") }
        if certificateFile != nil || privateKeyFile != nil { methods.append("certificate (\(prefix).cert_file, private_key_file)") }
        if p12File != nil || p12Password != nil { methods.append("PKCS#12 (\(prefix).p12_file, p12_password)") }
        guard methods.count <= 1 else {
            throw ConfigurationError(key: prefix, problem: "choose one authentication method, not \(methods.joined(separator: " and "))")
        }
        if keyFile != nil || keyID != nil || teamID != nil {
            guard let keyFile else { throw ConfigurationError(key: "\(prefix).key_file", problem: "required for token authentication (the .p8 key)") }
            guard let keyID else { throw ConfigurationError(key: "\(prefix).key_id", problem: "required for token authentication (10 characters)") }
            guard let teamID else { throw ConfigurationError(key: "\(prefix).team_id", problem: "required for token authentication (10 characters)") }
            guard isAppleIdentifier(keyID) else { throw ConfigurationError(key: "\(prefix).key_id", problem: "must be 10 letters or digits, not '\(keyID)'") }
            guard isAppleIdentifier(teamID) else { throw ConfigurationError(key: "\(prefix).team_id", problem: "must be 10 letters or digits, not '\(teamID)'") }
            return (.token(keyFile: keyFile, keyID: keyID, teamID: teamID), keyIDFile)
        }
        if certificateFile != nil || privateKeyFile != nil {
            guard let certificateFile else { throw ConfigurationError(key: "\(prefix).cert_file", problem: "required with \(prefix).private_key_file (PEM certificate)") }
            guard let privateKeyFile else { throw ConfigurationError(key: "\(prefix).private_key_file", problem: "required with \(prefix).cert_file (PEM private key)") }
            return (.certificate(certificateFile: certificateFile, privateKeyFile: privateKeyFile), nil)
        }
        if p12File != nil || p12Password != nil {
            guard let p12File else { throw ConfigurationError(key: "\(prefix).p12_file", problem: "required with \(prefix).p12_password (PKCS#12 bundle)") }
            return (.pkcs12(file: p12File, password: p12Password ?? ""), nil)
        }
        return (.none, nil)
    }

    /// The key id in a `key_id_file`: its text without surrounding white space, 10 letters or digits.
    static func readKeyID(_ file: String) throws(KeyIDFileError) -> String {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { throw KeyIDFileError(description: "cannot read '\(file)'") }
        let keyID = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard isAppleIdentifier(keyID) else { throw KeyIDFileError(description: "'\(file)' must hold a key id of 10 letters or digits") }
        return keyID
    }

    /// A `key_id_file` that cannot be used, and why.
    struct KeyIDFileError: Error, CustomStringConvertible {
        let description: String
    }

    /// `apns.apps.0` ... `apns.apps.N-1`: each a topic and a credential. A token key may be limited to one APNs
    /// environment (`key_environment`, as Apple issues keys since 2025); an app may then be listed once per
    /// environment, each entry with a key valid there. Refused: an app without a topic or credential, an app listed
    /// twice for one environment, a key id named with two files or two environment limits, an app with no credential
    /// for one of the environments (the relay may send to either: registrations name theirs, and a `BadDeviceToken`
    /// is tried in the other), the list beside `apns.auth.*`, and an `apns.topic` that is none of the apps' topics.
    static func apps(
        _ values: inout Values, count: Int, single: RelayConfiguration.Authentication, defaultTopic: String?
    ) async throws(ConfigurationError) -> [RelayConfiguration.App] {
        // Read as a marker even when empty: `apns.apps` is a documented key.
        values.markRead("apns.apps")
        guard count > 0 else { return [] }
        guard single == .none else {
            throw ConfigurationError(key: "apns.apps", problem: "set either apns.auth.* (one app) or apns.apps (one credential per app), not both")
        }
        var apps: [RelayConfiguration.App] = []
        var keys: [String: (authentication: RelayConfiguration.Authentication, environment: RelayConfiguration.Environment?, app: String)] = [:]
        for index in 0..<count {
            let prefix = "apns.apps.\(index)"
            guard let topic = try await values.string("\(prefix).topic") else {
                throw ConfigurationError(key: "\(prefix).topic", problem: "required: the app's bundle id")
            }
            let (authentication, keyIDFile) = try await authentication(&values, prefix: prefix)
            let keyEnvironment = try await values.choice("\(prefix).key_environment", RelayConfiguration.Environment.self)
            switch authentication {
            case .none:
                throw ConfigurationError(key: prefix, problem: "needs a credential: key_file, key_id, team_id (token), cert_file and private_key_file, or p12_file")
            case .token(_, let keyID, _):
                if let known = keys[keyID], known.authentication != authentication || known.environment != keyEnvironment {
                    throw ConfigurationError(
                        key: "\(prefix).key_id",
                        problem: "key \(keyID) is already named in \(known.app) with another key_file, team_id or key_environment; a key is one file, one team and one scope")
                }
                keys[keyID] = keys[keyID] ?? (authentication, keyEnvironment, prefix)
            case .certificate, .pkcs12:
                if keyEnvironment != nil {
                    throw ConfigurationError(key: "\(prefix).key_environment", problem: "limits a token key (key_file); a certificate's environment is its own")
                }
            }
            let app = RelayConfiguration.App(topic: topic, authentication: authentication, keyPrefix: prefix, keyEnvironment: keyEnvironment,
                                             keyIDFile: keyIDFile)
            for environment in app.environments {
                if let other = apps.first(where: { $0.topic == topic && $0.environments.contains(environment) }) {
                    let scope = keyEnvironment == nil && other.keyEnvironment == nil ? "" : " for \(environment.rawValue)"
                    throw ConfigurationError(key: "\(prefix).topic", problem: "'\(topic)' already has a credential\(scope) in \(other.keyPrefix)")
                }
            }
            apps.append(app)
        }
        for app in apps {
            guard let topic = app.topic else { continue }
            for environment in RelayConfiguration.Environment.allCases
            where !apps.contains(where: { $0.topic == topic && $0.environments.contains(environment) }) {
                throw ConfigurationError(
                    key: "\(app.keyPrefix).key_environment",
                    problem: "'\(topic)' has no key for \(environment.rawValue): its key is limited to \(app.keyEnvironment?.rawValue ?? "?"); "
                        + "list the app again with a key valid in \(environment.rawValue) (key_environment: \(environment.rawValue), or none for both)")
            }
        }
        if let defaultTopic, !apps.contains(where: { $0.topic == defaultTopic }) {
            throw ConfigurationError(key: "apns.topic", problem: "'\(defaultTopic)' is not the topic of any app in apns.apps")
        }
        return apps
    }

    /// How many apps the environment names: `APNS_RELAY_APNS_APPS_<N>_<FIELD>` reaches index N.
    static func environmentAppCount(_ stripped: [String: String]) -> Int {
        let prefix = "APNS_APPS_"
        var count = 0
        for name in stripped.keys where name.hasPrefix(prefix) {
            if let index = Int(name.dropFirst(prefix.count).prefix(while: \.isNumber)), index < maxApps {
                count = max(count, index + 1)
            }
        }
        return count
    }

    /// More apps than this in one relay is a mistake in the file rather than a deployment.
    static let maxApps = 256
}
