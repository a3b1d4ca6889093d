// Eight bytes tested at once, for the scans on every notification's path (a token's hex digits, its capitals,
// the bytes a JSON string must escape).

/// Tests on eight bytes read as one `UInt64` word. Each answer is a word with the high bit (0x80) set in every byte
/// that passes and nothing else, so answers combine with `|` and `&`, and `!= 0` asks whether any byte passed.
///
/// Public and inlinable so that the relay's own scans inline it: with `package` access its body is called out of
/// line, once per eight bytes of every result's encoding and `apns-id` derivation (`domain-bench` measures both).
public enum ByteWord {
    /// 0x01 in every byte.
    @inlinable @inline(__always) public static var ones: UInt64 { 0x0101_0101_0101_0101 }
    /// 0x80 in every byte: the bit each answer sets.
    @inlinable @inline(__always) public static var highBits: UInt64 { 0x8080_8080_8080_8080 }

    /// The eight bytes at `base + offset`, whatever their alignment.
    @inlinable @inline(__always) public static func load(_ base: UnsafePointer<UInt8>, at offset: Int) -> UInt64 {
        UnsafeRawPointer(base + offset).loadUnaligned(as: UInt64.self)
    }

    /// The position (0-7, in memory order) of the first byte an answer marks; `answer` must mark one.
    @inlinable @inline(__always) public static func firstMarked(_ answer: UInt64) -> Int {
        #if _endian(little)
        answer.trailingZeroBitCount / 8
        #else
        answer.leadingZeroBitCount / 8
        #endif
    }

    /// The bytes of `word` that are not ASCII (0x80 and above).
    @inlinable @inline(__always) public static func nonASCII(_ word: UInt64) -> UInt64 { word & highBits }

    /// The bytes of `word` in `lowest...highest` (ASCII bounds, `lowest <= highest < 0x80`); a byte of 0x80 and above
    /// is never in it.
    @inlinable @inline(__always) public static func bytes(of word: UInt64, from lowest: UInt8, through highest: UInt8) -> UInt64 {
        // On the low seven bits of each byte, no sum carries into the next byte: adding 0x80 - lowest sets a byte's
        // high bit when it is at least `lowest`, adding 0x7F - highest when it is above `highest`.
        let low = word & ~highBits
        let atLeastLowest = low &+ UInt64(0x80 &- lowest) &* ones
        let aboveHighest = low &+ UInt64(0x7F &- highest) &* ones
        return atLeastLowest & ~aboveHighest & ~word & highBits
    }

    /// The first index at or after `start` whose byte ends a plain run of JSON string content: a `"`, a `\\`, a control
    /// byte or a non-ASCII byte; `bytes.count` when none does. Every event's id, user and tokens, and every payload's
    /// keys and strings, are read this way, eight bytes at a time.
    @inlinable
    public static func endOfPlainJSONRun(in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        var index = start
        if let base = bytes.baseAddress {
            while index + 8 <= bytes.count {
                let word = load(base, at: index)
                let ends = Self.bytes(of: word, from: 0x00, through: 0x1F) | nonASCII(word)
                    | Self.bytes(of: word, from: UInt8(ascii: "\""), through: UInt8(ascii: "\""))
                    | Self.bytes(of: word, from: UInt8(ascii: "\\"), through: UInt8(ascii: "\\"))
                if ends != 0 { return index + firstMarked(ends) }
                index += 8
            }
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte < 0x20 || byte >= 0x80 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return index }
            index += 1
        }
        return index
    }

    /// The bytes of `word` that are hex digits: `0-9` and `a-f`, and `A-F` too when `upperCase`.
    @inlinable @inline(__always) public static func hexDigits(of word: UInt64, upperCase: Bool) -> UInt64 {
        let lower = bytes(of: word, from: UInt8(ascii: "0"), through: UInt8(ascii: "9")) | bytes(of: word, from: UInt8(ascii: "a"), through: UInt8(ascii: "f"))
        return upperCase ? lower | bytes(of: word, from: UInt8(ascii: "A"), through: UInt8(ascii: "F")) : lower
    }
}
