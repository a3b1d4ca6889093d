public import APNsCore

/// A notification between the dispatcher and APNs, with what its result record needs.
///
/// A class, immutable: it travels through the dispatcher, the effects, a send lane, the sender and
/// back as an input, and a copy of a struct this wide costs a retain and a release per field
/// at every step.
public final class PendingNotification: Sendable {
    public let record: RecordReference
    public let eventID: String
    public let user: String?
    public let seq: Int64?
    public let badge: Int64?
    /// The device token, lower-case hex, as records write it.
    public let token: String
    /// What is sent, validated when the event was fanned out.
    public let notification: APNsNotification
    /// The APNs environment (host) it goes to.
    public let environment: APNsEnvironment
    /// When the event was consumed (epoch ms), for the event→answer latency.
    public let consumedAt: Int64
    /// The event's seq had been skipped before it arrived (its result says so).
    public let late: Bool
    /// The fan-out lane (its user's) the notification is counted in while in the window (``FanOutScheduler``), if any.
    package let fanOutLane: Int32?
    /// The event's trace context, for the records this notification causes.
    public let trace: TraceHeaders

    /// Creates a notification on its way to APNs.
    public convenience init(record: RecordReference, eventID: String, user: String?, seq: Int64?, badge: Int64?, token: String,
                notification: APNsNotification, environment: APNsEnvironment, consumedAt: Int64, late: Bool = false) {
        self.init(record: record, eventID: eventID, user: user, seq: seq, badge: badge, token: token, notification: notification,
                  environment: environment, consumedAt: consumedAt, late: late, fanOutLane: nil, trace: .none)
    }

    /// Creates a notification on its way to APNs, counted in fan-out lane `fanOutLane`.
    package init(record: RecordReference, eventID: String, user: String?, seq: Int64?, badge: Int64?, token: String,
                 notification: APNsNotification, environment: APNsEnvironment, consumedAt: Int64, late: Bool, fanOutLane: Int32?,
                 trace: TraceHeaders) {
        self.fanOutLane = fanOutLane
        self.trace = trace
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
