// Live Activity tokens the relay keeps: push-to-start tokens per (user, attributes type), update tokens per activity.

/// What a Live Activity token of `push.devices` is for, and what an event addresses with `live_activity`.
public enum LiveActivityTarget: Sendable, Hashable {
    /// A push-to-start token (`Activity<Attributes>.pushToStartToken`): starts an activity of this `ActivityAttributes`
    /// type on the user's device (`push_to_start`).
    case pushToStart(attributesType: String)
    /// An activity's update token (`Activity.pushToken`): updates or ends that activity (`activity_id`).
    case activity(id: String)

    /// The longest attributes type or activity id accepted: names, not payloads.
    static let maxNameBytes = 256
}

/// The Live Activity tokens of `push.devices`: each a registration (user, topic, environment, `registered_at`) with
/// its ``LiveActivityTarget``. Far fewer than devices (one per activity type and device, one per running activity),
/// so plain dictionaries hold them; ``DeviceRegistry`` keeps them beside the devices, and a token is one registration
/// of either kind.
struct LiveActivityRegistry: Sendable, Equatable {
    private var byToken: [String: DeviceRegistration] = [:]
    /// (user, attributes type) and activity id → their tokens.
    private var byTarget: [TargetKey: Set<String>] = [:]

    private enum TargetKey: Hashable {
        case pushToStart(user: String, attributesType: String)
        case activity(id: String)
    }

    var count: Int { byToken.count }

    private static func key(of registration: DeviceRegistration) -> TargetKey? {
        switch registration.liveActivity {
        case .pushToStart(let type)?: .pushToStart(user: registration.user, attributesType: type)
        case .activity(let id)?: .activity(id: id)
        case nil: nil
        }
    }

    /// Registers a Live Activity token (its registration has a ``DeviceRegistration/liveActivity``), replacing the
    /// token's previous one.
    mutating func register(_ registration: DeviceRegistration) {
        remove(token: registration.token)
        guard let key = Self.key(of: registration) else { return }
        byToken[registration.token] = registration
        byTarget[key, default: []].insert(registration.token)
    }

    @discardableResult
    mutating func remove(token: String) -> DeviceRegistration? {
        guard let registration = byToken.removeValue(forKey: token) else { return nil }
        if let key = Self.key(of: registration) {
            byTarget[key]?.remove(token)
            if byTarget[key]?.isEmpty == true { byTarget[key] = nil }
        }
        return registration
    }

    func registration(for token: String) -> DeviceRegistration? { byToken[token] }

    /// The tokens of `target` (for a push-to-start type, the user's), ordered by token so fan-out is deterministic.
    func registrations(of target: LiveActivityTarget, user: String?) -> [DeviceRegistration] {
        let key: TargetKey
        switch target {
        case .pushToStart(let type):
            guard let user else { return [] }
            key = .pushToStart(user: user, attributesType: type)
        case .activity(let id):
            key = .activity(id: id)
        }
        return (byTarget[key] ?? []).sorted().compactMap { byToken[$0] }
    }
}
