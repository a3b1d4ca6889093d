public import APNs
public import Kafka

/// Where a consumed record came from: its partition and offset.
public struct RecordReference: Sendable, Hashable, CustomStringConvertible {
    public var partition: TopicPartition
    public var offset: Int64

    public init(_ partition: TopicPartition, _ offset: Int64) {
        self.partition = partition
        self.offset = offset
    }

    public var description: String { "\(partition)@\(offset)" }
}

/// A notification between the dispatcher and APNs, with what its result record needs.
public struct PendingNotification: Sendable {
    public var record: RecordReference
    public var eventID: String
    public var user: String?
    public var seq: Int64?
    public var badge: Int64?
    /// The device token, lower-case hex, as records write it.
    public var token: String
    /// What is sent, validated when the event was fanned out.
    public var notification: APNsNotification
    /// The APNs environment (host) it goes to.
    public var environment: APNsEnvironment
    /// When the event was consumed (epoch ms), for the event→answer latency.
    public var consumedAt: Int64
    /// The event's seq had been skipped before it arrived (its result says so).
    public var late: Bool = false

    /// Creates a notification on its way to APNs.
    public init(record: RecordReference, eventID: String, user: String?, seq: Int64?, badge: Int64?, token: String,
                notification: APNsNotification, environment: APNsEnvironment, consumedAt: Int64, late: Bool = false) {
        self.record = record
        self.eventID = eventID
        self.user = user
        self.seq = seq
        self.badge = badge
        self.token = token
        self.notification = notification
        self.environment = environment
        self.consumedAt = consumedAt
        self.late = late
    }

    /// The `apns-id` as records write it.
    public var apnsID: String { APNsUUIDText.format(notification.apnsID) }
}

/// A token a service outside the send path (the legacy feedback service) reported dead.
public struct DeadTokenReport: Sendable, Hashable {
    /// The token (hex).
    public var token: String
    /// When it died, epoch milliseconds.
    public var since: Int64

    /// Creates a report.
    public init(token: String, since: Int64) {
        self.token = token
        self.since = since
    }
}

/// How APNs answered a notification, reduced to what the relay records.
public struct SendOutcome: Sendable, Equatable {
    public var status: DeliveryStatus
    public var httpStatus: Int?
    public var reason: String?
    public var attempts: Int
    /// For token-dead answers: when APNs says the token stopped being valid (epoch ms).
    public var tokenDeadSince: Int64?

    public init(status: DeliveryStatus, httpStatus: Int?, reason: String?, attempts: Int, tokenDeadSince: Int64? = nil) {
        self.status = status
        self.httpStatus = httpStatus
        self.reason = reason
        self.attempts = attempts
        self.tokenDeadSince = tokenDeadSince
    }
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

    /// Creates a reference to `message`.
    public init(source: RecordReference, key: [UInt8]?, size: Int, error: String) {
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
