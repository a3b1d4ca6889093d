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
public struct KafkaMessage: Sendable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public var key: [UInt8]?
    public var value: [UInt8]?
    public var headers: [KafkaHeader]
    /// Milliseconds since the epoch, as the producer or broker stamped it; `nil` when unavailable.
    public var timestamp: Int64?

    public init(
        topic: String, partition: Int32, offset: Int64, key: [UInt8]?, value: [UInt8]?,
        headers: [KafkaHeader] = [], timestamp: Int64? = nil
    ) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
    }

    public var topicPartition: TopicPartition { TopicPartition(topic, partition) }

    /// The first header with this key.
    public func header(_ key: String) -> KafkaHeader? { headers.first { $0.key == key } }
}

/// A record to produce.
public struct KafkaRecord: Sendable {
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
