// Stable identities for a notification, so a resend is recognised by APNs and the device.
//
// `apns-id` is an RFC 4122 version 5 (name-based, SHA-1) UUID. The namespace is fixed
// (``DeliveryIdentity/namespace``) and the name is the UTF-8 of `eventID + "\0" + token`:
// the NUL cannot occur in a token (hex) and keeps ("ab", "c…") apart from ("a", "bc…").
// SHA-1 names things here; it protects nothing.

import APNsCore
import Crypto
public import Foundation

/// Derives `apns-id` and `apns-collapse-id` for a notification.
public enum DeliveryIdentity {
    /// The namespace UUID of relay identities: the version 5 UUID of the name "apns-relay" in
    /// RFC 4122's DNS namespace. Fixed forever: changing it changes every `apns-id`.
    public static let namespace: UUID = uuidV5(namespace: dnsNamespace, name: Array("apns-relay".utf8))

    /// RFC 4122's DNS namespace, 6ba7b810-9dad-11d1-80b4-00c04fd430c8.
    public static let dnsNamespace = UUID(uuid: (0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8))

    /// The `apns-id` for (event, token), the same in every process and on every run.
    public static func apnsID(eventID: String, token: String) -> UUID {
        var eventID = eventID
        var token = token
        let hashed = eventID.withUTF8 { event in token.withUTF8 { token in apnsID(event: event, asciiToken: token) } }
        // A token with non-ASCII bytes (never a valid one) is lower-cased by Unicode's rules.
        return hashed ?? uuidV5(namespace: namespace, name: Array(eventID.utf8) + [0] + Array(token.lowercased().utf8))
    }

    /// The `apns-id` of an event id and an ASCII token, as UTF-8; `nil` when the token is not ASCII. One per
    /// notification: the name is laid out once in a buffer on the stack (the token lower-cased as it is copied) and
    /// hashed in one call, where each incremental update of the hash costs about as much as a block.
    private static func apnsID(event: UnsafeBufferPointer<UInt8>, asciiToken token: UnsafeBufferPointer<UInt8>) -> UUID? {
        let eventStart = MemoryLayout<uuid_t>.size
        let tokenStart = eventStart + event.count + 1
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: tokenStart + token.count) { name -> UUID? in
            guard copyLowercasingASCII(token, to: name.baseAddress! + tokenStart) else { return nil }
            withUnsafeBytes(of: namespace.uuid) { UnsafeMutableRawBufferPointer(name).copyMemory(from: $0) }
            if let eventBytes = event.baseAddress { (name.baseAddress! + eventStart).update(from: eventBytes, count: event.count) }
            name[tokenStart - 1] = 0
            return uuid(from: Insecure.SHA1.hash(data: UnsafeRawBufferPointer(name)))
        }
    }

    /// Copies `bytes` to `out` with ASCII capitals lowered, eight bytes at a time; `false` (and `out` undefined) when
    /// a byte is not ASCII.
    private static func copyLowercasingASCII(_ bytes: UnsafeBufferPointer<UInt8>, to out: UnsafeMutablePointer<UInt8>) -> Bool {
        var index = 0
        if let base = bytes.baseAddress {
            while index + 8 <= bytes.count {
                let word = ByteWord.load(base, at: index)
                guard ByteWord.nonASCII(word) == 0 else { return false }
                // A capital's high bit, shifted down by two, is the 0x20 that lowers it.
                let capitals = ByteWord.bytes(of: word, from: UInt8(ascii: "A"), through: UInt8(ascii: "Z"))
                UnsafeMutableRawPointer(out + index).storeBytes(of: word | (capitals >> 2), as: UInt64.self)
                index += 8
            }
        }
        while index < bytes.count {
            let byte = bytes[index]
            guard byte < 0x80 else { return false }
            out[index] = byte >= 0x41 && byte <= 0x5A ? byte + 0x20 : byte
            index += 1
        }
        return true
    }

    /// The `apns-request-id` of a broadcast of `eventID` on `channelID`: the same on every resend. Channel ids are
    /// base64, where case matters, so unlike a token the id is hashed as written (after a marker that keeps the
    /// name apart from any event's token name).
    public static func apnsID(eventID: String, channelID: String) -> UUID {
        var name = Array(eventID.utf8)
        name.append(0)
        name.append(contentsOf: "channel:".utf8)
        name.append(contentsOf: channelID.utf8)
        return uuidV5(namespace: namespace, name: name)
    }

    /// The `apns-collapse-id` to send: the event's own if it set one; otherwise the event id
    /// itself when it fits APNs' 64-byte limit and can be a header value, else `sha1-` and the
    /// 40 hex digits of its SHA-1.
    public static func collapseID(eventID: String, eventCollapseID: String? = nil) -> String {
        if let eventCollapseID { return eventCollapseID }
        if eventID.utf8.count <= 64 && APNsNotification.isValidHeaderValue(eventID) { return eventID }
        return "sha1-" + APNsDeviceToken.hexText(of: Array(Insecure.SHA1.hash(data: Array(eventID.utf8))))
    }

    /// RFC 4122 §4.3: SHA-1 of namespace + name, first 16 bytes, version 5, variant 10xx.
    public static func uuidV5(namespace: UUID, name: [UInt8]) -> UUID {
        var hash = Insecure.SHA1()
        withUnsafeBytes(of: namespace.uuid) { hash.update(bufferPointer: $0) }
        hash.update(data: name)
        return uuid(from: hash.finalize())
    }

    /// The version 5 UUID of a name's SHA-1 `digest`: its first 16 bytes, version and variant set.
    private static func uuid(from digest: Insecure.SHA1Digest) -> UUID {
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        digest.withUnsafeBytes { digest in
            withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: digest[..<16])) }
        }
        uuid.6 = (uuid.6 & 0x0F) | 0x50
        uuid.8 = (uuid.8 & 0x3F) | 0x80
        return UUID(uuid: uuid)
    }
}
