import APNsCore
import Testing

@testable import RelayCore

@Suite("Send-rate caps (relay.rate_limits)")
struct SendRateLimitsTests {
    @Test("rules parse from TOPIC/PUSH_TYPE=PER_SECOND[:BURST] lists, * for any; the burst defaults to one second's worth")
    func parsing() throws {
        let rules = try RateLimitRule.parseList(" */background=200, com.example.app/alert=1000:2000 ,")
        #expect(rules == [RateLimitRule(topic: nil, pushType: .background, perSecond: 200, burst: 200),
                          RateLimitRule(topic: "com.example.app", pushType: .alert, perSecond: 1_000, burst: 2_000)])
        #expect(rules.map(\.description) == ["*/background=200:200", "com.example.app/alert=1000:2000"])
        #expect(try RateLimitRule.parseList("").isEmpty)
    }

    @Test("a rule that cannot be read is named with what is wrong", arguments: [
        ("com.example.app=5", "TOPIC/PUSH_TYPE"),
        ("*/shout=5", "'shout' is no push type"),
        ("*/alert=0", "at least 1"),
        ("*/alert=5:x", "at least 1"),
        ("*/alert=5,*/alert=6", "a second time"),
    ])
    func badRules(text: String, problem: String) {
        #expect {
            _ = try RateLimitRule.parseList(text)
        } throws: { error in
            guard let error = error as? RateLimitSyntaxError else { return false }
            return error.problem.contains(problem) && text.contains(error.rule)
        }
    }

    @Test("a bucket gives its burst at once, then its rate; each app has its own under a * rule; the most specific rule wins")
    func buckets() {
        var limits = SendRateLimits(rules: [RateLimitRule(topic: nil, pushType: .background, perSecond: 10, burst: 3),
                                            RateLimitRule(topic: "vip", pushType: .background, perSecond: 1_000)])
        let burst = (0..<5).map { _ in limits.take(topic: "a", pushType: .background, now: 0) }
        #expect(burst == [true, true, true, false, false])
        let otherApp = limits.take(topic: "b", pushType: .background, now: 0)
        #expect(otherApp, "another app: a bucket of its own")
        let early = limits.take(topic: "a", pushType: .background, now: 99)
        #expect(!early, "10 a second: one per 100 ms")
        let due = limits.take(topic: "a", pushType: .background, now: 100)
        let again = limits.take(topic: "a", pushType: .background, now: 100)
        #expect(due && !again)
        let alert = limits.take(topic: "a", pushType: .alert, now: 100)
        #expect(alert, "no rule for alerts: uncapped")
        let vip = (0..<500).map { _ in limits.take(topic: "vip", pushType: .background, now: 0) }
        #expect(vip.allSatisfy { $0 }, "its own rule, 1000 a second")
        let afterQuiet = (0..<4).map { _ in limits.take(topic: "a", pushType: .background, now: 10_000) }
        #expect(afterQuiet == [true, true, true, false], "a long quiet spell fills the bucket to its burst, no more")
    }
}
