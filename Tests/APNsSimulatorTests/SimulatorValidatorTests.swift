import APNs
@testable import APNsSimulator
import Crypto
import Foundation
import NIOHPACK
import Testing
import TestSupport

/// The simulator's request validation, rule by rule: each request differs from a valid one in exactly one way and
/// must get exactly Apple's answer for that way.
@Suite("Simulator request validation")
struct SimulatorValidatorTests {
    /// The signing key, kept as bytes (`P256.Signing.PrivateKey` is not `Sendable`). The `try!`s below
    /// cannot fail: the bytes come from a key just generated, and the key id and team id are fixed valid
    /// constants; these helpers feed static argument tables, which cannot throw.
    static let keyBytes = P256.Signing.PrivateKey().rawRepresentation
    static var key: P256.Signing.PrivateKey { try! P256.Signing.PrivateKey(rawRepresentation: keyBytes) }
    static let now = Date(timeIntervalSince1970: 1_700_000_000)
    static let token = String(repeating: "ab", count: 32)
    static let deadToken = String(repeating: "cd", count: 32)
    static let badToken = String(repeating: "ef", count: 32)

    static func jwt(issuedAt: Int64 = Int64(now.timeIntervalSince1970) - 60, key: P256.Signing.PrivateKey = key) -> String {
        try! APNsJWTSigner(key: key, keyID: "ABCDE12345", teamID: "TEAM123456").sign(issuedAt: issuedAt)
    }

    /// A valid request's headers with `changes` applied (a `nil` value removes the header).
    static func headers(_ changes: [(String, String?)] = [], adding extra: [(String, String)] = []) -> HPACKHeaders {
        var fields: [(String, String)] = [
            (":method", "POST"), (":path", "/3/device/\(token)"), ("authorization", "bearer \(jwt())"),
            ("apns-topic", "com.example.app"), ("apns-push-type", "alert"), ("apns-priority", "10"),
            ("apns-id", "2b3a1a4e-9c0d-4e5f-8a6b-7c8d9e0f1a2b"), ("apns-collapse-id", "c-1"),
        ]
        for (name, value) in changes {
            if let index = fields.firstIndex(where: { $0.0 == name }) {
                if let value { fields[index].1 = value } else { fields.remove(at: index) }
            } else if let value {
                fields.append((name, value))
            }
        }
        return HPACKHeaders(fields + extra)
    }

    static let validBody = Array(#"{"aps":{"alert":"hi","badge":3},"custom":[1,2.5e3,true,null,"\u00e9\n"]}"#.utf8)

    static func verdict(_ headers: HPACKHeaders, body: [UInt8] = validBody, certificate: Bool = false, options: SimulatorOptions = SimulatorOptions())
        -> SimulatorVerdict
    {
        let validator = SimulatorValidator(options: options, publicKey: key.publicKey.x963Representation)
        var cache: VerifiedProviderToken?
        return validator.validate(
            headers: headers, body: body, now: now, certificateAuthenticated: certificate, lastVerifiedJWT: &cache,
            tokenStatus: { token in (token == deadToken ? 1_699_999_999_000 : nil, token == badToken) })
    }

    static func rejection(_ verdict: SimulatorVerdict) -> String? {
        if case .reject(let status, let reason, _) = verdict { return "\(status) \(reason)" }
        return nil
    }

    @Test("a valid request is accepted with its token, ids, topic and badge")
    func accepted() throws {
        guard case .accept(let delivery) = Self.verdict(Self.headers()) else {
            Issue.record("rejected: \(Self.verdict(Self.headers()))")
            return
        }
        #expect(delivery.token == Self.token)
        #expect(delivery.apnsID == "2b3a1a4e-9c0d-4e5f-8a6b-7c8d9e0f1a2b")
        #expect(delivery.collapseID == "c-1")
        #expect(delivery.topic == "com.example.app")
        #expect(delivery.priority == 10)
        #expect(delivery.badge == 3)
        #expect(delivery.payload == Self.validBody)
    }

    @Test(
        "each header rule rejects with Apple's status and reason",
        arguments: [
            ([(":method", "GET")], "405 MethodNotAllowed"),
            ([(":path", "/2/device/\(token)")], "404 BadPath"),
            ([(":path", "/3/device/")], "400 MissingDeviceToken"),
            ([(":path", "/3/device/abc")], "400 BadDeviceToken"),
            ([(":path", "/3/device/\(badToken)")], "400 BadDeviceToken"),
            ([("authorization", nil)], "403 MissingProviderToken"),
            ([("authorization", "basic abc")], "403 InvalidProviderToken"),
            ([("authorization", "bearer a.b.c")], "403 InvalidProviderToken"),
            ([("authorization", "bearer \(jwt(key: P256.Signing.PrivateKey()))")], "403 InvalidProviderToken"),
            ([("authorization", "bearer \(jwt(issuedAt: Int64(now.timeIntervalSince1970) - 3601))")], "403 ExpiredProviderToken"),
            ([("apns-topic", nil)], "400 MissingTopic"),
            ([("apns-push-type", "loud")], "400 InvalidPushType"),
            ([("apns-priority", "7")], "400 BadPriority"),
            ([("apns-push-type", "background")], "400 BadPriority"),
            ([("apns-expiration", "soon")], "400 BadExpirationDate"),
            ([("apns-id", "not-a-uuid")], "400 BadMessageId"),
            ([("apns-collapse-id", String(repeating: "x", count: 65))], "400 BadCollapseId"),
            ([("apns-push-type", "voip")], "400 TopicDisallowed"),
        ] as [([(String, String?)], String)])
    func headerRules(changes: [(String, String?)], expected: String) {
        #expect(Self.rejection(Self.verdict(Self.headers(changes))) == expected)
    }

    @Test("duplicate apns headers are rejected")
    func duplicateHeaders() {
        #expect(Self.rejection(Self.verdict(Self.headers(adding: [("apns-topic", "com.example.app")]))) == "400 DuplicateHeaders")
    }

    @Test("a dead token answers 410 with its timestamp")
    func deadToken() {
        let verdict = Self.verdict(Self.headers([(":path", "/3/device/\(Self.deadToken)")]))
        #expect(verdict == .reject(status: 410, reason: "Unregistered", timestamp: 1_699_999_999_000))
    }

    @Test("certificate auth needs no provider token")
    func certificateAuth() {
        guard case .accept = Self.verdict(Self.headers([("authorization", nil)]), certificate: true) else {
            Issue.record("rejected")
            return
        }
    }

    @Test("a topic outside the allowed bundle ids is rejected")
    func allowedTopics() {
        var options = SimulatorOptions()
        options.allowedTopics = ["com.other.app"]
        #expect(Self.rejection(Self.verdict(Self.headers(), options: options)) == "400 TopicDisallowed")
    }

    @Test("several teams: the kid picks the key, the key's team must issue the JWT and may push only to its apps")
    func providerKeysOfSeveralTeams() {
        let otherTeam = P256.Signing.PrivateKey()
        var options = SimulatorOptions()
        options.providerKeys = [
            SimulatorProviderKey(keyID: "ABCDE12345", teamID: "TEAM123456", publicKeyPEM: Self.key.publicKey.pemRepresentation, topics: ["com.example.app"]),
            SimulatorProviderKey(keyID: "OTHER12345", teamID: "OTHERTEAM1", publicKeyPEM: otherTeam.publicKey.pemRepresentation, topics: ["com.other.app"]),
        ]
        func jwt(key: P256.Signing.PrivateKey, keyID: String, teamID: String) -> String {
            try! APNsJWTSigner(key: key, keyID: keyID, teamID: teamID).sign(issuedAt: Int64(Self.now.timeIntervalSince1970) - 60)
        }
        #expect(Self.rejection(Self.verdict(Self.headers(), options: options)) == nil, "its own team's app")
        let other = jwt(key: otherTeam, keyID: "OTHER12345", teamID: "OTHERTEAM1")
        #expect(Self.rejection(Self.verdict(Self.headers([("authorization", "bearer \(other)"), ("apns-topic", "com.other.app")]), options: options)) == nil)
        #expect(Self.rejection(Self.verdict(Self.headers([("authorization", "bearer \(other)")]), options: options)) == "400 TopicDisallowed",
                "another team's app")
        let unknownKey = jwt(key: otherTeam, keyID: "UNKNOWN123", teamID: "OTHERTEAM1")
        #expect(Self.rejection(Self.verdict(Self.headers([("authorization", "bearer \(unknownKey)")]), options: options)) == "403 InvalidProviderToken")
        let wrongTeam = jwt(key: otherTeam, keyID: "OTHER12345", teamID: "TEAM123456")
        #expect(Self.rejection(Self.verdict(Self.headers([("authorization", "bearer \(wrongTeam)"), ("apns-topic", "com.other.app")]), options: options))
                == "403 InvalidProviderToken", "the key's team must issue it")
        let forged = jwt(key: otherTeam, keyID: "ABCDE12345", teamID: "TEAM123456")
        #expect(Self.rejection(Self.verdict(Self.headers([("authorization", "bearer \(forged)")]), options: options)) == "403 InvalidProviderToken",
                "signed by another key")
    }

    @Test("restricted keys: one limited to the other environment answers 403 BadEnvironmentKeyIdInToken, one limited to other topics of its team 403 UnrelatedKeyIdInToken")
    func restrictedKeys() {
        var options = SimulatorOptions()
        options.environment = .sandbox
        options.providerKeys = [
            SimulatorProviderKey(keyID: "ABCDE12345", teamID: "TEAM123456", publicKeyPEM: Self.key.publicKey.pemRepresentation,
                                 topics: ["com.example.app", "com.example.widget"], environment: .production),
        ]
        #expect(Self.rejection(Self.verdict(Self.headers(), options: options)) == "403 BadEnvironmentKeyIdInToken")
        options.environment = .production
        #expect(Self.rejection(Self.verdict(Self.headers(), options: options)) == nil, "its own environment")
        options.providerKeys[0].environment = nil
        options.providerKeys[0].keyTopics = ["com.example.widget"]
        #expect(Self.rejection(Self.verdict(Self.headers(), options: options)) == "403 UnrelatedKeyIdInToken", "another topic of its team")
        #expect(Self.rejection(Self.verdict(Self.headers([("apns-topic", "com.example.widget")]), options: options)) == nil)
        #expect(Self.rejection(Self.verdict(Self.headers([("apns-topic", "com.example.other")]), options: options)) == "400 TopicDisallowed",
                "not its team's")
    }

    @Test("--provider-key KEY_ID:TEAM_ID:PEM_FILE:BUNDLE_IDS is read, and a malformed one is refused naming the flag")
    func providerKeyFlag() throws {
        let file = scratchPath("provider") + ".pem"
        try Self.key.publicKey.pemRepresentation.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let key = try SimulatorProviderKey(specification: "ABCDE12345:TEAM123456:\(file):com.a.one,com.a.two")
        #expect(key.keyID == "ABCDE12345" && key.teamID == "TEAM123456" && key.topics == ["com.a.one", "com.a.two"])
        #expect(key.publicKeyPEM == Self.key.publicKey.pemRepresentation)
        #expect(key.environment == nil && key.keyTopics == nil)
        let limited = try SimulatorProviderKey(specification: "ABCDE12345:TEAM123456:\(file):com.a.one,com.a.two:environment=sandbox:topics=com.a.two")
        #expect(limited.environment == .sandbox && limited.keyTopics == ["com.a.two"] && limited.topics == ["com.a.one", "com.a.two"])
        for bad in ["ABCDE12345:TEAM123456:\(file)", "ABCDE12345:TEAM123456:/nonexistent.pem:com.a.one", ":TEAM123456:\(file):com.a.one",
                    "ABCDE12345:TEAM123456:\(file):com.a.one:environment=staging", "ABCDE12345:TEAM123456:\(file):com.a.one:topics="] {
            let error = #expect(throws: SimulatorOptionError.self) { try SimulatorProviderKey(specification: bad) }
            #expect(error?.description.contains("--provider-key") == true)
        }
    }

    @Test(
        "payloads that are not a JSON object with an aps dictionary are rejected",
        arguments: [
            "", "[]", "\"aps\"", "42", "null", "{}", #"{"aps":1}"#, #"{"aps":[]}"#, #"{"aps":"x"}"#, #"{"aps":null}"#,
            #"{"aps":{}"#, #"{"aps":{}}x"#, #"{"aps":{},}"#, #"{"aps":{"a":}}"#, #"{"aps":{'a':1}}"#, #"{"aps":{"a":01}}"#,
            #"{"aps":{"a":1.}}"#, #"{"aps":{"a":-}}"#, #"{"aps":{"a":tru}}"#, #"{"aps":{"a":"\x"}}"#, #"{"aps":{"a":"\u12"}}"#,
            "{\"aps\":{\"a\":\"\u{01}\"}}", #"{"aps" {}}"#, #"{aps:{}}"#, #"{"aps":{}}{}"#,
        ])
    func invalidPayloads(text: String) {
        let verdict = Self.verdict(Self.headers(), body: Array(text.utf8))
        #expect(Self.rejection(verdict) == (text.isEmpty ? "400 PayloadEmpty" : "400 PayloadInvalid"), "payload \(text)")
    }

    @Test("payload bytes that are not UTF-8 are rejected")
    func notUTF8() {
        var body = Array(#"{"aps":{"alert":"x"}}"#.utf8)
        body[16] = 0xFF
        #expect(Self.rejection(Self.verdict(Self.headers(), body: body)) == "400 PayloadInvalid")
    }

    @Test(
        "JSON that APNs accepts is accepted",
        arguments: [
            #"{"aps":{}}"#, " \n{ \"aps\" : { } } \t", #"{"x":{"y":[[],{}]},"aps":{"badge":0}}"#, #"{"aps":{"a":-0.5E+2,"b":"\"\\\/\b\f\n\r\t\u00FF"}}"#,
            #"{"aps":{"alert":"日本"}}"#,
        ])
    func validPayloads(text: String) {
        guard case .accept = Self.verdict(Self.headers(), body: Array(text.utf8)) else {
            Issue.record("rejected \(text): \(Self.verdict(Self.headers(), body: Array(text.utf8)))")
            return
        }
    }

    @Test("the payload size limit depends on the push type")
    func payloadSize() {
        func body(_ size: Int) -> [UInt8] {
            let prefix = #"{"aps":{},"p":""#
            return Array((prefix + String(repeating: "x", count: size - prefix.utf8.count - 2) + "\"}").utf8)
        }
        #expect(body(4096).count == 4096)
        guard case .accept = Self.verdict(Self.headers(), body: body(4096)) else {
            Issue.record("4096 bytes rejected")
            return
        }
        #expect(Self.rejection(Self.verdict(Self.headers(), body: body(4097))) == "413 PayloadTooLarge")
        let voip = Self.headers([("apns-push-type", "voip"), ("apns-topic", "com.example.app.voip")])
        guard case .accept = Self.verdict(voip, body: body(5120)) else {
            Issue.record("5120-byte voip payload rejected")
            return
        }
        #expect(Self.rejection(Self.verdict(voip, body: body(5121))) == "413 PayloadTooLarge")
    }

    @Test("badge is read from aps when it is an integer")
    func badge() {
        for (text, badge) in [(#"{"aps":{"badge":12}}"#, 12), (#"{"aps":{"alert":{"badge":5}}}"#, nil), (#"{"badge":4,"aps":{}}"#, nil)] as [(String, Int?)] {
            guard case .accept(let delivery) = Self.verdict(Self.headers(), body: Array(text.utf8)) else {
                Issue.record("rejected \(text)")
                continue
            }
            #expect(delivery.badge == badge, "payload \(text)")
        }
    }

    @Test("broadcast header rules get Apple's answers")
    func broadcastRules() {
        let channel = "Y2hhbm5lbC0x"
        func verdict(_ changes: [(String, String?)]) -> String? {
            var headers = Self.headers(
                [(":path", "/4/broadcasts/apps/com.example.app"), ("apns-topic", nil), ("apns-id", nil), ("apns-collapse-id", nil),
                 ("apns-push-type", "liveactivity"), ("apns-channel-id", channel)])
            for (name, value) in changes {
                headers.remove(name: name)
                if let value { headers.add(name: name, value: value) }
            }
            let validator = SimulatorValidator(options: SimulatorOptions(), publicKey: Self.key.publicKey.x963Representation)
            var cache: VerifiedProviderToken?
            let result = validator.validate(
                headers: headers, body: Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#.utf8), now: Self.now, certificateAuthenticated: false, lastVerifiedJWT: &cache,
                tokenStatus: { _ in (nil, false) }, channelExists: { $0 == "com.example.app" && $1 == channel })
            switch result {
            case .acceptBroadcast(let broadcast): return "200 \(broadcast.channelID)"
            default: return Self.rejection(result)
            }
        }
        #expect(verdict([]) == "200 \(channel)")
        #expect(verdict([("apns-channel-id", nil)]) == "400 MissingChannelId")
        #expect(verdict([("apns-channel-id", "not base64!")]) == "400 BadChannelId")
        #expect(verdict([("apns-channel-id", "b3RoZXI=")]) == "404 ChannelNotRegistered")
        #expect(verdict([("apns-push-type", nil)]) == "400 MissingPushType")
        #expect(verdict([("apns-push-type", "alert")]) == "400 InvalidPushType")
        #expect(verdict([("apns-request-id", "nope")]) == "400 BadMessageId")
        #expect(verdict([("authorization", nil)]) == "403 MissingProviderToken")
        #expect(verdict([(":path", "/4/broadcasts/apps/com.example.other")]) == "404 ChannelNotRegistered")
    }

}
