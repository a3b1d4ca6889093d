// Optional caps on the send rate of one app and push type: token buckets on the engine's clock.

public import APNsCore

/// One cap of `relay.rate_limits`: at most ``perSecond`` notifications a second for each app and push type it
/// matches, in bursts of at most ``burst``.
public struct RateLimitRule: Sendable, Equatable {
    /// The app (`apns-topic`) it caps; `nil` (`*`): each app, with a bucket of its own.
    public var topic: String?
    /// The push type it caps; `nil` (`*`): each push type, with a bucket of its own.
    public var pushType: APNsPushType?
    /// Notifications a second, at most.
    public var perSecond: Int
    /// Notifications at once after a quiet spell, at most.
    public var burst: Int

    /// A cap of `perSecond` with bursts of `burst` (default: one second's worth).
    public init(topic: String?, pushType: APNsPushType?, perSecond: Int, burst: Int? = nil) {
        self.topic = topic
        self.pushType = pushType
        self.perSecond = perSecond
        self.burst = burst ?? perSecond
    }

    /// How specific it is: a rule naming both wins over one naming the topic, which wins over one naming the push type.
    var specificity: Int { (topic == nil ? 0 : 2) + (pushType == nil ? 0 : 1) }

    func matches(topic: String, pushType: APNsPushType) -> Bool {
        (self.topic == nil || self.topic == topic) && (self.pushType == nil || self.pushType == pushType)
    }

    /// Parses `relay.rate_limits`: rules `TOPIC/PUSH_TYPE=PER_SECOND[:BURST]` separated by commas, `*` for any topic or
    /// push type (`*/background=200,com.example.app/alert=1000:2000`). An error names the rule and what is wrong.
    public static func parseList(_ text: String) throws(RateLimitSyntaxError) -> [RateLimitRule] {
        var rules: [RateLimitRule] = []
        for rawRule in text.split(separator: ",", omittingEmptySubsequences: false) {
            let rule = String(rawRule.drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
            if rule.isEmpty { continue }
            let sides = rule.split(separator: "=", omittingEmptySubsequences: false)
            let target = sides.first?.split(separator: "/", omittingEmptySubsequences: false) ?? []
            guard sides.count == 2, target.count == 2, !target[0].isEmpty, !target[1].isEmpty else {
                throw RateLimitSyntaxError(rule: rule, problem: "must be TOPIC/PUSH_TYPE=PER_SECOND[:BURST] (`*` for any topic or push type)")
            }
            var pushType: APNsPushType?
            if target[1] != "*" {
                guard let named = APNsPushType(rawValue: String(target[1])) else {
                    throw RateLimitSyntaxError(rule: rule, problem: "'\(target[1])' is no push type (\(APNsPushType.allCases.map(\.rawValue).joined(separator: ", ")), or *)")
                }
                pushType = named
            }
            let amounts = sides[1].split(separator: ":", omittingEmptySubsequences: false)
            guard amounts.count <= 2, let perSecond = Int(amounts[0]), perSecond >= 1,
                  let burst = amounts.count == 2 ? Int(amounts[1]) : perSecond, burst >= 1 else {
                throw RateLimitSyntaxError(rule: rule, problem: "the rate and the burst must be whole numbers of at least 1 (PER_SECOND[:BURST])")
            }
            let parsed = RateLimitRule(topic: target[0] == "*" ? nil : String(target[0]), pushType: pushType, perSecond: perSecond, burst: burst)
            guard !rules.contains(where: { $0.topic == parsed.topic && $0.pushType == parsed.pushType }) else {
                throw RateLimitSyntaxError(rule: rule, problem: "caps \(target[0])/\(target[1]) a second time")
            }
            rules.append(parsed)
        }
        return rules
    }
}

extension RateLimitRule: CustomStringConvertible {
    /// The rule as `relay.rate_limits` spells it.
    public var description: String { "\(topic ?? "*")/\(pushType?.rawValue ?? "*")=\(perSecond):\(burst)" }
}

/// A `relay.rate_limits` rule that cannot be read.
public struct RateLimitSyntaxError: Error, Sendable, Equatable {
    /// The rule as written.
    public var rule: String
    /// What is wrong with it.
    public var problem: String
}

/// The app and push type a bucket counts.
package struct RateLimitKey: Sendable, Hashable {
    package var topic: String
    package var pushType: APNsPushType
}

/// The send-rate caps (`relay.rate_limits`) as token buckets, one per app and push type a rule matches (the most
/// specific rule), filled on the engine's monotonic clock in milliseconds. Pure: the engine asks before it puts a
/// notification into the window, and a fan-out that finds its bucket empty waits, holding no room, until a tick
/// finds tokens again.
package struct SendRateLimits: Sendable {
    fileprivate struct Bucket: Sendable {
        /// Thousandths of a notification, so that a rate below one per millisecond fills exactly.
        var milliTokens: Int64
        var filledAt: Int64
        let perSecond: Int64
        let capacity: Int64
    }

    package let rules: [RateLimitRule]
    private var buckets: [RateLimitKey: Bucket] = [:]
    /// The keys no rule matches (asked once each, then known).
    private var uncapped: Set<RateLimitKey> = []

    /// Caps by `rules` (none: nothing is capped).
    package init(rules: [RateLimitRule]) {
        self.rules = rules.sorted { $0.specificity > $1.specificity }
    }

    /// Whether any rule is set.
    package var isEmpty: Bool { rules.isEmpty }

    /// Takes one notification of `topic` and `pushType` from its bucket at `now` (monotonic milliseconds): `false` when
    /// its cap allows none now (the notification waits).
    package mutating func take(topic: String, pushType: APNsPushType, now: Int64) -> Bool {
        guard !rules.isEmpty else { return true }
        let key = RateLimitKey(topic: topic, pushType: pushType)
        if buckets[key] == nil {
            guard !uncapped.contains(key) else { return true }
            guard let rule = rules.first(where: { $0.matches(topic: topic, pushType: pushType) }) else {
                uncapped.insert(key)
                return true
            }
            buckets[key] = Bucket(milliTokens: Int64(rule.burst) * 1_000, filledAt: now, perSecond: Int64(rule.perSecond),
                                  capacity: Int64(rule.burst) * 1_000)
        }
        return buckets[key]!.take(now: now)
    }
}

extension SendRateLimits.Bucket {
    /// Fills for the time since the last fill (a rate of `perSecond` is `perSecond` thousandths a millisecond), then
    /// takes one.
    mutating func take(now: Int64) -> Bool {
        if now > filledAt {
            milliTokens = min(capacity, milliTokens + (now - filledAt) * perSecond)
            filledAt = now
        }
        guard milliTokens >= 1_000 else { return false }
        milliTokens -= 1_000
        return true
    }
}
