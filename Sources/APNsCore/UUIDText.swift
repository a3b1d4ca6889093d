public import Foundation

/// `apns-id` text (8-4-4-4-12 hex digits) to and from `UUID`, without Foundation's `printf`/`sscanf` based
/// conversions, which cost a few percent of every request on both sides of an HTTP/2 connection.
public enum APNsUUIDText {
    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// The lower-case text of `uuid`, as APNs writes an `apns-id`.
    public static func format(_ uuid: UUID) -> String {
        String(unsafeUninitializedCapacity: 36) { text in
            write(uuid, to: text)
            return 36
        }
    }

    /// Appends the 36 characters of `uuid`'s text to `bytes` (a request's header block), with no string between.
    public static func append(_ uuid: UUID, to bytes: inout [UInt8]) {
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: 36))
        bytes.withUnsafeMutableBufferPointer { write(uuid, to: UnsafeMutableBufferPointer(rebasing: $0[start...])) }
    }

    /// Writes the 36 characters of `uuid`'s text at the start of `text`, which has room for them.
    private static func write(_ uuid: UUID, to text: UnsafeMutableBufferPointer<UInt8>) {
        withUnsafeBytes(of: uuid.uuid) { bytes in
            var position = 0
            for index in 0..<bytes.count {
                let byte = bytes[index]
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    text[position] = UInt8(ascii: "-")
                    position += 1
                }
                text[position] = hexDigits[Int(byte >> 4)]
                text[position + 1] = hexDigits[Int(byte & 0x0F)]
                position += 2
            }
        }
    }

    /// The UUID that `text` spells (hex digits in either case), or `nil` when it is not one. Not generic on
    /// purpose: callers in other modules would run unspecialised code, slower than the sscanf it replaces.
    public static func parse(_ text: String) -> UUID? {
        guard text.utf8.count == 36 else { return nil }
        var text = text
        // The bytes in place (a header value is a native string): no per-character index walk.
        return text.withUTF8(parse(utf8:))
    }

    /// The UUID that the UTF-8 bytes `utf8` spell, as ``parse(_:)`` reads text: a header value read in place,
    /// with no string made for it first.
    public static func parse(utf8: UnsafeBufferPointer<UInt8>) -> UUID? {
        guard utf8.count == 36 else { return nil }
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let parsed = withUnsafeMutableBytes(of: &uuid) { bytes -> Bool in
            var byteIndex = 0
            var high: UInt8?
            var position = -1
            for character in utf8 {
                position += 1
                if position == 8 || position == 13 || position == 18 || position == 23 {
                    guard character == UInt8(ascii: "-") else { return false }
                    continue
                }
                guard let nibble = APNsDeviceToken.nibble(character) else { return false }
                if let first = high {
                    bytes[byteIndex] = first << 4 | nibble
                    byteIndex += 1
                    high = nil
                } else {
                    high = nibble
                }
            }
            return byteIndex == 16
        }
        return parsed ? UUID(uuid: uuid) : nil
    }
}
