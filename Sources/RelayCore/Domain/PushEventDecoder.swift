// Decoding `push.events` values with every contract rule.

public import APNsCore

/// Decodes and validates `push.events` values.
public struct PushEventDecoder: Sendable {
    /// The transport whose payload size limits apply.
    public var transport: APNsTransport

    /// A decoder that checks payload sizes for `transport` (HTTP/2 unless told otherwise).
    public init(transport: APNsTransport = .http2) {
        self.transport = transport
    }

    /// Decodes one record value. Unknown fields are ignored; a `null` optional field counts as
    /// absent; a field of the wrong type is an error. The payload size is checked with the
    /// badge already injected: the exact value for `set`, a provisional 0 for `increment` and
    /// `decrement` (the final count is re-checked by ``PushEvent/renderPayload(badge:transport:)``).
    ///
    /// The fields are read where they lie in `bytes` once the whole value passed the JSON grammar, and the
    /// payload template is written straight from them: no tree of values is built on the way.
    public func decode(_ bytes: some Collection<UInt8>) throws(EventRejection) -> PushEvent {
        try JSON.read(bytes) { checked -> Result<PushEvent, EventRejection> in
            switch checked {
            case .failure(let error):
                return .failure(EventRejection(field: "event", reason: "event is not valid JSON: \(error)"))
            case .success(let text):
                return Result { () throws(EventRejection) in try decode(text) }
            }
        }.get()
    }

    private func decode(_ text: JSONText) throws(EventRejection) -> PushEvent {
        guard text.kind(text.root) == .object else {
            throw EventRejection(field: "event", reason: "event must be a JSON object, got \(text.kind(text.root).typeName)")
        }
        // The last of each name, as most JSON readers take a duplicated key.
        var id, user, seq, tokens, badge, apns, liveActivity: Range<Int>?
        text.forEachMember(of: text.root) { key, value in
            if text.string(key, is: "id") { id = value }
            else if text.string(key, is: "user") { user = value }
            else if text.string(key, is: "seq") { seq = value }
            else if text.string(key, is: "tokens") { tokens = value }
            else if text.string(key, is: "badge") { badge = value }
            else if text.string(key, is: "apns") { apns = value }
            else if text.string(key, is: "live_activity") { liveActivity = value }
        }
        let fields = Fields(text: text)
        let eventID = try fields.id(id)
        let eventUser = try fields.user(user)
        let eventSeq = try fields.seq(seq)
        let eventTokens = try fields.tokens(tokens)
        let badgeOperation = try fields.badge(badge)
        let request = try fields.apns(fields.present(apns), transport: transport)
        let liveActivityTarget = try fields.liveActivity(fields.present(liveActivity))

        if badgeOperation == nil && request == nil {
            throw EventRejection(field: "event", reason: "event must have badge, apns or both")
        }
        if let request, request.apns.channelID != nil {
            if liveActivityTarget != nil {
                throw EventRejection(field: "live_activity", reason: "live_activity is not allowed with apns.channel_id (a broadcast names no tokens)")
            }
            try checkBroadcast(request.apns, user: eventUser, tokens: eventTokens, badge: badgeOperation)
        } else {
            if let liveActivityTarget {
                try checkLiveActivity(liveActivityTarget, request: request, user: eventUser, tokens: eventTokens)
            }
            if eventUser == nil {
                if badgeOperation != nil { throw EventRejection(field: "user", reason: "user is required when badge is present") }
                if eventTokens == nil && liveActivityTarget == nil {
                    throw EventRejection(field: "user", reason: "user is required when tokens is absent")
                }
            }
        }

        let template = request.map { PayloadTemplate(text, payload: $0.payload, badgeSlot: badgeOperation != nil) }
            ?? PayloadTemplate.badgeOnly
        let event = PushEvent(id: eventID, user: eventUser, seq: eventSeq, tokens: eventTokens, badge: badgeOperation,
                              apns: request?.apns, payloadTemplate: template, liveActivity: liveActivityTarget)
        let provisionalBadge: Int64? = badgeOperation.map { operation in
            if case .set(let value) = operation { return value }
            return 0
        }
        try BadgeInjection.checkSize(event.payloadTemplate.count(badge: provisionalBadge), pushType: event.pushType, transport: transport)
        return event
    }

    /// `live_activity` addresses registered Live Activity tokens: a `liveactivity` push, no `tokens` beside it; a
    /// push-to-start type is the user's (`user` required) and only starts (`aps.event` `start`), an activity's update
    /// tokens only update or end it.
    private func checkLiveActivity(_ target: LiveActivityTarget, request: (apns: APNsRequest, payload: Range<Int>)?, user: String?,
                                   tokens: [String]?) throws(EventRejection) {
        if tokens != nil { throw EventRejection(field: "tokens", reason: "tokens is not allowed with live_activity (its registered tokens are the targets)") }
        guard let request, request.apns.pushType == .liveactivity else {
            throw EventRejection(field: "apns.push_type", reason: "apns.push_type must be liveactivity with live_activity")
        }
        let isStart = request.apns.isLiveActivityStart
        switch target {
        case .pushToStart:
            if user == nil { throw EventRejection(field: "user", reason: "user is required with live_activity.push_to_start (whose tokens they are)") }
            if !isStart { throw EventRejection(field: "apns.payload.aps.event", reason: "apns.payload.aps.event must be start with live_activity.push_to_start") }
        case .activity:
            if isStart {
                throw EventRejection(field: "apns.payload.aps.event",
                                     reason: "apns.payload.aps.event start needs live_activity.push_to_start: an activity's tokens update or end it")
            }
        }
    }

    /// A broadcast (`apns.channel_id`) reaches whoever subscribed to the channel: it names no devices, no user,
    /// no badge; Apple takes `liveactivity` only, and has no collapse id for broadcasts. The legacy binary
    /// interface cannot send one.
    private func checkBroadcast(_ apns: APNsRequest, user: String?, tokens: [String]?, badge: BadgeOperation?) throws(EventRejection) {
        let rule = "an event with apns.channel_id is a broadcast to the channel's subscribers"
        if tokens != nil { throw EventRejection(field: "tokens", reason: "tokens is not allowed with apns.channel_id (\(rule))") }
        if user != nil { throw EventRejection(field: "user", reason: "user is not allowed with apns.channel_id (\(rule))") }
        if badge != nil { throw EventRejection(field: "badge", reason: "badge is not allowed with apns.channel_id (\(rule))") }
        if apns.pushType != .liveactivity {
            throw EventRejection(field: "apns.push_type", reason: "apns.push_type must be liveactivity with apns.channel_id, got \"\(apns.pushType.rawValue)\"")
        }
        if apns.collapseID != nil {
            throw EventRejection(field: "apns.collapse_id", reason: "apns.collapse_id is not allowed with apns.channel_id (broadcasts have no collapse id)")
        }
        if case .binary = transport {
            throw EventRejection(field: "apns.channel_id", reason: "apns.channel_id needs apns.transport http2 (the binary interface has no broadcasts)")
        }
    }
}

/// The fields of one event, read from its checked text.
private struct Fields {
    let text: JSONText

    /// `span`, unless it is `null` (which counts as absent).
    func present(_ span: Range<Int>?) -> Range<Int>? {
        guard let span, text.kind(span) != .null else { return nil }
        return span
    }

    func typeName(_ span: Range<Int>) -> String { text.kind(span).typeName }

    func id(_ span: Range<Int>?) throws(EventRejection) -> String {
        guard let value = present(span) else { throw EventRejection(field: "id", reason: "id is required") }
        guard text.kind(value) == .string else {
            throw EventRejection(field: "id", reason: "id must be a string, got \(typeName(value))")
        }
        let id = text.string(value)
        // Characters as JSON Schema's `maxLength` counts them (Unicode scalars), counted only when the bytes do not
        // settle it (a scalar is at least one byte).
        guard !id.isEmpty, id.utf8.count <= 128 || id.unicodeScalars.count <= 128 else {
            throw EventRejection(field: "id", reason: "id must be 1 to 128 characters, got \(id.unicodeScalars.count)")
        }
        return id
    }

    func user(_ span: Range<Int>?) throws(EventRejection) -> String? {
        try nonEmptyString(span, field: "user")
    }

    func seq(_ span: Range<Int>?) throws(EventRejection) -> Int64? {
        guard let value = present(span) else { return nil }
        guard let seq = text.integer(value), seq >= 1 else {
            throw EventRejection(field: "seq", reason: "seq must be an integer >= 1")
        }
        return seq
    }

    func tokens(_ span: Range<Int>?) throws(EventRejection) -> [String]? {
        guard let value = present(span) else { return nil }
        guard text.kind(value) == .array else {
            throw EventRejection(field: "tokens", reason: "tokens must be an array of strings, got \(typeName(value))")
        }
        var tokens: [String] = []
        try text.forEachElement(of: value) { (element) throws(EventRejection) in
            // The field's name is made only for an error: not a string per token.
            guard text.kind(element) == .string else {
                let field = "tokens[\(tokens.count)]"
                throw EventRejection(field: field, reason: "\(field) must be a string, got \(typeName(element))")
            }
            tokens.append(try DeviceToken.normalize(text.string(element), field: "tokens[\(tokens.count)]"))
        }
        guard !tokens.isEmpty else {
            throw EventRejection(field: "tokens", reason: "tokens must not be empty (omit it to use the user's devices)")
        }
        return Self.firstOfEach(tokens)
    }

    /// The tokens without repeats, each where it first appears: a token listed twice (in either case) is one
    /// device, sent once and given one result. A hand-over's marker names a record's finished devices by token,
    /// so two copies of one would also be two sends with one entry between them.
    static func firstOfEach(_ tokens: [String]) -> [String] {
        guard tokens.count > 1 else { return tokens }
        var seen = Set<String>(minimumCapacity: tokens.count)
        let unique = tokens.filter { seen.insert($0).inserted }
        return unique.count == tokens.count ? tokens : unique
    }

    /// `live_activity`: `{"push_to_start":"<ActivityAttributes type>"}` or `{"activity_id":"<id>"}`, exactly one (the
    /// last of a repeated name, as elsewhere).
    func liveActivity(_ span: Range<Int>?) throws(EventRejection) -> LiveActivityTarget? {
        guard let value = present(span) else { return nil }
        let rule = "live_activity must be {\"push_to_start\":\"<attributes type>\"} or {\"activity_id\":\"<id>\"}"
        guard text.kind(value) == .object else { throw EventRejection(field: "live_activity", reason: "\(rule), got \(typeName(value))") }
        var pushToStart, activityID: Range<Int>?
        var unknownKey = false
        text.forEachMember(of: value) { key, member in
            if text.string(key, is: "push_to_start") { pushToStart = member }
            else if text.string(key, is: "activity_id") { activityID = member }
            else { unknownKey = true }
        }
        if unknownKey { throw EventRejection(field: "live_activity", reason: "\(rule): unknown key") }
        func name(_ member: Range<Int>, _ key: String) throws(EventRejection) -> String {
            let string = text.kind(member) == .string ? text.string(member) : ""
            guard !string.isEmpty, string.utf8.count <= LiveActivityTarget.maxNameBytes else {
                throw EventRejection(field: "live_activity.\(key)",
                                     reason: "live_activity.\(key) must be a non-empty string of at most \(LiveActivityTarget.maxNameBytes) bytes")
            }
            return string
        }
        switch (pushToStart, activityID) {
        case (let type?, nil): return .pushToStart(attributesType: try name(type, "push_to_start"))
        case (nil, let id?): return .activity(id: try name(id, "activity_id"))
        default: throw EventRejection(field: "live_activity", reason: rule)
        }
    }

    func badge(_ span: Range<Int>?) throws(EventRejection) -> BadgeOperation? {
        guard let value = present(span) else { return nil }
        guard text.kind(value) == .object else {
            throw EventRejection(field: "badge", reason: "badge must be an object, got \(typeName(value))")
        }
        // Present even when null: naming two operations is the error, whatever their values.
        var set, increment, decrement: Range<Int>?
        text.forEachMember(of: value) { key, operand in
            if text.string(key, is: "set") { set = operand }
            else if text.string(key, is: "increment") { increment = operand }
            else if text.string(key, is: "decrement") { decrement = operand }
        }
        let named = (set == nil ? 0 : 1) + (increment == nil ? 0 : 1) + (decrement == nil ? 0 : 1)
        guard named == 1 else {
            throw EventRejection(field: "badge", reason: "badge must have exactly one of set, increment, decrement")
        }
        let kind = set != nil ? "set" : increment != nil ? "increment" : "decrement"
        guard let operand = set ?? increment ?? decrement, let amount = text.integer(operand), amount >= 0 else {
            throw EventRejection(field: "badge.\(kind)", reason: "badge.\(kind) must be an integer >= 0")
        }
        return set != nil ? .set(amount) : increment != nil ? .increment(amount) : .decrement(amount)
    }

    /// An optional string field that must not be empty when present; `field` is its dotted name.
    private func nonEmptyString(_ span: Range<Int>?, field: String) throws(EventRejection) -> String? {
        guard let raw = present(span) else { return nil }
        guard text.kind(raw) == .string else {
            throw EventRejection(field: field, reason: "\(field) must be a string, got \(typeName(raw))")
        }
        let value = text.string(raw)
        guard !value.isEmpty else { throw EventRejection(field: field, reason: "\(field) must not be empty") }
        return value
    }

    func apns(_ span: Range<Int>?, transport: APNsTransport) throws(EventRejection) -> (apns: APNsRequest, payload: Range<Int>)? {
        guard let value = span else { return nil }
        guard text.kind(value) == .object else {
            throw EventRejection(field: "apns", reason: "apns must be an object, got \(typeName(value))")
        }
        var topicSpan, pushTypeSpan, prioritySpan, expirationSpan, collapseIDSpan, channelIDSpan, environmentSpan, payloadSpan: Range<Int>?
        text.forEachMember(of: value) { key, member in
            if text.string(key, is: "topic") { topicSpan = member }
            else if text.string(key, is: "push_type") { pushTypeSpan = member }
            else if text.string(key, is: "priority") { prioritySpan = member }
            else if text.string(key, is: "expiration") { expirationSpan = member }
            else if text.string(key, is: "collapse_id") { collapseIDSpan = member }
            else if text.string(key, is: "channel_id") { channelIDSpan = member }
            else if text.string(key, is: "environment") { environmentSpan = member }
            else if text.string(key, is: "payload") { payloadSpan = member }
        }

        let topic = try nonEmptyString(topicSpan, field: "apns.topic")

        var pushType = APNsPushType.alert
        if let raw = present(pushTypeSpan) {
            guard text.kind(raw) == .string else {
                throw EventRejection(field: "apns.push_type", reason: "apns.push_type must be a string, got \(typeName(raw))")
            }
            let name = text.string(raw)
            guard let parsed = APNsPushType(rawValue: name) else {
                let allowed = APNsPushType.allCases.map(\.rawValue).joined(separator: ", ")
                throw EventRejection(field: "apns.push_type", reason: "apns.push_type must be one of \(allowed), got \"\(name)\"")
            }
            pushType = parsed
        }

        var priority: APNsPriority = pushType == .background ? .conservePower : .immediate
        if let raw = present(prioritySpan) {
            guard let parsed = text.integer(raw).flatMap({ APNsPriority(rawValue: Int($0)) }) else {
                throw EventRejection(field: "apns.priority", reason: "apns.priority must be 10, 5 or 1")
            }
            if parsed == .immediate && pushType == .background {
                throw EventRejection(field: "apns.priority", reason: "apns.priority 10 is not allowed for push_type background (use 5 or 1)")
            }
            priority = parsed
        }

        var expiration: Int64?
        if let raw = present(expirationSpan) {
            guard let parsed = text.integer(raw), parsed >= 0 else {
                throw EventRejection(field: "apns.expiration", reason: "apns.expiration must be an integer >= 0 (epoch seconds)")
            }
            expiration = parsed
        }

        let collapseID = try nonEmptyString(collapseIDSpan, field: "apns.collapse_id")
        if let collapseID {
            guard collapseID.utf8.count <= 64 else {
                throw EventRejection(field: "apns.collapse_id", reason: "apns.collapse_id is \(collapseID.utf8.count) bytes, the limit is 64")
            }
            guard APNsNotification.isValidHeaderValue(collapseID) else {
                throw EventRejection(
                    field: "apns.collapse_id", reason: "apns.collapse_id must not contain control characters or start or end with a space or tab")
            }
        }

        var channelID: APNsChannelID?
        if let raw = present(channelIDSpan) {
            guard text.kind(raw) == .string else {
                throw EventRejection(field: "apns.channel_id", reason: "apns.channel_id must be a string, got \(typeName(raw))")
            }
            do {
                channelID = try APNsChannelID(text.string(raw))
            } catch {
                throw EventRejection(field: "apns.channel_id", reason: "apns.channel_id must be a channel id as APNs issues it (base64): \(error.description)")
            }
        }

        var environment: APNsEnvironment?
        if let raw = present(environmentSpan) {
            guard text.kind(raw) == .string, let parsed = APNsEnvironment(rawValue: text.string(raw)) else {
                throw EventRejection(field: "apns.environment", reason: "apns.environment must be \"production\" or \"sandbox\"")
            }
            environment = parsed
        }

        guard let payload = present(payloadSpan) else {
            throw EventRejection(field: "apns.payload", reason: "apns.payload is required when apns is present")
        }
        guard text.kind(payload) == .object else {
            throw EventRejection(field: "apns.payload", reason: "apns.payload must be an object, got \(typeName(payload))")
        }
        var apsSpan: Range<Int>?
        text.forEachMember(of: payload) { key, member in
            if text.string(key, is: "aps") { apsSpan = member }
        }
        guard let aps = apsSpan else {
            throw EventRejection(field: "apns.payload.aps", reason: "apns.payload.aps is required")
        }
        guard text.kind(aps) == .object else {
            throw EventRejection(field: "apns.payload.aps", reason: "apns.payload.aps must be an object, got \(typeName(aps))")
        }
        // Starts are rare: their `aps` is read as a tree.
        let isStart = pushType == .liveactivity ? try LiveActivityStart.check(text.value(aps), broadcast: channelID != nil) : false

        var request = APNsRequest(topic: topic, pushType: pushType, priority: priority, expiration: expiration,
                                  collapseID: collapseID, environment: environment, channelID: channelID)
        request.isLiveActivityStart = isStart
        return (request, payload)
    }
}

/// Device tokens as the contract writes them: APNs' rules (``APNsDeviceToken``), stored lower-case.
public enum DeviceToken {
    /// Returns the token lower-cased, or throws naming `field` when it breaks a rule (`field` is made only then).
    public static func normalize(_ token: String, field makeField: @autoclosure () -> String = "token") throws(EventRejection) -> String {
        do {
            return try APNsDeviceToken(hex: token).hex
        } catch {
            let field = makeField()
            let count = token.utf8.count
            switch error.problem {
            case .notHex:
                throw EventRejection(field: field, reason: "\(field) must contain only hex characters (0-9, a-f)")
            case .oddLength:
                throw EventRejection(field: field, reason: "\(field) must have an even number of hex characters, got \(count)")
            default:
                throw EventRejection(field: field, reason: "\(field) must be 64 to 200 hex characters, got \(count)")
            }
        }
    }
}

extension EventRejection {
    /// A rule of Apple's broken by a rendered notification, named by the event field it comes from.
    init(_ error: APNsValidationError) {
        let field = switch error.field {
        case .deviceToken: "token"
        case .channelID: "apns.channel_id"
        case .topic: "apns.topic"
        case .pushType: "apns.push_type"
        case .priority: "apns.priority"
        case .expiration: "apns.expiration"
        case .collapseID: "apns.collapse_id"
        case .apnsID: "apns-id"
        case .payload: "apns.payload"
        }
        self.init(field: field, reason: error.description)
    }
}

/// A remote start of a Live Activity (`push_type` `liveactivity` with `aps.event` `start`, iOS 17.2+), checked for
/// what the device needs to show it: a start it cannot show is dropped on the device without a word to anyone, so
/// the relay makes it a dead letter naming the key instead. Updates and ends are not checked.
enum LiveActivityStart {
    /// Throws naming the first missing or malformed key of a start in `aps`; anything but a start passes. Returns
    /// whether it is a start.
    @discardableResult
    static func check(_ aps: JSONValue, broadcast: Bool) throws(EventRejection) -> Bool {
        guard case .string("start") = aps["event"] else { return false }
        func reject(_ key: String, _ rule: String) -> EventRejection {
            EventRejection(field: "apns.payload.aps.\(key)", reason: "apns.payload.aps.\(key) \(rule)")
        }
        if broadcast {
            throw reject("event", "start needs a push-to-start token in tokens: a broadcast updates or ends the Live Activities on its channel")
        }
        guard case .string(let type)? = aps["attributes-type"], !type.isEmpty else {
            throw reject("attributes-type", "is required to start a Live Activity (the name of its ActivityAttributes type)")
        }
        guard case .object? = aps["attributes"] else {
            throw reject("attributes", "is required to start a Live Activity (an object: its ActivityAttributes)")
        }
        guard case .object? = aps["content-state"] else {
            throw reject("content-state", "is required to start a Live Activity (an object: its initial ContentState)")
        }
        // iOS 18: the started activity's own push token is sent to the app (`input-push-token: 1`), or the activity
        // subscribes to a broadcast channel (`input-push-channel`: a channel id as APNs issues it).
        if let value = aps["input-push-token"], value.integerValue != 1 {
            throw reject("input-push-token", "must be 1 (asks for the started activity's push token)")
        }
        if let value = aps["input-push-channel"] {
            guard case .string(let channel) = value, (try? APNsChannelID(channel)) != nil else {
                throw reject("input-push-channel", "must be a channel id as APNs issues it (base64)")
            }
        }
        return true
    }
}
