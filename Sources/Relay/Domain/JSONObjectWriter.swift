// The compact JSON object writer of the record encoders.

/// Builds a compact JSON object in a fixed key order; used by the record encoders.
struct JSONObjectWriter {
    private(set) var bytes: [UInt8]
    private var isEmpty = true

    /// `capacity`: room for a whole record up front (from one byte it grew five times for a ~300-byte result).
    init(capacity: Int = 512) {
        bytes = []
        bytes.reserveCapacity(capacity)
        bytes.append(UInt8(ascii: "{"))
    }

    private mutating func key(_ name: String) {
        if !isEmpty { bytes.append(UInt8(ascii: ",")) }
        isEmpty = false
        JSON.writeString(name, into: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    /// A record's own key: a literal of plain ASCII, copied as it is (no escaping to check).
    private mutating func key(_ name: StaticString) {
        bytes.append(UInt8(ascii: isEmpty ? "\"" : ","))
        if !isEmpty { bytes.append(UInt8(ascii: "\"")) }
        isEmpty = false
        bytes.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    mutating func string(_ name: StaticString, _ value: String?) {
        key(name)
        if let value { JSON.writeString(value, into: &bytes) } else { bytes.append(contentsOf: "null".utf8) }
    }

    mutating func integer(_ name: StaticString, _ value: Int64?) {
        key(name)
        guard let value else { return bytes.append(contentsOf: "null".utf8) }
        JSON.writeInteger(value, into: &bytes)
    }

    /// A member whose value is already serialized JSON.
    mutating func raw(_ name: String, _ json: [UInt8]) {
        key(name)
        bytes.append(contentsOf: json)
    }

    mutating func boolean(_ name: StaticString, _ value: Bool) {
        key(name)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    mutating func finish() -> [UInt8] {
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }
}
