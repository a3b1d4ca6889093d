import APNs
import FuzzSupport
import NIOCore

/// Fuzzes `APNsBinaryErrorResponseDecoder`, which reads the legacy gateway's answers
/// (`8 | status | identifier`) as the binary connection receives them.
/// Corpus: `Tests/Fuzz/Corpus/BinaryErrorResponseFuzz/`.
///
/// Input layout (``Fuzz/SplitInput``): one byte giving the number of chunk sizes (0–7), the chunk
/// sizes, then the bytes the gateway sent.
enum BinaryErrorResponseFuzz: FuzzTarget {
    /// What the connection sees: the responses read, then an error or a partial response.
    typealias Outcome = IncrementalOutcome<APNsBinaryErrorResponse, APNsBinaryDecodingError>

    static func check(_ bytes: [UInt8]) {
        guard let input = Fuzz.SplitInput(bytes) else { return }
        let outcome = Fuzz.requireSplitIndependence(input, decode: decode)
        let stream = input.stream

        // Each response is exactly the six bytes it was read from, in order: nothing skipped,
        // nothing invented, every status byte kept (an undocumented one too).
        let consumed = outcome.items.count * APNsBinaryErrorResponse.size
        Fuzz.require(outcome.items.flatMap(\.encoded) == Array(stream.prefix(consumed)), "responses differ from the bytes read")
        for response in outcome.items {
            Fuzz.require(!response.status.name.isEmpty, "status \(response.status.rawValue) has no name")
        }

        // It stops at the first byte that does not start a response, and only there.
        let rest = stream[consumed...]
        if let error = outcome.error {
            Fuzz.require(error == .unexpectedCommand(rest.first ?? 0) && rest.first != APNsBinaryErrorResponse.command, "error \(error) at offset \(consumed)")
        } else {
            Fuzz.require(rest.count < APNsBinaryErrorResponse.size, "\(rest.count) bytes left unread without an error")
            Fuzz.require(rest.isEmpty || rest.first == APNsBinaryErrorResponse.command, "waits for more after a byte that is not a response")
            Fuzz.require(outcome.bufferedBytes == rest.count, "\(outcome.bufferedBytes) bytes buffered, \(rest.count) unread")
        }
    }

    /// Feeds the chunks as `channelRead` does (alternating the two `feed` overloads); at most a
    /// partial response may stay buffered between reads.
    static func decode(_ chunks: [ArraySlice<UInt8>]) -> Outcome {
        var decoder = APNsBinaryErrorResponseDecoder()
        return Fuzz.decodeIncrementally(
            chunks, bufferLimit: APNsBinaryErrorResponse.size,
            feed: { chunk, index in if index.isMultiple(of: 2) { decoder.feed(ByteBuffer(bytes: chunk)) } else { decoder.feed(chunk) } },
            next: { () throws(APNsBinaryDecodingError) in try decoder.next() }, bufferedBytes: { decoder.bufferedBytes })
    }
}

#if FUZZING
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt { BinaryErrorResponseFuzz.fuzzOne(data, size) }
#else
@main extension BinaryErrorResponseFuzz {}
#endif
