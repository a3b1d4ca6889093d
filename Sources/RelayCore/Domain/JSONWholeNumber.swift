// Reading a JSON number as a whole number the way JSON Schema's `integer` type does.

/// JSON Schema (2020-12, its `integer` type) counts any number whose value is whole as an integer: `3`, `3.0`,
/// `3e0` and `300e-2` are one value. The relay's fields and its published schemas follow that rule, so an event
/// the schema accepts is one the decoder accepts: a producer whose JSON writer spells a whole number with a
/// fraction or an exponent (Python's `3.0`, a `1e3` from a template) is not refused.
enum JSONWholeNumber {
    /// The literal's value as an `Int64` when it is whole and fits; `nil` for a fraction, or a value outside
    /// `Int64`. `literal` must follow the JSON number grammar (the parser checked it).
    static func value(of literal: some Collection<UInt8>) -> Int64? {
        var index = literal.startIndex
        var negative = false
        if index < literal.endIndex, literal[index] == UInt8(ascii: "-") {
            negative = true
            index = literal.index(after: index)
        }
        // The significant digits, leading zeros left out, and the power of ten they are scaled by.
        var digits: [UInt8] = []
        var scale = 0
        var inFraction = false
        while index < literal.endIndex {
            let byte = literal[index]
            if byte == UInt8(ascii: ".") {
                inFraction = true
            } else if byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") {
                index = literal.index(after: index)
                guard let exponent = exponent(literal[index...]) else { return nil }
                scale += exponent
                break
            } else {
                if inFraction { scale -= 1 }
                if !(digits.isEmpty && byte == UInt8(ascii: "0")) { digits.append(byte - UInt8(ascii: "0")) }
            }
            index = literal.index(after: index)
        }
        // Trailing zeros are powers of ten: a fraction of zeros is whole.
        while let last = digits.last, last == 0 {
            digits.removeLast()
            scale += 1
        }
        if digits.isEmpty { return 0 }
        guard scale >= 0, digits.count + scale <= 19 else { return nil }
        var magnitude: UInt64 = 0
        for digit in digits {
            magnitude = magnitude * 10 + UInt64(digit)
        }
        for _ in 0..<scale {
            let (times10, overflow) = magnitude.multipliedReportingOverflow(by: 10)
            guard !overflow else { return nil }
            magnitude = times10
        }
        if negative { return magnitude <= UInt64(Int64.max) + 1 ? Int64(truncatingIfNeeded: 0 &- magnitude) : nil }
        return magnitude <= UInt64(Int64.max) ? Int64(magnitude) : nil
    }

    /// An exponent's value (`+12`, `-3`, `7`), `nil` past any scale a whole `Int64` can need.
    private static func exponent(_ text: some Collection<UInt8>) -> Int? {
        var index = text.startIndex
        var negative = false
        if index < text.endIndex, text[index] == UInt8(ascii: "-") || text[index] == UInt8(ascii: "+") {
            negative = text[index] == UInt8(ascii: "-")
            index = text.index(after: index)
        }
        var value = 0
        while index < text.endIndex {
            // Beyond a few hundred the answer is settled: too large, or a fraction (or zero, which digits say).
            value = min(value * 10 + Int(text[index] - UInt8(ascii: "0")), 10_000)
            index = text.index(after: index)
        }
        return negative ? -value : value
    }
}
