// user → devices (and Live Activity tokens), from the compacted `push.devices` topic.

public import APNsCore

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
    /// For a Live Activity token (`push_to_start` or `activity_id`), what it is for; `nil` for a device token.
    public var liveActivity: LiveActivityTarget?

    /// Creates a registration.
    public init(token: String, user: String, topic: String, environment: APNsEnvironment, registeredAt: Int64,
                liveActivity: LiveActivityTarget? = nil) {
        self.token = token
        self.user = user
        self.topic = topic
        self.environment = environment
        self.registeredAt = registeredAt
        self.liveActivity = liveActivity
    }

    /// Decodes a `push.devices` value for `token` (the key, normalised to lower case):
    /// `{"user":"u-42","topic":"com.example.app","environment":"production","registered_at":1795000000000}`, with
    /// `"push_to_start":"MatchAttributes"` for a push-to-start token or `"activity_id":"match-7"` for an activity's
    /// update token.
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
        return DeviceRegistration(token: normalizedToken, user: user, topic: topic, environment: environment, registeredAt: registeredAt,
                                  liveActivity: try liveActivity(of: root))
    }

    /// `push_to_start` or `activity_id` (at most one, each a non-empty name); `nil` for a device.
    private static func liveActivity(of root: JSONValue) throws(EventRejection) -> LiveActivityTarget? {
        func name(_ key: String) throws(EventRejection) -> String? {
            guard let value = root[key], value != .null else { return nil }
            guard case .string(let text) = value, !text.isEmpty, text.utf8.count <= LiveActivityTarget.maxNameBytes else {
                throw EventRejection(field: key, reason: "\(key) must be a non-empty string of at most \(LiveActivityTarget.maxNameBytes) bytes")
            }
            return text
        }
        let type = try name("push_to_start")
        let activity = try name("activity_id")
        switch (type, activity) {
        case (let type?, nil): return .pushToStart(attributesType: type)
        case (nil, let id?): return .activity(id: id)
        case (nil, nil): return nil
        case (_?, _?):
            throw EventRejection(field: "activity_id", reason: "a token is either a push-to-start token (push_to_start) or an activity's (activity_id), not both")
        }
    }
}

/// What a report of a dead token means for its registration (``DeviceRegistry/reportDead(token:since:)``).
public enum DeadTokenVerdict: Sendable, Equatable {
    /// The token was registered before it died: the registration is removed, the token is dead.
    case removed(DeviceRegistration)
    /// The token was registered again at or after it died: it is alive, and its registration stays.
    case registeredAgain(DeviceRegistration)
    /// No registration names the token (one given in an event): it is dead.
    case unregistered

    /// The registration removed, if the token was registered before it died.
    public var removed: DeviceRegistration? { if case .removed(let registration) = self { registration } else { nil } }

    /// Whether the token is dead: not registered again since the report's time.
    public var isDead: Bool { if case .registeredAgain = self { false } else { true } }
}

/// The registered devices, by token and by user.
///
/// Laid out for a million devices at ~110 resident bytes each: registrations are compact entries in
/// one array (the slab), the token packed into four words (``TokenKey``), the topic an id into a
/// small table, and a user's devices linked through the entries; two ``SlotIndex``es find a
/// token's entry and a user's first one. A `[String: DeviceRegistration]` plus a `Set` per user
/// took ~460 bytes a device (docs/BENCHMARKS.md).
public struct DeviceRegistry: Sendable, Equatable {
    /// One registration, 72 bytes in the array: the small fields follow the token's 33 bytes, where
    /// they fit before the next 8-byte boundary.
    private struct Entry: Sendable {
        var token: TokenKey
        var environment: APNsEnvironment
        /// The next entry of the same user's devices, or of the free list; -1 ends either.
        var next: Int32
        var user: String
        var registeredAt: Int64
        var topic: UInt32
    }

    private var entries: [Entry] = []
    /// The first free entry (removed registrations), reused before the array grows.
    private var freeSlot: Int32 = -1
    private var byToken = SlotIndex()
    /// User → the first entry of the user's devices. Users compare as bytes (``UserKey``), as their
    /// Kafka keys do.
    private var byUser = SlotIndex()
    private var topics = TopicTable()
    /// Push-to-start and activity update tokens: never a user's devices.
    private var liveActivities = LiveActivityRegistry()

    /// An empty registry.
    public init() {}

    /// Registered tokens, devices and Live Activity tokens.
    public var count: Int { byToken.count + liveActivities.count }

    /// Bytes one registration takes in the slab (the indexes add 10-15 bytes per token and per user).
    static var entryStride: Int { MemoryLayout<Entry>.stride }

    /// Entries in the slab, live or free (a removed registration's entry is reused first).
    var slotCount: Int { entries.count }

    /// Distinct topics in use.
    var topicCount: Int { topics.count }

    /// Applies one `push.devices` record: a value registers (or moves) the token, `nil` removes it.
    /// Returns the rejection for an unreadable record (the registry is then unchanged).
    @discardableResult
    public mutating func apply(key token: String, value: ArraySlice<UInt8>?) -> EventRejection? {
        guard let value else {
            _ = remove(token: token.lowercased())
            return nil
        }
        do {
            register(try DeviceRegistration.decode(token: token, value: value))
            return nil
        } catch {
            return error
        }
    }

    /// Registers a device or Live Activity token, replacing the token's previous registration (possibly another
    /// user's, or of the other kind).
    public mutating func register(_ registration: DeviceRegistration) {
        guard registration.liveActivity == nil else {
            _ = removeRegistration(of: TokenKey(registration.token))
            liveActivities.register(registration)
            return
        }
        if liveActivities.count > 0 { liveActivities.remove(token: registration.token) }
        let token = TokenKey(registration.token)
        let tokenHash = SlotIndex.hashBits(of: token)
        if let slot = slot(of: token, hash: tokenHash) { unlink(slot, tokenHash: tokenHash) }
        let userHash = SlotIndex.hashBits(of: UserKey(registration.user))
        let head = firstSlot(of: registration.user, hash: userHash)
        let slot = store(Entry(token: token, environment: registration.environment, next: head ?? -1, user: registration.user,
                               registeredAt: registration.registeredAt, topic: topics.retain(registration.topic)))
        byToken.insert(hash: tokenHash, slot: slot)
        // The new entry heads the user's list: no walk to its end.
        if let head {
            byUser.replace(hash: userHash, slot: head, with: slot)
        } else {
            byUser.insert(hash: userHash, slot: slot)
        }
    }

    /// Removes a token's registration; returns it if there was one.
    @discardableResult
    public mutating func remove(token: String) -> DeviceRegistration? {
        removeRegistration(of: TokenKey(token)) ?? (liveActivities.count > 0 ? liveActivities.remove(token: token) : nil)
    }

    /// The registration of `token`, if any.
    public func registration(for token: String) -> DeviceRegistration? {
        let key = TokenKey(lowercasing: token)
        if let slot = slot(of: key, hash: SlotIndex.hashBits(of: key)) { return registration(at: slot) }
        return liveActivities.count > 0 ? liveActivities.registration(for: token.lowercased()) : nil
    }

    /// The Live Activity tokens `target` addresses (push-to-start tokens of `user`'s devices for an attributes type, or an
    /// activity's update tokens), ordered by token.
    public func liveActivityTokens(of target: LiveActivityTarget, user: String?) -> [DeviceRegistration] {
        liveActivities.registrations(of: target, user: user)
    }

    /// The user's devices, ordered by token so fan-out is deterministic.
    public func devices(of user: String) -> [DeviceRegistration] {
        guard let first = firstSlot(of: user, hash: SlotIndex.hashBits(of: UserKey(user))) else { return [] }
        // The user's chain is walked twice: counted first (its entries are then in cache), so the array is allocated
        // once, at its size.
        var count = 0
        forEachSlot(from: first) { _ in count += 1 }
        var devices: [DeviceRegistration] = []
        devices.reserveCapacity(count)
        forEachSlot(from: first) { devices.append(registration(at: $0)) }
        // A user has a few devices: sorting them here is cheaper than keeping them sorted.
        if devices.count > 1 { devices.sort { $0.token < $1.token } }
        return devices
    }

    /// APNs reported `token` dead at `since` (epoch ms): Apple's 410 `timestamp`, or a feedback tuple's time. The
    /// registration is removed only if it was made before `since`; a device that registered again at or after that
    /// moment keeps it (the app got the token again: it is alive).
    @discardableResult
    public mutating func reportDead(token: String, since: Int64) -> DeadTokenVerdict {
        let key = TokenKey(lowercasing: token)
        let hash = SlotIndex.hashBits(of: key)
        guard let slot = slot(of: key, hash: hash) else {
            // An ended activity's update token (or a push-to-start token of an app deleted) is removed as a device's is.
            guard liveActivities.count > 0, let registration = liveActivities.registration(for: token.lowercased()) else { return .unregistered }
            guard registration.registeredAt < since else { return .registeredAgain(registration) }
            liveActivities.remove(token: registration.token)
            return .removed(registration)
        }
        let registration = registration(at: slot)
        guard registration.registeredAt < since else { return .registeredAgain(registration) }
        unlink(slot, tokenHash: hash)
        return .removed(registration)
    }

    /// Equal when both hold the same registrations, however their entries are laid out.
    public static func == (lhs: DeviceRegistry, rhs: DeviceRegistry) -> Bool {
        guard lhs.count == rhs.count, lhs.liveActivities == rhs.liveActivities else { return false }
        return lhs.byToken.allSlots { slot in
            let left = lhs.entries[Int(slot)]
            guard let other = rhs.slot(of: left.token, hash: SlotIndex.hashBits(of: left.token)) else { return false }
            let right = rhs.entries[Int(other)]
            return UserKey.sameBytes(left.user, right.user) && left.environment == right.environment
                && left.registeredAt == right.registeredAt && lhs.topics[left.topic] == rhs.topics[right.topic]
        }
    }

    private func slot(of token: TokenKey, hash: UInt32) -> Int32? {
        entries.withUnsafeBufferPointer { entries in byToken.first(hash: hash) { entries[Int($0)].token == token } }
    }

    private func firstSlot(of user: String, hash: UInt32) -> Int32? {
        entries.withUnsafeBufferPointer { entries in byUser.first(hash: hash) { UserKey.sameBytes(entries[Int($0)].user, user) } }
    }

    /// Entries are read through the buffer: `entries[i].field` went through the array's non-inlined element getter,
    /// which copied the whole entry (retaining its strings) to read one field, on every lookup.
    /// Calls `body` with each slot of a user's chain, from `first`.
    private func forEachSlot(from first: Int32, _ body: (Int32) -> Void) {
        var slot = first
        while slot >= 0 {
            body(slot)
            slot = entries.withUnsafeBufferPointer { $0[Int(slot)].next }
        }
    }

    private func registration(at slot: Int32) -> DeviceRegistration {
        entries.withUnsafeBufferPointer { entries in
            let entry = entries[Int(slot)]
            return DeviceRegistration(token: entry.token.string, user: entry.user, topic: topics[entry.topic],
                                      environment: entry.environment, registeredAt: entry.registeredAt)
        }
    }

    private mutating func removeRegistration(of token: TokenKey) -> DeviceRegistration? {
        let hash = SlotIndex.hashBits(of: token)
        guard let slot = slot(of: token, hash: hash) else { return nil }
        let registration = registration(at: slot)
        unlink(slot, tokenHash: hash)
        return registration
    }

    /// Puts `entry` in a free slot, else at the end of the slab.
    private mutating func store(_ entry: Entry) -> Int32 {
        guard freeSlot < 0 else {
            let slot = freeSlot
            freeSlot = entries[Int(slot)].next
            entries[Int(slot)] = entry
            return slot
        }
        precondition(entries.count < Int(Int32.max), "the device registry is full (\(entries.count) entries)")
        entries.append(entry)
        return Int32(entries.count - 1)
    }

    /// Takes the registration in `slot` out of both indexes and the user's list; frees the slot.
    private mutating func unlink(_ slot: Int32, tokenHash: UInt32) {
        let entry = entries[Int(slot)]
        byToken.remove(hash: tokenHash, slot: slot)
        let userHash = SlotIndex.hashBits(of: UserKey(entry.user))
        guard let head = firstSlot(of: entry.user, hash: userHash) else { preconditionFailure("a registered device's user has no devices") }
        if head == slot {
            if entry.next < 0 {
                byUser.remove(hash: userHash, slot: slot)
            } else {
                byUser.replace(hash: userHash, slot: slot, with: entry.next)
            }
        } else {
            var previous = head
            while entries[Int(previous)].next != slot { previous = entries[Int(previous)].next }
            entries[Int(previous)].next = entry.next
        }
        topics.release(entry.topic)
        // An empty user and token release a long id's or token's heap storage now, not at reuse.
        entries[Int(slot)] = Entry(token: TokenKey(""), environment: .production, next: freeSlot, user: "", registeredAt: 0, topic: 0)
        freeSlot = slot
    }
}

/// The registrations' topics, each stored once: an app has one bundle id, so a million devices
/// share a handful. Counted, so a topic no registration uses any more is dropped and its id reused.
private struct TopicTable: Sendable {
    private var names: [String] = []
    private var uses: [Int] = []
    /// Byte-exact (``UserKey``), so a topic comes back with the bytes it was registered with.
    private var ids: [UserKey: UInt32] = [:]
    private var freeIDs: [UInt32] = []

    var count: Int { ids.count }

    subscript(id: UInt32) -> String { names[Int(id)] }

    /// The id of `topic`, counting one more use.
    mutating func retain(_ topic: String) -> UInt32 {
        if let id = ids[UserKey(topic)] {
            uses[Int(id)] += 1
            return id
        }
        let id: UInt32
        if let free = freeIDs.popLast() {
            id = free
            names[Int(id)] = topic
            uses[Int(id)] = 1
        } else {
            id = UInt32(names.count)
            names.append(topic)
            uses.append(1)
        }
        ids[UserKey(topic)] = id
        return id
    }

    /// One use of `id` fewer; the topic goes at the last.
    mutating func release(_ id: UInt32) {
        uses[Int(id)] -= 1
        guard uses[Int(id)] == 0 else { return }
        ids[UserKey(names[Int(id)])] = nil
        names[Int(id)] = ""
        freeIDs.append(id)
    }
}
