// Stable identities for a notification, so a resend is recognised by APNs and the device.
//
// `apns-id` is an RFC 4122 version 5 (name-based, SHA-1) UUID. The namespace is fixed
// (``DeliveryIdentity/namespace``) and the name is the UTF-8 of `eventID + "\0" + token`:
// the NUL cannot occur in a token (hex) and keeps ("ab", "c…") apart from ("a", "bc…").
// SHA-1 is implemented here because the Relay target does not import swift-crypto; it is
// used for naming only, not for security.

import APNs

/// Derives `apns-id` and `apns-collapse-id` for a notification.
public enum DeliveryIdentity {
    /// The namespace UUID of relay identities: the version 5 UUID of the name "apns-relay" in
    /// RFC 4122's DNS namespace. Fixed forever: changing it changes every `apns-id`.
    public static let namespace: [UInt8] = uuidV5(namespace: dnsNamespace, name: Array("apns-relay".utf8))

    /// RFC 4122's DNS namespace, 6ba7b810-9dad-11d1-80b4-00c04fd430c8.
    public static let dnsNamespace: [UInt8] = [
        0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8,
    ]

    /// The `apns-id` for (event, token): a lower-case canonical UUID string, the same in every
    /// process and on every run.
    public static func apnsID(eventID: String, token: String) -> String {
        var name = Array(eventID.utf8)
        name.append(0)
        name.append(contentsOf: token.lowercased().utf8)
        return uuidString(uuidV5(namespace: namespace, name: name))
    }

    /// The `apns-collapse-id` to send: the event's own if it set one; otherwise the event id
    /// itself when it fits APNs' 64-byte limit and can be a header value, else `sha1-` and the
    /// 40 hex digits of its SHA-1.
    public static func collapseID(eventID: String, eventCollapseID: String? = nil) -> String {
        if let eventCollapseID { return eventCollapseID }
        if eventID.utf8.count <= 64 && APNsNotification.isValidHeaderValue(eventID) { return eventID }
        return "sha1-" + hex(SHA1.digest(Array(eventID.utf8)))
    }

    /// RFC 4122 §4.3: SHA-1 of namespace + name, first 16 bytes, version 5, variant 10xx.
    public static func uuidV5(namespace: [UInt8], name: [UInt8]) -> [UInt8] {
        var bytes = Array(SHA1.digest(namespace + name).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return bytes
    }

    /// 16 bytes → "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
    public static func uuidString(_ bytes: [UInt8]) -> String {
        let digits = hex(bytes)
        var result = ""
        for (position, character) in digits.enumerated() {
            if [8, 12, 16, 20].contains(position) { result.append("-") }
            result.append(character)
        }
        return result
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let alphabet = Array("0123456789abcdef")
        var text = ""
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(alphabet[Int(byte >> 4)])
            text.append(alphabet[Int(byte & 0x0F)])
        }
        return text
    }
}

/// SHA-1 (FIPS 180-4 / RFC 3174), for name-based UUIDs only.
public enum SHA1 {
    /// The 20-byte digest of `message`.
    public static func digest(_ message: [UInt8]) -> [UInt8] {
        var state: (UInt32, UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)
        var padded = message
        padded.append(0x80)
        while padded.count % 64 != 56 { padded.append(0) }
        let bitLength = UInt64(message.count) &* 8
        for shift in stride(from: 56, through: 0, by: -8) { padded.append(UInt8(truncatingIfNeeded: bitLength >> UInt64(shift))) }

        var words = [UInt32](repeating: 0, count: 80)
        for blockStart in stride(from: 0, to: padded.count, by: 64) {
            for index in 0..<16 {
                let offset = blockStart + index * 4
                words[index] = UInt32(padded[offset]) << 24 | UInt32(padded[offset + 1]) << 16
                    | UInt32(padded[offset + 2]) << 8 | UInt32(padded[offset + 3])
            }
            for index in 16..<80 {
                words[index] = (words[index - 3] ^ words[index - 8] ^ words[index - 14] ^ words[index - 16]).rotatedLeft(1)
            }
            var (a, b, c, d, e) = state
            for index in 0..<80 {
                let f: UInt32
                let k: UInt32
                switch index {
                case 0..<20: f = (b & c) | (~b & d); k = 0x5A82_7999
                case 20..<40: f = b ^ c ^ d; k = 0x6ED9_EBA1
                case 40..<60: f = (b & c) | (b & d) | (c & d); k = 0x8F1B_BCDC
                default: f = b ^ c ^ d; k = 0xCA62_C1D6
                }
                let temp = a.rotatedLeft(5) &+ f &+ e &+ k &+ words[index]
                e = d
                d = c
                c = b.rotatedLeft(30)
                b = a
                a = temp
            }
            state = (state.0 &+ a, state.1 &+ b, state.2 &+ c, state.3 &+ d, state.4 &+ e)
        }
        var digest: [UInt8] = []
        digest.reserveCapacity(20)
        for word in [state.0, state.1, state.2, state.3, state.4] {
            digest.append(contentsOf: [UInt8(word >> 24), UInt8(truncatingIfNeeded: word >> 16),
                                       UInt8(truncatingIfNeeded: word >> 8), UInt8(truncatingIfNeeded: word)])
        }
        return digest
    }
}

extension UInt32 {
    fileprivate func rotatedLeft(_ count: UInt32) -> UInt32 { (self << count) | (self >> (32 - count)) }
}
