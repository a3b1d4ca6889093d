import NIOCore

/// The Kafka protocol's primitive types on a `ByteBuffer` (the protocol guide's "Protocol Primitive Types"): big-endian
/// integers, unsigned varints, strings with an INT16 length (`STRING`, `NULLABLE_STRING`) or a varint length plus one
/// (`COMPACT_STRING`, `COMPACT_NULLABLE_STRING`), arrays likewise, and the tagged fields of flexible versions.
/// A read past the end throws ``KafkaWireError``: the front passes a message it cannot read on unchanged.
struct KafkaWireError: Error, CustomStringConvertible {
    var description: String
}

extension ByteBuffer {
    mutating func readKafkaInt8() throws -> Int8 { try required(readInteger(as: Int8.self), "INT8") }
    mutating func readKafkaInt16() throws -> Int16 { try required(readInteger(as: Int16.self), "INT16") }
    mutating func readKafkaInt32() throws -> Int32 { try required(readInteger(as: Int32.self), "INT32") }
    mutating func readKafkaInt64() throws -> Int64 { try required(readInteger(as: Int64.self), "INT64") }

    /// An `UNSIGNED_VARINT`: 7 bits per byte, least significant first, at most 5 bytes for 32 bits.
    mutating func readKafkaUnsignedVarint() throws -> UInt32 {
        var value: UInt32 = 0
        for shift in stride(from: 0, to: 35, by: 7) {
            let byte = try required(readInteger(as: UInt8.self), "UNSIGNED_VARINT")
            value |= UInt32(byte & 0x7F) << UInt32(shift)
            if byte & 0x80 == 0 { return value }
        }
        throw KafkaWireError(description: "an UNSIGNED_VARINT longer than 5 bytes")
    }

    /// A string of the given flexibility: `COMPACT_NULLABLE_STRING` when `compact`, else `NULLABLE_STRING`; `nil` for null.
    mutating func readKafkaString(compact: Bool) throws -> String? {
        let length: Int
        if compact {
            let lengthPlusOne = try readKafkaUnsignedVarint()
            if lengthPlusOne == 0 { return nil }
            length = Int(lengthPlusOne) - 1
        } else {
            let raw = try readKafkaInt16()
            if raw < 0 { return nil }
            length = Int(raw)
        }
        return try required(readString(length: length), "a string of \(length) bytes")
    }

    /// The length of a `BYTES` / `COMPACT_BYTES` (or their nullable forms; null counts 0), the bytes left to read.
    mutating func readKafkaBytesLength(compact: Bool) throws -> Int {
        if compact {
            let lengthPlusOne = try readKafkaUnsignedVarint()
            return lengthPlusOne == 0 ? 0 : Int(lengthPlusOne) - 1
        }
        return Int(max(0, try readKafkaInt32()))
    }

    /// Skips a `BYTES` / `COMPACT_BYTES` (or their nullable forms).
    mutating func skipKafkaBytes(compact: Bool) throws {
        let length = try readKafkaBytesLength(compact: compact)
        guard readableBytes >= length else { throw KafkaWireError(description: "bytes of \(length) past the end") }
        moveReaderIndex(forwardBy: length)
    }

    /// An array's element count (`ARRAY` / `COMPACT_ARRAY`); a null array counts 0.
    mutating func readKafkaArrayCount(compact: Bool) throws -> Int {
        if compact {
            let countPlusOne = try readKafkaUnsignedVarint()
            return countPlusOne == 0 ? 0 : Int(countPlusOne) - 1
        }
        return Int(max(0, try readKafkaInt32()))
    }

    /// Skips a `TAG_BUFFER`: a count, then per field its tag, size and that many bytes.
    mutating func skipKafkaTaggedFields() throws {
        let count = try readKafkaUnsignedVarint()
        for _ in 0..<count {
            _ = try readKafkaUnsignedVarint()
            let size = Int(try readKafkaUnsignedVarint())
            guard readableBytes >= size else { throw KafkaWireError(description: "a tagged field of \(size) bytes past the end") }
            moveReaderIndex(forwardBy: size)
        }
    }

    mutating func writeKafkaUnsignedVarint(_ value: UInt32) {
        var rest = value
        while rest >= 0x80 {
            writeInteger(UInt8(rest & 0x7F | 0x80))
            rest >>= 7
        }
        writeInteger(UInt8(rest))
    }

    /// Writes a string as `COMPACT_NULLABLE_STRING` when `compact`, else `NULLABLE_STRING`.
    mutating func writeKafkaString(_ string: String?, compact: Bool) {
        guard let string else {
            if compact { writeKafkaUnsignedVarint(0) } else { writeInteger(Int16(-1)) }
            return
        }
        let utf8 = Array(string.utf8)
        if compact { writeKafkaUnsignedVarint(UInt32(utf8.count + 1)) } else { writeInteger(Int16(utf8.count)) }
        writeBytes(utf8)
    }

    mutating func writeKafkaArrayCount(_ count: Int, compact: Bool) {
        if compact { writeKafkaUnsignedVarint(UInt32(count + 1)) } else { writeInteger(Int32(count)) }
    }

    /// An empty `TAG_BUFFER`.
    mutating func writeKafkaNoTaggedFields() { writeKafkaUnsignedVarint(0) }

    private func required<T>(_ value: T?, _ what: String) throws -> T {
        guard let value else { throw KafkaWireError(description: "\(what) past the end of the message") }
        return value
    }
}
