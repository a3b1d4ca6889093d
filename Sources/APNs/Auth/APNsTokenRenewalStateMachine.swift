/// The renewal rules for the shared provider token, as a pure state machine.
///
/// - A token is renewed when it is `renewalAge` old (50 minutes; APNs refuses tokens older than an hour).
/// - After a 403 `ExpiredProviderToken` for the current token a new one is signed at once: that token is of no
///   use any more. Forced renewals are at least `forcedRenewalFloor` apart (60 s): APNs answers 429
///   `TooManyProviderTokenUpdates` to a provider renewing too often, and every in-flight request of the old token
///   is answered `ExpiredProviderToken` at about the same time. Within the floor the caller retries after its
///   backoff with the token it has.
public struct APNsTokenRenewalStateMachine: Sendable, Hashable {
    /// The current token and its `iat` (epoch seconds).
    public private(set) var current: (token: String, issuedAt: Int64)?
    /// How many tokens were installed so far: names the current one without its secret text.
    public private(set) var generation: UInt64 = 0
    /// How old a token may get before it is renewed (seconds).
    public let renewalAge: Int64
    /// The least time between two renewals forced by `ExpiredProviderToken` (seconds).
    public let forcedRenewalFloor: Int64
    /// When the last forced renewal was decided (epoch seconds).
    private var lastForcedRenewal: Int64?

    /// What the caller must do to have a token.
    public enum Action: Sendable, Hashable {
        /// Use this token.
        case use(String)
        /// Sign a new token with this `iat`, then call ``installed(token:issuedAt:)``.
        case sign(issuedAt: Int64)
    }

    /// What an `ExpiredProviderToken` answer leads to.
    public enum Renewal: Sendable, Hashable {
        /// Sign a new token with this `iat`, then call ``installed(token:issuedAt:)``.
        case sign(issuedAt: Int64)
        /// A newer token than the one answered is installed already: use it.
        case alreadyRenewed
        /// A renewal was forced less than the floor ago: none before `until` (epoch seconds).
        case deferred(until: Int64)
    }

    /// Creates the state machine.
    public init(renewalAge: Int64 = 50 * 60, forcedRenewalFloor: Int64 = 60) {
        self.renewalAge = renewalAge
        self.forcedRenewalFloor = forcedRenewalFloor
    }

    /// The token to use at `now` (epoch seconds).
    public func token(now: Int64) -> Action {
        guard let current else { return .sign(issuedAt: now) }
        if now - current.issuedAt >= renewalAge { return .sign(issuedAt: now) }
        return .use(current.token)
    }

    /// Records a freshly signed token.
    public mutating func installed(token: String, issuedAt: Int64) {
        current = (token, issuedAt)
        generation &+= 1
    }

    /// APNs answered 403 ExpiredProviderToken to the token of `generation`, at `now` (epoch seconds).
    public mutating func expiredProviderToken(generation answered: UInt64, now: Int64) -> Renewal {
        guard current != nil else { return .sign(issuedAt: now) }
        guard answered == generation else { return .alreadyRenewed }
        if let last = lastForcedRenewal, now - last < forcedRenewalFloor { return .deferred(until: last + forcedRenewalFloor) }
        lastForcedRenewal = now
        return .sign(issuedAt: now)
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.current?.token == rhs.current?.token && lhs.current?.issuedAt == rhs.current?.issuedAt && lhs.generation == rhs.generation
            && lhs.renewalAge == rhs.renewalAge && lhs.forcedRenewalFloor == rhs.forcedRenewalFloor && lhs.lastForcedRenewal == rhs.lastForcedRenewal
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(current?.token)
        hasher.combine(current?.issuedAt)
        hasher.combine(generation)
    }
}
