extension Fuzz {
    /// An input for a decoder that is fed bytes as they arrive: the first byte says how many of the
    /// following bytes are chunk sizes (0–7), those sizes are cycled over the rest, the stream.
    /// A size of 0 is an empty read, which a decoder must also survive.
    public struct SplitInput: Sendable, Equatable {
        /// The bytes the decoder is fed.
        public var stream: [UInt8]
        /// The chunk sizes, cycled; empty means the stream in one piece.
        public var chunkSizes: [Int]

        /// Splits a fuzz input into its chunk sizes and its stream; `nil` for an empty input.
        public init?(_ bytes: [UInt8]) {
            guard let first = bytes.first else { return nil }
            let sizeCount = min(Int(first % 8), bytes.count - 1)
            chunkSizes = bytes[1..<(1 + sizeCount)].map(Int.init)
            // All-zero sizes would never make progress: such a pattern means one byte at a time.
            if !chunkSizes.isEmpty, chunkSizes.allSatisfy({ $0 == 0 }) { chunkSizes.append(1) }
            stream = Array(bytes[(1 + sizeCount)...])
        }

        /// The stream cut by ``chunkSizes`` (the last chunk may be shorter).
        public var chunks: [ArraySlice<UInt8>] { Fuzz.chunks(of: stream, sizes: chunkSizes) }
    }

    /// `stream` cut into pieces of `sizes`, cycled; the whole stream when `sizes` is empty.
    public static func chunks(of stream: [UInt8], sizes: [Int]) -> [ArraySlice<UInt8>] {
        guard !sizes.isEmpty else { return [stream[...]] }
        var chunks: [ArraySlice<UInt8>] = []
        var start = 0
        var index = 0
        while start < stream.count {
            let end = min(stream.count, start + sizes[index % sizes.count])
            chunks.append(stream[start..<end])
            start = end
            index += 1
        }
        return chunks
    }

    /// Decodes a split input three ways — the stream whole, one byte at a time, and in its own chunk
    /// sizes — requires the same outcome from each, and returns it. An incremental decoder's result
    /// must not depend on how the network happened to cut the bytes.
    public static func requireSplitIndependence<Outcome: Equatable>(
        _ input: SplitInput, decode: ([ArraySlice<UInt8>]) -> Outcome
    ) -> Outcome {
        let whole = decode(chunks(of: input.stream, sizes: []))
        let byteByByte = decode(chunks(of: input.stream, sizes: [1]))
        require(whole == byteByByte, "fed whole: \(whole); fed a byte at a time: \(byteByByte)")
        let split = decode(input.chunks)
        require(whole == split, "fed whole: \(whole); fed in chunks of \(input.chunkSizes): \(split)")
        return whole
    }
}

/// What an incremental decoder made of a stream: the items read, in order, and then either the
/// error it stopped at or the bytes still buffered for the rest of an item.
public struct IncrementalOutcome<Item: Equatable, Failure: Error & Equatable>: Equatable {
    public var items: [Item] = []
    public var error: Failure?
    public var bufferedBytes = 0
}

extension Fuzz {
    /// Feeds `chunks` to a decoder as a channel handler does, reading every complete item after each
    /// chunk and stopping at the first error (a connection closes then). Between reads the decoder
    /// may hold less than `bufferLimit` bytes: a partial item, never a backlog a peer could grow.
    ///
    /// `feed` gets each chunk with its index (so a target can alternate its decoder's `feed` overloads).
    public static func decodeIncrementally<Item, Failure>(
        _ chunks: [ArraySlice<UInt8>], bufferLimit: Int,
        feed: (ArraySlice<UInt8>, Int) -> Void, next: () throws(Failure) -> Item?, bufferedBytes: () -> Int
    ) -> IncrementalOutcome<Item, Failure> {
        var outcome = IncrementalOutcome<Item, Failure>()
        for (index, chunk) in chunks.enumerated() {
            feed(chunk, index)
            do throws(Failure) {
                while let item = try next() { outcome.items.append(item) }
            } catch {
                outcome.error = error
                return outcome
            }
            require(bufferedBytes() < bufferLimit, "\(bufferedBytes()) bytes buffered after a read (limit \(bufferLimit))")
        }
        outcome.bufferedBytes = bufferedBytes()
        return outcome
    }
}
