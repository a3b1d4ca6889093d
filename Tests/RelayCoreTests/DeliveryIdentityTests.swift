import APNsCore
import Foundation
import Testing
@testable import RelayCore

@Suite("Delivery identity: apns-id, collapse id and device digest, derived and stable")
struct DeliveryIdentityTests {
    @Test func uuidV5MatchesKnownVector() {
        let python = DeliveryIdentity.uuidV5(namespace: DeliveryIdentity.dnsNamespace, name: Array("python.org".utf8))
        #expect(APNsUUIDText.format(python) == "886313e1-3b8a-5372-9b90-0c9aee199e5d")
        #expect(APNsUUIDText.format(DeliveryIdentity.namespace) == "f928e2b1-f388-52ff-a7c3-48c5c3fba8b6")
    }

    /// Fixed vectors: these must never change, or resends after an upgrade get new apns-ids.
    @Test func apnsIDIsStable() {
        let deviceA = String(repeating: "a1", count: 32)
        let deviceB = String(repeating: "b2", count: 32)
        #expect(APNsUUIDText.format(DeliveryIdentity.apnsID(eventID: "evt-7f3a", token: deviceA)) == "bcd323f0-f7b6-5baf-90e6-b2f86d21362f")
        #expect(APNsUUIDText.format(DeliveryIdentity.apnsID(eventID: "evt-7f3a", token: deviceB)) == "2152f0da-6f01-5056-885f-8a75390a5a81")
        #expect(APNsUUIDText.format(DeliveryIdentity.apnsID(eventID: "e", token: deviceA)) == "8d0f353a-ef9e-52cd-b242-5af423c487a8")
        #expect(APNsUUIDText.format(DeliveryIdentity.apnsID(eventID: "evt-7f3a", token: deviceA.uppercased())) == "bcd323f0-f7b6-5baf-90e6-b2f86d21362f")
    }

    /// The name is the event id, a NUL and the lower-cased token, whatever the token's length and case.
    @Test func apnsIDHashesTheLowerCasedToken() {
        let long = String(repeating: "aB3", count: 50)
        func named(_ eventID: String, _ token: String) -> UUID {
            DeliveryIdentity.uuidV5(namespace: DeliveryIdentity.namespace, name: Array(eventID.utf8) + [0] + Array(token.lowercased().utf8))
        }
        // The bytes around the capitals' range ("@" and "[" below and above "A"-"Z", "`" and "{" around "a"-"z"), at
        // every position of an eight-byte word and in a tail shorter than one.
        let edges = String(repeating: "@AZ[`az{", count: 8) + "@AZ[`az"
        for token in [long, long.lowercased(), "ÄB-ünicode", String(repeating: "f", count: 64), edges, String(edges.dropFirst(3)), "A1\u{7f}b" + edges] {
            #expect(DeliveryIdentity.apnsID(eventID: "evt-1", token: token) == named("evt-1", token), "\(token)")
        }
    }

    /// A device digest is written into progress markers and read by the partition's next owner, maybe another build:
    /// FNV-1a-64 of the lower-cased token, fixed forever.
    @Test func deviceDigestIsFNV1aOfTheLowerCasedToken() {
        let token = String(repeating: "0a1B2c3D", count: 8)
        var expected: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in token.lowercased().utf8 { expected = (expected ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        #expect(DeviceDigest(token: token).value == expected)
        #expect(DeviceDigest(token: token.lowercased()) == DeviceDigest(token: token.uppercased()))
        // A fixed vector (computed outside Swift): the text a marker carries.
        #expect(DeviceDigest(token: String(repeating: "AB", count: 32)).text == "544cc8e1f3802265")
    }

    @Test func collapseIDIsDerivedFromTheEventID() {
        #expect(DeliveryIdentity.collapseID(eventID: "evt-1") == "evt-1")
        #expect(DeliveryIdentity.collapseID(eventID: "evt-1", eventCollapseID: "thread-9") == "thread-9")
        let longID = String(repeating: "x", count: 100)
        let derived = DeliveryIdentity.collapseID(eventID: longID)
        #expect(derived == "sha1-50e483690ec481f4af7f6fb524b2b99eb1716565")
        #expect(derived.utf8.count <= 64)
        #expect(DeliveryIdentity.collapseID(eventID: String(repeating: "y", count: 64)).utf8.count == 64)
        // An event id that cannot be a header value is hashed like a long one.
        for unsendable in ["a\nb", " lead", "trail\t", "del\u{7f}"] {
            let hashed = DeliveryIdentity.collapseID(eventID: unsendable)
            #expect(hashed.hasPrefix("sha1-") && hashed.utf8.count == 45, "\(unsendable.debugDescription) gave \(hashed)")
        }
        #expect(DeliveryIdentity.collapseID(eventID: "inner space\tand tab") == "inner space\tand tab")
    }
}
