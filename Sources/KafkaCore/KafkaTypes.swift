/// A topic and one of its partitions.
public struct TopicPartition: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(_ topic: String, _ partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    /// The partition number and the topic's length, not its text: hashing the text led the relay's hashing (a
    /// partition's state is looked up several times per record). Equal values still hash alike, and equality
    /// still compares the topic.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(partition)
        hasher.combine(topic.utf8.count)
    }

    public static func < (lhs: TopicPartition, rhs: TopicPartition) -> Bool {
        (lhs.topic, lhs.partition) < (rhs.topic, rhs.partition)
    }

    public var description: String { "\(topic)[\(partition)]" }
}

/// A Kafka record header. A header may have no value (`nil`), which differs from an empty one.
public struct KafkaHeader: Hashable, Sendable {
    public var key: String
    public var value: [UInt8]?

    public init(key: String, value: [UInt8]?) {
        self.key = key
        self.value = value
    }

    public init(key: String, value: String) {
        self.key = key
        self.value = Array(value.utf8)
    }
}

/// A record read from Kafka.
///
/// Its key and value are slices of an array it shares with the other records of the read that
/// brought it (about 64 KiB each): reading a batch allocates
/// once per chunk instead of twice per record, and copying a record costs one reference. Their
/// indices are therefore not zero-based; a value kept for long should be copied out (`Array(value)`)
/// so it does not hold its neighbours' bytes.
public struct KafkaMessage: Sendable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public var headers: [KafkaHeader]
    /// Milliseconds since the epoch, as the producer or broker stamped it; `nil` when unavailable.
    public var timestamp: Int64?
    /// The bytes of `key` and `value`, and of other records.
    private let bytes: [UInt8]
    private let keyBounds: Bounds
    private let valueBounds: Bounds

    /// The chunk size the readers pack keys and values into: small enough that a record kept a while
    /// holds little else, large enough that a batch of small records needs few allocations.
    package static let sharedBytesChunk = 64 << 10

    /// Where a key or value lies in `bytes`; `count` -1 for a null one. Int32 keeps a message small:
    /// a chunk never holds more than one record past `sharedBytesChunk`, and a record is under 2 GiB.
    package struct Bounds: Sendable {
        package var start: Int32
        package var count: Int32
        package static let null = Bounds(start: 0, count: -1)

        package func slice(of bytes: [UInt8]) -> ArraySlice<UInt8>? {
            count < 0 ? nil : bytes[Int(start)..<Int(start) + Int(count)]
        }
    }

    /// The key, `nil` for a null key (which differs from an empty one).
    public var key: ArraySlice<UInt8>? { keyBounds.slice(of: bytes) }
    /// The value, `nil` for a null value (a tombstone).
    public var value: ArraySlice<UInt8>? { valueBounds.slice(of: bytes) }

    public init(
        topic: String, partition: Int32, offset: Int64, key: [UInt8]?, value: [UInt8]?,
        headers: [KafkaHeader] = [], timestamp: Int64? = nil
    ) {
        let keyCount = key?.count ?? 0
        self.init(
            topic: topic, partition: partition, offset: offset, bytes: (key ?? []) + (value ?? []),
            keyBounds: Bounds(start: 0, count: keyCount, present: key != nil),
            valueBounds: Bounds(start: keyCount, count: value?.count ?? 0, present: value != nil),
            headers: headers, timestamp: timestamp
        )
    }

    package init(
        topic: String, partition: Int32, offset: Int64, bytes: [UInt8], keyBounds: Bounds, valueBounds: Bounds,
        headers: [KafkaHeader], timestamp: Int64?
    ) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.bytes = bytes
        self.keyBounds = keyBounds
        self.valueBounds = valueBounds
        self.headers = headers
        self.timestamp = timestamp
    }

    public var topicPartition: TopicPartition { TopicPartition(topic, partition) }

    /// The bytes this message keeps alive: its chunk's, shared with its neighbours until ``detached()``.
    package var retainedBytes: Int { bytes.count }

    /// The same record holding only its own key and value: for a message kept while others of its read are done
    /// with, so it does not keep their chunk alive (one copy of its bytes).
    public func detached() -> KafkaMessage {
        guard bytes.count > Int(max(keyBounds.count, 0)) + Int(max(valueBounds.count, 0)) else { return self }
        return KafkaMessage(topic: topic, partition: partition, offset: offset, key: key.map(Array.init), value: value.map(Array.init),
                            headers: headers, timestamp: timestamp)
    }

    /// The first header with this key.
    public func header(_ key: String) -> KafkaHeader? { headers.first { $0.key == key } }
}

extension KafkaMessage.Bounds {
    /// Bounds for `count` bytes at `start`, or null when there are no bytes (`present` false).
    package init(start: Int, count: Int, present: Bool) {
        self = present ? Self(start: Int32(start), count: Int32(count)) : .null
    }
}

/// A record to produce.
public struct KafkaRecord: Sendable, Equatable {
    public var topic: String
    /// An explicit partition, or `nil` for librdkafka's default partitioner (by key hash).
    public var partition: Int32?
    public var key: [UInt8]?
    public var value: [UInt8]?
    public var headers: [KafkaHeader]

    public init(
        topic: String, partition: Int32? = nil, key: [UInt8]?, value: [UInt8]?,
        headers: [KafkaHeader] = []
    ) {
        self.topic = topic
        self.partition = partition
        self.key = key
        self.value = value
        self.headers = headers
    }
}

/// Where a produced record landed.
public struct KafkaDeliveryReport: Sendable, Hashable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64

    /// Creates the value.
    package init(topic: String, partition: Int32, offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }
}

/// A group's committed position in one partition.
public struct KafkaCommittedOffset: Sendable, Hashable {
    /// The next offset to read, `nil` when the group never committed.
    public var offset: Int64?
    /// The metadata committed with it, if any.
    public var metadata: String?

    /// Creates the value.
    public init(offset: Int64?, metadata: String?) {
        self.offset = offset
        self.metadata = metadata
    }
}
