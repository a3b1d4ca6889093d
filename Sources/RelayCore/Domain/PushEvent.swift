// The `push.events` record: its model (decoded by `PushEventDecoder`, rendered into
// `APNsNotification`s by `PushEvent+Rendering`).

public import APNsCore

/// Why an event (or another input record) was refused: a sentence for a person that names
/// the field, e.g. `badge.increment must be an integer >= 0`.
public struct EventRejection: Error, Sendable, Equatable, CustomStringConvertible {
    /// The dotted path of the offending field (`apns.payload`, `tokens[2]`), or `event`.
    public let field: String
    /// The full sentence, starting with the field's name.
    public let reason: String

    /// Creates a rejection for `field` with the full `reason` sentence.
    public init(field: String, reason: String) {
        self.field = field
        self.reason = reason
    }

    /// The reason sentence.
    public var description: String { reason }
}

/// How an event changes its user's badge count. The count never goes below 0.
public enum BadgeOperation: Sendable, Equatable, Hashable {
    /// `{"set": N}`: the count becomes N.
    case set(Int64)
    /// `{"increment": N}`: the count grows by N.
    case increment(Int64)
    /// `{"decrement": N}`: the count shrinks by N, not below 0.
    case decrement(Int64)

    /// The count after applying the operation to `count`; saturates at 0 and `Int64.max`.
    public func applied(to count: Int64) -> Int64 {
        switch self {
        case .set(let value):
            return max(0, value)
        case .increment(let amount):
            let (sum, overflow) = count.addingReportingOverflow(amount)
            return overflow ? Int64.max : max(0, sum)
        case .decrement(let amount):
            let (difference, overflow) = count.subtractingReportingOverflow(amount)
            return overflow ? 0 : max(0, difference)
        }
    }
}

extension APNsTransport {
    /// The words used in a size error: "push_type alert" or "the binary transport (format 0)".
    func limitSubject(for pushType: APNsPushType) -> String {
        switch self {
        case .http2: "push_type \(pushType.rawValue)"
        case .binary(let format): "the binary transport (format \(format.rawValue))"
        }
    }
}

/// The `apns` part of an event: how APNs should deliver it. Values are already validated.
public struct APNsRequest: Sendable, Equatable {
    /// `apns-topic` (bundle id); `nil` means the relay's configured default topic.
    public var topic: String?
    /// `apns-push-type`; `alert` when the event did not say.
    public var pushType: APNsPushType
    /// `apns-priority` (10, 5 or 1). When the event did not say: 10, or 5 for `background`
    /// (Apple refuses 10 for background pushes).
    public var priority: APNsPriority
    /// `apns-expiration` in epoch seconds, if the event set one.
    public var expiration: Int64?
    /// The event's own `apns-collapse-id`, if it set one (at most 64 bytes).
    public var collapseID: String?
    /// `apns.environment`: where the event's explicit `tokens` live; `nil` means the configured default. A
    /// registered device always goes to its registration's environment (the device knows best).
    public var environment: APNsEnvironment? = nil
    /// `apns.channel_id`: the event is a broadcast to this channel's subscribers (iOS 18 Live Activities).
    public var channelID: APNsChannelID? = nil
    /// A `liveactivity` push whose `aps.event` is `start` (a remote start, for push-to-start tokens).
    public var isLiveActivityStart = false
}

/// Who an event goes to.
public enum PushTargets: Sendable, Equatable {
    /// Exactly these device tokens (lower-case hex).
    case tokens([String])
    /// Every device registered for the user.
    case registeredDevices(user: String)
    /// Every device subscribed to a broadcast channel: one request, one result.
    case channel(APNsChannelID)
    /// Live Activity tokens of `push.devices`: the user's push-to-start tokens of an attributes type, or an
    /// activity's update tokens (`live_activity`).
    case liveActivity(LiveActivityTarget, user: String?)
}

/// A valid `push.events` record.
public struct PushEvent: Sendable, Equatable {
    /// The idempotency key, 1...128 characters.
    public let id: String
    /// The user, required when a badge is present or tokens are absent.
    public let user: String?
    /// The user's sequence number (>= 1), if the producer numbered the event.
    public let seq: Int64?
    /// Explicit device tokens, lower-cased; `nil` means the user's registered devices.
    public let tokens: [String]?
    /// The badge change, if any.
    public let badge: BadgeOperation?
    /// Delivery details; `nil` for a badge-only event.
    public let apns: APNsRequest?
    /// The payload sent, serialized once: with a slot for the user's count when the event changes
    /// the badge (``renderPayload(badge:transport:)`` fills it per notification).
    public let payloadTemplate: PayloadTemplate
    /// `live_activity`: the registered Live Activity tokens it goes to, in place of `tokens` or the user's devices.
    public let liveActivity: LiveActivityTarget?
    /// The W3C trace context of the record it came in (its headers, not its value), for the records it causes.
    public package(set) var trace: TraceHeaders = .none

    /// An event of these validated parts (``PushEventDecoder`` checks them).
    init(id: String, user: String?, seq: Int64?, tokens: [String]?, badge: BadgeOperation?, apns: APNsRequest?, payloadTemplate: PayloadTemplate,
         liveActivity: LiveActivityTarget? = nil) {
        self.liveActivity = liveActivity
        self.id = id
        self.user = user
        self.seq = seq
        self.tokens = tokens
        self.badge = badge
        self.apns = apns
        self.payloadTemplate = payloadTemplate
    }

    /// The payload object as the event gave it (it has an `aps` object), or `{"aps":{}}` for a badge-only event.
    public var payload: JSONValue { payloadTemplate.value }

    /// Where the event is delivered.
    public var targets: PushTargets {
        if let channelID = apns?.channelID { return .channel(channelID) }
        if let liveActivity { return .liveActivity(liveActivity, user: user) }
        if let tokens { return .tokens(tokens) }
        return .registeredDevices(user: user ?? "")
    }

    /// True when the event only updates the badge (no `apns` part): such notifications may
    /// be superseded by a newer badge for the same device.
    public var isBadgeOnly: Bool { apns == nil }

    /// The push type sent: the event's, or `alert` for a badge-only event.
    public var pushType: APNsPushType { apns?.pushType ?? .alert }

    /// The priority sent: the event's, or 5 for a badge-only event.
    public var priority: APNsPriority { apns?.priority ?? .conservePower }

    /// Urgent for priority 10 (Apple delivers it at once, so the user may be waiting for it), else bulk: its
    /// notifications never wait behind bulk ones in the relay (``FanOutScheduler``, ``SendWindow``).
    package var deliveryClass: DeliveryClass { priority == .immediate ? .urgent : .bulk }
}

extension PushEvent {
    /// The update to offer to the user's ``BadgeSequencer``, or `nil` for an event without a user
    /// (explicit tokens only: nothing to order or count). Every event of a user goes through the
    /// sequencer, with or without a badge, so all of them are ordered and deduplicated by seq.
    /// `position` is the record's offset: it tells a redelivery from a new record.
    /// `forwardedFrom` is where it was read before it was forwarded here, its user's home.
    package func ledgerUpdate<Tag: Sendable>(tag: Tag, position: Int64? = nil, forwardedFrom: ForwardSource? = nil) -> BadgeUpdate<Tag>? {
        guard let user else { return nil }
        return BadgeUpdate(user: user, seq: seq, operation: badge, position: position, forwardedFrom: forwardedFrom, tag: tag)
    }
}
