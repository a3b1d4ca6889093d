public import KafkaCore

/// Where a consumed record came from: its partition and offset, and which assignment of the
/// partition consumed it.
public struct RecordReference: Sendable, Hashable, CustomStringConvertible {
    public var partition: TopicPartition
    public var offset: Int64
    /// The engine's count of the partition's assignment that consumed the record (0: none). A
    /// completion (an answer, a publish) of an assignment given up since is told from one of the
    /// partition's current assignment by it, and touches nothing of the current one.
    public var generation: UInt64

    public init(_ partition: TopicPartition, _ offset: Int64, generation: UInt64 = 0) {
        self.partition = partition
        self.offset = offset
        self.generation = generation
    }

    public var description: String { "\(partition)@\(offset)" }
}

/// A `push.dlq` value standing in for an input that cannot be published again (it is larger
/// than the producer accepts once its headers are added): where to find the input, its size
/// and what is wrong with it. Published with the same headers as a dead letter plus
/// `x-dead-letter: reference`.
public struct DeadLetterReference: Sendable, Equatable {
    /// The input record.
    public var source: RecordReference
    /// The input's key (the dead letter's key).
    public var key: [UInt8]?
    /// The input value's size in bytes.
    public var size: Int
    /// What is wrong with the input (bounded like `x-error`).
    public var error: String
    /// The input's trace context, published as headers beside the dead letter's own.
    public var trace: TraceHeaders

    /// Creates a reference to `message`.
    public init(source: RecordReference, key: [UInt8]?, size: Int, error: String, trace: TraceHeaders = .none) {
        self.trace = trace
        self.source = source
        self.key = key
        self.size = size
        self.error = error
    }

    /// `{"source_topic","source_partition","source_offset","size","error"}`.
    public func encoded() -> [UInt8] {
        var writer = JSONObjectWriter()
        writer.string("source_topic", source.partition.topic)
        writer.integer("source_partition", Int64(source.partition.partition))
        writer.integer("source_offset", source.offset)
        writer.integer("size", Int64(size))
        writer.string("error", error)
        return writer.finish()
    }
}
