// user → devices, from the compacted `push.devices` topic.

public import APNs

/// One device registration (a `push.devices` record).
public struct DeviceRegistration: Sendable, Equatable, Hashable {
    /// The token, lower-case hex (the record's key).
    public var token: String
    /// The user the device belongs to.
    public var user: String
    /// The app's bundle id (`apns-topic`).
    public var topic: String
    /// Which APNs environment the token belongs to.
    public var environment: APNsEnvironment
    /// When the device registered, epoch milliseconds.
    public var registeredAt: Int64

    /// Creates a registration.
    public init(token: String, user: String, topic: String, environment: APNsEnvironment, registeredAt: Int64) {
        self.token = token
        self.user = user
        self.topic = topic
        self.environment = environment
        self.registeredAt = registeredAt
    }

    /// Decodes a `push.devices` value for `token` (the key, normalised to lower case):
    /// `{"user":"u-42","topic":"com.example.app","environment":"production","registered_at":1795000000000}`.
    public static func decode(token: String, value: some Collection<UInt8>) throws(EventRejection) -> DeviceRegistration {
        let normalizedToken = try DeviceToken.normalize(token, field: "key")
        let root: JSONValue
        do {
            root = try JSON.parse(value)
        } catch {
            throw EventRejection(field: "device", reason: "device registration is not valid JSON: \(error)")
        }
        guard case .object = root else {
            throw EventRejection(field: "device", reason: "device registration must be a JSON object, got \(root.typeName)")
        }
        guard case .string(let user)? = root["user"], !user.isEmpty else {
            throw EventRejection(field: "user", reason: "user must be a non-empty string")
        }
        guard case .string(let topic)? = root["topic"], !topic.isEmpty else {
            throw EventRejection(field: "topic", reason: "topic must be a non-empty string")
        }
        guard case .string(let environmentName)? = root["environment"],
              let environment = APNsEnvironment(rawValue: environmentName) else {
            throw EventRejection(field: "environment", reason: "environment must be \"production\" or \"sandbox\"")
        }
        guard let registeredAt = root["registered_at"]?.integerValue, registeredAt >= 0 else {
            throw EventRejection(field: "registered_at", reason: "registered_at must be an integer >= 0 (epoch milliseconds)")
        }
        return DeviceRegistration(token: normalizedToken, user: user, topic: topic, environment: environment, registeredAt: registeredAt)
    }
}

/// The registered devices, by token and by user.
public struct DeviceRegistry: Sendable, Equatable {
    private var byToken: [String: DeviceRegistration] = [:]
    /// Users compare as bytes (``UserKey``), as their Kafka keys do.
    private var tokensByUser: [UserKey: Set<String>] = [:]

    /// An empty registry.
    public init() {}

    /// Registered tokens.
    public var count: Int { byToken.count }

    /// Applies one `push.devices` record: a value registers (or moves) the token, `nil` removes it.
    /// Returns the rejection for an unreadable record (the registry is then unchanged).
    @discardableResult
    public mutating func apply(key token: String, value: [UInt8]?) -> EventRejection? {
        guard let value else {
            remove(token: token.lowercased())
            return nil
        }
        do {
            register(try DeviceRegistration.decode(token: token, value: value))
            return nil
        } catch {
            return error
        }
    }

    /// Registers a device, replacing the token's previous registration (possibly another user's).
    public mutating func register(_ registration: DeviceRegistration) {
        remove(token: registration.token)
        byToken[registration.token] = registration
        tokensByUser[UserKey(registration.user), default: []].insert(registration.token)
    }

    /// Removes a token's registration; returns it if there was one.
    @discardableResult
    public mutating func remove(token: String) -> DeviceRegistration? {
        guard let old = byToken.removeValue(forKey: token) else { return nil }
        let user = UserKey(old.user)
        tokensByUser[user]?.remove(token)
        if tokensByUser[user]?.isEmpty == true { tokensByUser[user] = nil }
        return old
    }

    /// The registration of `token`, if any.
    public func registration(for token: String) -> DeviceRegistration? { byToken[token.lowercased()] }

    /// The user's devices, ordered by token so fan-out is deterministic.
    public func devices(of user: String) -> [DeviceRegistration] {
        guard let tokens = tokensByUser[UserKey(user)] else { return [] }
        return tokens.sorted().compactMap { byToken[$0] }
    }

    /// APNs reported `token` dead at `since` (epoch ms). The registration is removed only if it was
    /// made before `since`: a device that registered again at or after that moment keeps its
    /// registration (its token is valid again). Returns the removed registration, if any.
    @discardableResult
    public mutating func reportDead(token: String, since: Int64) -> DeviceRegistration? {
        let key = token.lowercased()
        guard let registration = byToken[key], registration.registeredAt < since else { return nil }
        return remove(token: key)
    }
}
