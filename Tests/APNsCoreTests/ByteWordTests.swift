@testable import APNsCore
import Testing

@Suite("Eight bytes at a time")
struct ByteWordTests {
    @Test("ByteWord's range test marks exactly the bytes in the range, at every position of the word, for every byte value")
    func byteWordRanges() {
        let ranges: [ClosedRange<UInt8>] = [0x00...0x1F, 0x22...0x22, 0x30...0x39, 0x41...0x5A, 0x61...0x66, 0x00...0x7F, 0x7F...0x7F]
        for range in ranges {
            for position in 0..<8 {
                for byte in UInt8.min...UInt8.max {
                    // The other seven bytes are each range's neighbours and the extremes, to catch a carry or borrow.
                    var bytes: [UInt8] = [range.lowerBound &- 1, range.upperBound &+ 1, 0x00, 0x7F, 0x80, 0xFF, range.lowerBound, range.upperBound]
                    bytes[position] = byte
                    let word = bytes.withUnsafeBufferPointer { ByteWord.load($0.baseAddress!, at: 0) }
                    let marked = ByteWord.bytes(of: word, from: range.lowerBound, through: range.upperBound)
                    let expected = bytes.enumerated().reduce(UInt64(0)) { mark, entry in
                        range.contains(entry.element) ? mark | (UInt64(0x80) << (8 * UInt64(entry.offset))) : mark
                    }
                    #expect(marked == expected, "byte \(byte) at \(position) in \(range)")
                    #expect(ByteWord.nonASCII(word) == bytes.enumerated().reduce(UInt64(0)) { mark, entry in
                        entry.element >= 0x80 ? mark | (UInt64(0x80) << (8 * UInt64(entry.offset))) : mark
                    })
                    if let first = bytes.firstIndex(where: range.contains) {
                        #expect(ByteWord.firstMarked(marked) == first, "byte \(byte) at \(position) in \(range)")
                    }
                }
            }
        }
    }

}
