public import Foundation

/// `apns-id` text (8-4-4-4-12 hex digits) to and from `UUID`, without Foundation's `printf`/`sscanf` based
/// conversions: every request carries one on both sides of an HTTP/2 connection, and those parse a format string
/// each time.
public enum APNsUUIDText {
    /// The lower-case text of `uuid`, as APNs writes an `apns-id`.
    public static func format(_ uuid: UUID) -> String {
        String(unsafeUninitializedCapacity: 36) { text in
            write(uuid, to: text.baseAddress!)
            return 36
        }
    }

    /// Appends the 36 characters of `uuid`'s text to `bytes` (a request's header block), with no string between.
    public static func append(_ uuid: UUID, to bytes: inout [UInt8]) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 36) { text in
            write(uuid, to: text.baseAddress!)
            bytes.append(contentsOf: UnsafeBufferPointer(text))
        }
    }

    /// Where the two digits of byte `index` (0-15) start in the text: a dash before bytes 4, 6, 8 and 10.
    @inline(__always)
    private static func textOffset(ofByte index: Int) -> Int {
        2 * index + (index >= 4 ? 1 : 0) + (index >= 6 ? 1 : 0) + (index >= 8 ? 1 : 0) + (index >= 10 ? 1 : 0)
    }

    /// Writes the 36 characters of `uuid`'s text at `text`, which has room for them. The digits are computed, not
    /// looked up: one result and one request each write an `apns-id`.
    private static func write(_ uuid: UUID, to text: UnsafeMutablePointer<UInt8>) {
        withUnsafeBytes(of: uuid.uuid) { bytes in
            for index in 0..<16 {
                let byte = bytes[index]
                let offset = textOffset(ofByte: index)
                text[offset] = APNsDeviceToken.hexDigit(byte >> 4)
                text[offset + 1] = APNsDeviceToken.hexDigit(byte & 0x0F)
            }
        }
        (text[8], text[13], text[18], text[23]) = (UInt8(ascii: "-"), UInt8(ascii: "-"), UInt8(ascii: "-"), UInt8(ascii: "-"))
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
        guard utf8.count == 36, let text = utf8.baseAddress else { return nil }
        guard text[8] == UInt8(ascii: "-"), text[13] == UInt8(ascii: "-"), text[18] == UInt8(ascii: "-"),
              text[23] == UInt8(ascii: "-") else { return nil }
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        // 0x10 in `invalid` once any digit is not hex: one test at the end, no branch per digit.
        var invalid: UInt8 = 0
        withUnsafeMutableBytes(of: &uuid) { bytes in
            for index in 0..<16 {
                let offset = textOffset(ofByte: index)
                let high = nibbleOrInvalid(text[offset])
                let low = nibbleOrInvalid(text[offset + 1])
                invalid |= high | low
                bytes[index] = high << 4 | (low & 0x0F)
            }
        }
        return invalid & 0x10 == 0 ? UUID(uuid: uuid) : nil
    }

    /// The value of a hex digit (either case) in the low four bits, or 0x10 when `character` is not one.
    @inline(__always)
    private static func nibbleOrInvalid(_ character: UInt8) -> UInt8 {
        let digit = character &- UInt8(ascii: "0")
        if digit < 10 { return digit }
        // `| 0x20` lower-cases a letter; only 'A'-'F' and 'a'-'f' land in a-f by it.
        let letter = (character | 0x20) &- UInt8(ascii: "a")
        return letter < 6 ? letter + 10 : 0x10
    }
}
