public import APNs

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
