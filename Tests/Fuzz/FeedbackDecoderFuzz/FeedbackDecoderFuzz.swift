import APNs
import FuzzSupport
import NIOCore

/// Fuzzes `APNsFeedbackDecoder`, which reads the legacy feedback service's tuples
/// (`timestamp (4) | token length (2) | token`) as the feedback client receives them, and the
/// values the relay takes from a tuple (`tokenHex`, `sinceMilliseconds`).
/// Corpus: `Tests/Fuzz/Corpus/FeedbackDecoderFuzz/`.
///
/// Input layout (``Fuzz/SplitInput``): one byte giving the number of chunk sizes (0–7), the chunk
/// sizes, then the bytes the feedback service sent.
enum FeedbackDecoderFuzz: FuzzTarget {
    /// The largest record: a header and the longest token accepted.
    static let largestTuple = 6 + APNsFeedbackDecoder.tokenLengthBound.upperBound

    /// What the client sees: the tuples read, then an error or a partial tuple (which `finish()` reports).
    typealias Outcome = IncrementalOutcome<APNsFeedbackTuple, APNsBinaryDecodingError>

    static func check(_ bytes: [UInt8]) {
        guard let input = Fuzz.SplitInput(bytes) else { return }
        let outcome = Fuzz.requireSplitIndependence(input, decode: decode)
        let stream = input.stream

        // Each tuple is exactly the bytes it was read from, in order, with a token of an accepted length.
        let consumed = outcome.items.reduce(0) { $0 + 6 + $1.token.count }
        Fuzz.require(outcome.items.flatMap(\.encoded) == Array(stream.prefix(consumed)), "tuples differ from the bytes read")
        for tuple in outcome.items {
            checkTuple(tuple)
        }

        // It stops at the first length outside the bound, and only there; otherwise what is left is
        // a partial tuple, which the end of the stream reports instead of inventing a tuple.
        let rest = Array(stream[consumed...])
        let declaredLength = rest.count >= 6 ? Int(rest[4]) << 8 | Int(rest[5]) : nil
        if let error = outcome.error {
            let expected = APNsBinaryDecodingError.lengthOutOfBounds(
                field: "feedback token", length: declaredLength ?? -1, bound: APNsFeedbackDecoder.tokenLengthBound)
            Fuzz.require(error == expected, "error \(error) at offset \(consumed), declared length \(declaredLength ?? -1)")
        } else {
            Fuzz.require(outcome.bufferedBytes == rest.count, "\(outcome.bufferedBytes) bytes buffered, \(rest.count) unread")
            if let declaredLength {
                Fuzz.require(APNsFeedbackDecoder.tokenLengthBound.contains(declaredLength) && rest.count < 6 + declaredLength, "a complete tuple was left unread")
            }
        }
        checkDrainAndFinish(stream, outcome: outcome)
    }

    /// What the relay publishes from a tuple: the token as lower-case hex of twice its length, the
    /// time in milliseconds.
    static func checkTuple(_ tuple: APNsFeedbackTuple) {
        Fuzz.require(APNsFeedbackDecoder.tokenLengthBound.contains(tuple.token.count), "token of \(tuple.token.count) bytes")
        let hex = Array(tuple.tokenHex.utf8)
        Fuzz.require(hex.count == tuple.token.count * 2, "tokenHex of \(hex.count) digits for \(tuple.token.count) bytes")
        Fuzz.require(hex.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }, "tokenHex is not lower-case hex")
        let decoded: [UInt8?] = stride(from: 0, to: hex.count, by: 2).map { UInt8(String(decoding: hex[$0..<$0 + 2], as: UTF8.self), radix: 16) }
        Fuzz.require(decoded == tuple.token.map(Optional.some), "tokenHex does not spell the token")
        Fuzz.require(tuple.sinceMilliseconds == Int64(tuple.timestamp) * 1000, "since \(tuple.sinceMilliseconds) for \(tuple.timestamp)")
    }

    /// `drain()` (what the client calls) agrees with reading tuple by tuple, and `finish()` reports a
    /// partial tuple, by its size, exactly when one is left.
    static func checkDrainAndFinish(_ stream: [UInt8], outcome: Outcome) {
        var decoder = APNsFeedbackDecoder()
        decoder.feed(stream)
        do {
            let tuples = try decoder.drain()
            Fuzz.require(outcome.error == nil && tuples == outcome.items, "drain read \(tuples.count) tuples, next() \(outcome.items.count) then \(String(describing: outcome.error))")
        } catch {
            Fuzz.require(error == outcome.error, "drain threw \(error), next() \(String(describing: outcome.error))")
            return
        }
        do {
            try decoder.finish()
            Fuzz.require(outcome.bufferedBytes == 0, "finish accepted \(outcome.bufferedBytes) bytes of a partial tuple")
        } catch {
            Fuzz.require(error == .truncated(bytes: outcome.bufferedBytes) && outcome.bufferedBytes > 0, "finish threw \(error)")
        }
    }

    /// Feeds the chunks as `channelRead` does (alternating the two `feed` overloads); at most a
    /// partial tuple may stay buffered between reads, so a hostile length cannot make it wait for more.
    static func decode(_ chunks: [ArraySlice<UInt8>]) -> Outcome {
        var decoder = APNsFeedbackDecoder()
        return Fuzz.decodeIncrementally(
            chunks, bufferLimit: largestTuple,
            feed: { chunk, index in if index.isMultiple(of: 2) { decoder.feed(ByteBuffer(bytes: chunk)) } else { decoder.feed(chunk) } },
            next: { () throws(APNsBinaryDecodingError) in try decoder.next() }, bufferedBytes: { decoder.bufferedBytes })
    }
}

#if FUZZING
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt { FeedbackDecoderFuzz.fuzzOne(data, size) }
#else
@main extension FeedbackDecoderFuzz {}
#endif
