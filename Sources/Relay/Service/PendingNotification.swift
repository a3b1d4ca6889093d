public import APNsCore

/// A notification between the dispatcher and APNs, with what its result record needs.
///
/// A class, immutable: it travels through the dispatcher, the effects, a send lane, the sender and
/// back as an input, and a copy of a struct this wide costs a retain and a release per field
/// at every step (it showed in the relay's profile).
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
    /// The send was abandoned before APNs answered (cancelled at a hand-over, or refused by the
    /// sender once the relay's ownership lease lapsed): not an outcome for the device, so no result.
    public var isAbandoned = false
    /// APNs' `apns-unique-id` (its development environment's delivery-log id), when the answer had one.
    public var apnsUniqueID: String?
    /// The environment whose answer this is, when it is not the notification's own: refused there with
    /// `BadDeviceToken`, the notification was tried in this one.
    public var environment: APNsEnvironment?

    public init(status: DeliveryStatus, httpStatus: Int?, reason: String?, attempts: Int, tokenDeadSince: Int64? = nil,
                apnsUniqueID: String? = nil, environment: APNsEnvironment? = nil) {
        self.status = status
        self.httpStatus = httpStatus
        self.reason = reason
        self.attempts = attempts
        self.tokenDeadSince = tokenDeadSince
        self.apnsUniqueID = apnsUniqueID
        self.environment = environment
    }

    /// Delivered in the other environment than the one the notification was sent to: its token was registered
    /// (or given) in the wrong one.
    public var isDeliveredInOtherEnvironment: Bool { status == .delivered && environment != nil }
}

extension SendOutcome {
    /// A send abandoned before it finished (its partition was handed over, or the ownership lease
    /// lapsed; APNs did not fail it): no result is published for it. Its record stays unfinished:
    /// sent again by this relay once its lease is confirmed, or by the partition's next owner.
    public static func abandoned(attempts: Int = 0) -> SendOutcome {
        var outcome = SendOutcome(status: .failed, httpStatus: nil, reason: "cancelled", attempts: attempts)
        outcome.isAbandoned = true
        return outcome
    }
}
