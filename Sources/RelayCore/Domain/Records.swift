// Output records (`push.results`, `push.failed-tokens`) as bytes, for the service to publish.

public import APNsCore

/// The `status` of a `push.results` record.
public enum DeliveryStatus: String, Sendable, Equatable, CaseIterable {
    /// APNs accepted the notification.
    case delivered
    /// A permanent APNs error.
    case rejected
    /// 410 from APNs or listed by the feedback service.
    case unregistered
    /// The notification expired before delivery.
    case expired
    /// Gave up after `relay.max_attempts` sends.
    case failed
    /// A queued badge-only update replaced by a newer one for the same device.
    case superseded
    /// The event's seq was already applied for its user.
    case duplicate
    /// The event broke a rule of the contract.
    case invalid
    /// The user has no registered device.
    case noDevices = "no_devices"
}

/// One `push.results` value (key = event id). Absent facts are written as `null`.
public struct ResultRecord: Sendable, Equatable {
    /// `event_id`: the event's id (also the record key).
    public var eventID: String
    /// `user`, when the event had one.
    public var user: String?
    /// `token`, `nil` for results about the whole event (`invalid`, `no_devices`, `duplicate`).
    public var token: String?
    /// `seq`, when the event had one.
    public var seq: Int64?
    /// `badge`: the user's count sent with (or computed for) this event.
    public var badge: Int64?
    /// `status`.
    public var status: DeliveryStatus
    /// `apns_id` of the notification, when one was built.
    public var apnsID: String?
    /// `http_status` of APNs' last answer, if any.
    public var httpStatus: Int?
    /// `reason`: APNs' reason or the relay's, for a person.
    public var reason: String?
    /// `attempts`: sends made (0 when nothing was sent).
    public var attempts: Int
    /// `latency_ms` from consume to result, if measured.
    public var latencyMs: Int64?
    /// When the result was decided, epoch milliseconds.
    public var at: Int64
    /// `late`: the event's seq had been skipped (its gap's reorder window ran out) before it
    /// arrived; it was applied at arrival. Written only when true.
    public var late: Bool
    /// `environment`: the APNs environment whose answer this is, when it is not the one the notification was sent
    /// to (refused there with `BadDeviceToken`, it was tried in this one). Written only when set.
    public var environment: APNsEnvironment?
    /// `apns_unique_id`: APNs' `apns-unique-id` (its development environment's delivery-log id). Written only when set.
    public var apnsUniqueID: String?
    /// `unregistered_since`: APNs' 410 `timestamp` (epoch milliseconds), the moment it says the token stopped being
    /// valid. Written only when APNs gave one.
    public var unregisteredSince: Int64?
    /// `registered_again`: the token's `push.devices` registration is newer than ``unregisteredSince``: the app
    /// registered the token again, so it is alive (kept, and not published as a failed token). Written only when true.
    public var registeredAgain: Bool
    /// The event's trace context, published as the record's headers (not in its value).
    public var trace: TraceHeaders

    /// Creates a result; every field of the contract's record, `nil` where it does not apply.
    public init(eventID: String, user: String?, token: String?, seq: Int64?, badge: Int64?, status: DeliveryStatus,
                apnsID: String?, httpStatus: Int?, reason: String?, attempts: Int, latencyMs: Int64?, at: Int64, late: Bool = false,
                environment: APNsEnvironment? = nil, apnsUniqueID: String? = nil, unregisteredSince: Int64? = nil,
                registeredAgain: Bool = false, trace: TraceHeaders = .none) {
        self.eventID = eventID
        self.user = user
        self.token = token
        self.seq = seq
        self.badge = badge
        self.status = status
        self.apnsID = apnsID
        self.httpStatus = httpStatus
        self.reason = reason
        self.attempts = attempts
        self.latencyMs = latencyMs
        self.at = at
        self.late = late
        self.environment = environment
        self.apnsUniqueID = apnsUniqueID
        self.unregisteredSince = unregisteredSince
        self.registeredAgain = registeredAgain
        self.trace = trace
    }

    /// The compact JSON value, keys in the contract's order; the optional keys after them, each only when set (a
    /// consumer of the contract's first shape reads the same keys, in the same order, as before).
    public func encoded() -> [UInt8] {
        var writer = JSONObjectWriter()
        writer.string("event_id", eventID)
        writer.string("user", user)
        writer.string("token", token)
        writer.integer("seq", seq)
        writer.integer("badge", badge)
        writer.string("status", status.rawValue)
        writer.string("apns_id", apnsID)
        writer.integer("http_status", httpStatus.map(Int64.init))
        writer.string("reason", reason)
        writer.integer("attempts", Int64(attempts))
        writer.integer("latency_ms", latencyMs)
        writer.integer("at", at)
        if late { writer.boolean("late", true) }
        if let environment { writer.string("environment", environment.rawValue) }
        if let apnsUniqueID { writer.string("apns_unique_id", apnsUniqueID) }
        if let unregisteredSince { writer.integer("unregistered_since", unregisteredSince) }
        if registeredAgain { writer.boolean("registered_again", true) }
        return writer.finish()
    }
}

/// One `push.wrong-environment` value (key = token): APNs refused the token with `BadDeviceToken` in the environment
/// it was sent to (its registration's, or the event's) and delivered it in the other. The token is alive; what
/// named its environment is wrong. Addressed to whoever owns that: the device registry (`source` `registration`:
/// correct the registration's `environment` in `push.devices`) or the event's producer (`source` `event`).
public struct WrongEnvironmentRecord: Sendable, Equatable {
    /// Who named the wrong environment.
    public enum Source: String, Sendable {
        /// The token's `push.devices` registration.
        case registration
        /// The event that listed the token in `tokens` (its `apns.environment`, or the configured default).
        case event
    }

    /// `token` (also the record key).
    public var token: String
    /// `user` the token is registered to (or the event's user), if known.
    public var user: String?
    /// `topic` it was sent with.
    public var topic: String?
    /// `environment`: where APNs delivered it, the environment the token belongs to.
    public var environment: APNsEnvironment
    /// `wrong_environment`: where it was sent first and refused.
    public var wrongEnvironment: APNsEnvironment
    /// `source`: who named ``wrongEnvironment``.
    public var source: Source
    /// `event_id`: the event whose delivery showed it.
    public var eventID: String
    /// `at`: when, epoch milliseconds.
    public var at: Int64
    /// The event's trace context, published as the record's headers (not in its value).
    public var trace: TraceHeaders

    /// Creates a record.
    public init(token: String, user: String?, topic: String?, environment: APNsEnvironment, wrongEnvironment: APNsEnvironment,
                source: Source, eventID: String, at: Int64, trace: TraceHeaders = .none) {
        self.token = token
        self.user = user
        self.topic = topic
        self.environment = environment
        self.wrongEnvironment = wrongEnvironment
        self.source = source
        self.eventID = eventID
        self.at = at
        self.trace = trace
    }

    /// The compact JSON value: `{"token","user","topic","environment","wrong_environment","source","event_id","at"}`.
    public func encoded() -> [UInt8] {
        var writer = JSONObjectWriter()
        writer.string("token", token)
        writer.string("user", user)
        writer.string("topic", topic)
        writer.string("environment", environment.rawValue)
        writer.string("wrong_environment", wrongEnvironment.rawValue)
        writer.string("source", source.rawValue)
        writer.string("event_id", eventID)
        writer.integer("at", at)
        return writer.finish()
    }
}

/// One `push.failed-tokens` value (key = token).
public struct FailedTokenRecord: Sendable, Equatable {
    /// `token`: the dead token (also the record key).
    public var token: String
    /// `user` it was registered to, if known.
    public var user: String?
    /// `topic` it was registered for, if known.
    public var topic: String?
    /// `environment` it was registered in, if known.
    public var environment: APNsEnvironment?
    /// APNs' own reason (`Unregistered`, `BadDeviceToken`…) or `Feedback`.
    public var reason: String
    /// Epoch milliseconds: APNs' 410 timestamp or the feedback tuple's time.
    public var since: Int64
    /// The event whose delivery revealed it; `nil` for feedback.
    public var eventID: String?
    /// The trace context of that event, published as the record's headers (not in its value); none for feedback.
    public var trace: TraceHeaders

    /// Creates a failed-token record.
    public init(token: String, user: String?, topic: String?, environment: APNsEnvironment?, reason: String,
                since: Int64, eventID: String?, trace: TraceHeaders = .none) {
        self.trace = trace
        self.token = token
        self.user = user
        self.topic = topic
        self.environment = environment
        self.reason = reason
        self.since = since
        self.eventID = eventID
    }

    /// The compact JSON value, keys in the contract's order.
    public func encoded() -> [UInt8] {
        var writer = JSONObjectWriter()
        writer.string("token", token)
        writer.string("user", user)
        writer.string("topic", topic)
        writer.string("environment", environment?.rawValue)
        writer.string("reason", reason)
        writer.integer("since", since)
        writer.string("event_id", eventID)
        return writer.finish()
    }
}

extension ResultRecord {
    /// A result about the whole event rather than one device (`invalid`, `duplicate`,
    /// `no_devices`): no token, no `apns_id`, no HTTP status, 0 attempts.
    public static func forEvent(id eventID: String, user: String?, seq: Int64?, badge: Int64?, status: DeliveryStatus,
                                reason: String?, latencyMs: Int64? = nil, at: Int64, trace: TraceHeaders = .none) -> ResultRecord {
        ResultRecord(eventID: eventID, user: user, token: nil, seq: seq, badge: badge, status: status, apnsID: nil,
                     httpStatus: nil, reason: reason, attempts: 0, latencyMs: latencyMs, at: at, trace: trace)
    }
}

extension FailedTokenRecord {
    /// The record for a registered device that APNs (or the feedback service) reported dead.
    public init(registration: DeviceRegistration, reason: String, since: Int64, eventID: String?, trace: TraceHeaders = .none) {
        self.init(token: registration.token, user: registration.user, topic: registration.topic,
                  environment: registration.environment, reason: reason, since: since, eventID: eventID, trace: trace)
    }
}

extension String {
    /// At most `limit` UTF-8 bytes: cut at a character boundary and marked with `…` when longer
    /// (an error that echoes a 150,000-character value must not make its record unpublishable).
    public func bounded(toUTF8Bytes limit: Int = 1_024) -> String {
        guard utf8.count > limit else { return self }
        var end = index(startIndex, offsetBy: 0)
        var bytes = 0
        for character in self {
            let size = character.utf8.count
            if bytes + size > limit - 3 { break }
            bytes += size
            end = index(after: end)
        }
        return String(self[..<end]) + "…"
    }
}
