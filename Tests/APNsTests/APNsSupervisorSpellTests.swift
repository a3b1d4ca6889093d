import APNs
import APNsSimulator
import APNsTestSupport
import Crypto
import Foundation
import NIOCore
import Testing

/// APNs spells (a GOAWAY after every stream, 500/503, a token throttled with 429, provider tokens expiring, a
/// silent host) through the supervisor and the HTTP/2 client the relay runs (nghttp2; the GOAWAY storm also on
/// swift-nio-http2), sending as the relay does (`submit`). A notification APNs could
/// still deliver is `failed` only once the retry budget (`relay.max_retry_s`, short here) is spent, never because a
/// spell outlasted `relay.max_attempts` sends.
@Suite("APNs spells: failed only once the retry budget is spent", .serialized)
struct APNsSupervisorSpellTests {
    /// The relay's settings but short: 5 attempts (the default `relay.max_attempts`), a 30 s budget, quick backoff;
    /// the relay's default HTTP/2 client unless told.
    static func setup(maxRetry: Duration = .seconds(30), client: Harness.HTTP2Client = .nghttp2) -> Harness.Setup {
        // Metrics before the supervisor: it makes its counters when it is created.
        _ = ProcessMetrics.shared
        var setup = Harness.Setup(client: client)
        setup.maxAttempts = 5
        setup.maxRetry = maxRetry
        setup.retryBackoff = Backoff(base: .milliseconds(10), cap: .milliseconds(100))
        return setup
    }

    /// Sends as the relay does: `submit`, its completion called once with the final outcome.
    static func sendAsRelay(_ supervisor: APNsSupervisor, _ notification: APNsNotification) async -> APNsOutcome {
        await withCheckedContinuation { (continuation: CheckedContinuation<APNsOutcome, Never>) in
            supervisor.submit(notification) { continuation.resume(returning: $0) }
        }
    }

    /// One notification per token, all at once; the outcome of each token.
    static func sendAll(_ supervisor: APNsSupervisor, tokens: [String]) async throws -> [String: APNsOutcome] {
        let notifications = try tokens.map { ($0, try Harness.notification(token: $0)) }
        return await withTaskGroup(of: (String, APNsOutcome).self) { group in
            for (token, notification) in notifications {
                group.addTask { (token, await sendAsRelay(supervisor, notification)) }
            }
            var outcomes: [String: APNsOutcome] = [:]
            for await (token, outcome) in group { outcomes[token] = outcome }
            return outcomes
        }
    }

    /// The retries counted for `cause` so far (`apns_retries_total{cause}`).
    static func retries(_ cause: String) -> Int64 { ProcessMetrics.total("apns_retries_total", [("cause", cause)]) }

    /// The provider tokens signed because APNs answered ExpiredProviderToken, so far.
    static func forcedRenewals() -> Int64 { ProcessMetrics.total("apns_jwt_renewals_total", [("reason", "expired_provider_token")]) }

    /// What did not end delivered, for a readable failure.
    static func undelivered(_ outcomes: [String: APNsOutcome]) -> [String] {
        outcomes.filter { $0.value.classification != .delivered }
            .map { "\($0.key.suffix(4)): \($0.value.classification) \($0.value.lastAttempt) after \($0.value.attempts) attempts" }
            .sorted()
    }

    @Test("a GOAWAY (NO_ERROR) after every stream for 2 s: every notification is delivered, none failed", arguments: Harness.HTTP2Client.allCases)
    func goAwayStorm(client: Harness.HTTP2Client) async throws {
        var setup = Self.setup(client: client)
        // Few streams per connection, so the storm rotates connections often with streams refused on each.
        setup.simulator.maxConcurrentStreams = 8
        try await Harness.run(setup) { simulator, supervisor in
            // The connection first, so a slow TLS handshake cannot outlast the storm.
            #expect(await Self.sendAsRelay(supervisor, try Harness.notification(token: Harness.token(1_000))).classification == .delivered)
            let deliveredBefore = simulator.deliveryCount
            let connectionsBefore = simulator.connectionsAccepted
            let goAwayRetriesBefore = Self.retries("goaway")
            simulator.addFault(.goAwayAfterStream, count: nil, for: .seconds(2))
            let tokens = (1...300).map(Harness.token)
            let outcomes = try await Self.sendAll(supervisor, tokens: tokens)
            #expect(Self.undelivered(outcomes) == [])
            #expect(simulator.deliveryCount - deliveredBefore == tokens.count)
            #expect(simulator.connectionsAccepted - connectionsBefore > 1, "the storm made the pool open new connections")
            // Streams above a GOAWAY are no attempts: each notification was processed once.
            #expect(outcomes.values.allSatisfy { $0.attempts == 1 })
            #expect(Self.retries("goaway") > goAwayRetriesBefore)
        }
    }

    @Test("700 answers of 500 and 503 in a row, more than 5 attempts' worth for 100 notifications: every notification is delivered")
    func serverErrorSpellWithinBudget() async throws {
        try await Harness.run(Self.setup()) { simulator, supervisor in
            // The connection first, so the spell's answers all go to the notifications below.
            #expect(await Self.sendAsRelay(supervisor, try Harness.notification(token: Harness.token(1_000))).classification == .delivered)
            let deliveredBefore = simulator.deliveryCount
            let serverErrorRetriesBefore = Self.retries("5xx")
            // A spell counted in answers, not in time: however slow the machine, the 100 notifications meet all 700
            // (500 and 503 alternating), 7 each on average, so at least one is refused more than relay.max_attempts times.
            simulator.addFault(.status(500, reason: "InternalServerError"), count: 350, every: 2)
            simulator.addFault(.status(503, reason: "ServiceUnavailable"), count: 350)
            let tokens = (1...100).map(Harness.token)
            let outcomes = try await Self.sendAll(supervisor, tokens: tokens)
            #expect(Self.undelivered(outcomes) == [])
            #expect(simulator.deliveryCount - deliveredBefore == tokens.count)
            // Every answer of the spell was one attempt: 700 refusals and 100 deliveries.
            #expect(outcomes.values.reduce(0) { $0 + $1.attempts } == 800)
            // More sends than relay.max_attempts: a spell is bounded by time (the retry budget), not by attempts.
            #expect(outcomes.values.map(\.attempts).max() ?? 0 > 5)
            #expect(Self.retries("5xx") > serverErrorRetriesBefore)
        }
    }

    @Test("a 503 spell that outlasts the 1 s budget: failed once the budget is spent, after more than max attempts")
    func serverErrorSpellPastBudget() async throws {
        try await Harness.run(Self.setup(maxRetry: .seconds(1))) { simulator, supervisor in
            simulator.addFault(.status(503, reason: "ServiceUnavailable"), count: nil, for: .seconds(60))
            let notification = try Harness.notification(token: Harness.token(1))
            let started = ContinuousClock.now
            let outcome = await Self.sendAsRelay(supervisor, notification)
            let spent = ContinuousClock.now - started
            #expect(outcome.classification == .retryable)
            #expect(outcome.reason == .serviceUnavailable)
            #expect(outcome.attempts > 5)
            #expect(spent >= .seconds(1), "given up only once relay.max_retry_s was spent")
            #expect(simulator.deliveryCount == 0)
        }
    }

    @Test("an apns-expiration a week away, or too far to convert, during a 503 spell: failed once the 1 s max_retry_s is spent")
    func farExpirationDuringSpell() async throws {
        try await Harness.run(Self.setup(maxRetry: .seconds(1))) { simulator, supervisor in
            simulator.addFault(.status(503, reason: "ServiceUnavailable"), count: nil, for: .seconds(60))
            let weekAway = Int64(Date().timeIntervalSince1970) + 7 * 86_400
            for (index, expiration) in [weekAway, Int64.max / 2].enumerated() {
                let outcome = await Self.sendAsRelay(supervisor, try Harness.notification(token: Harness.token(index + 1), expiration: expiration))
                #expect(outcome.classification == .retryable, "\(outcome)")
                #expect(outcome.reason == .serviceUnavailable, "failed at max_retry_s, not expired: \(outcome)")
            }
            #expect(simulator.deliveryCount == 0)
        }
    }

    @Test("429 for one token, with and without Retry-After: those wait (Retry-After honoured), the others go at once, none failed")
    func throttledToken() async throws {
        try await Harness.run(Self.setup()) { simulator, supervisor in
            // The connection first, so a slow TLS handshake cannot outlast the spells.
            #expect(await Self.sendAsRelay(supervisor, try Harness.notification(token: Harness.token(1_000))).classification == .delivered)
            let withoutRetryAfter = Harness.token(1)
            let withRetryAfter = Harness.token(2)
            let throttledRetriesBefore = Self.retries("429")
            simulator.addFault(.tooManyRequests(retryAfterSeconds: nil), token: withoutRetryAfter, count: nil, for: .seconds(1))
            simulator.addFault(.tooManyRequests(retryAfterSeconds: 1), token: withRetryAfter, count: nil, for: .milliseconds(1_500))
            let others = (3...52).map(Harness.token)
            let outcomes = try await Self.sendAll(supervisor, tokens: [withoutRetryAfter, withRetryAfter] + others)
            #expect(Self.undelivered(outcomes) == [])
            // Retry-After: 1 over a 1.5 s spell: sent at about 0, 1 and 2 s, not every backoff step.
            #expect((outcomes[withRetryAfter]?.attempts ?? 0) <= 3)
            // The other devices were not held: all of them were shown before either throttled one.
            let throttledShown = [withoutRetryAfter, withRetryAfter].compactMap { simulator.deliveries(for: $0).first?.sequence }
            let othersShown = others.compactMap { simulator.deliveries(for: $0).first?.sequence }
            #expect(throttledShown.count == 2 && othersShown.count == others.count)
            #expect((othersShown.max() ?? .max) < (throttledShown.min() ?? .min))
            #expect(Self.retries("429") > throttledRetriesBefore)
        }
    }

    @Test("ExpiredProviderToken for the token in use: a new JWT is signed at once and every notification is delivered")
    func expiredProviderToken() async throws {
        try await Harness.run(Self.setup()) { simulator, supervisor in
            #expect(await Self.sendAsRelay(supervisor, try Harness.notification(token: Harness.token(1))).classification == .delivered)
            #expect(simulator.providerTokensSeen == 1)
            let renewalsBefore = Self.forcedRenewals()
            // APNs now deems that token expired, for longer than the budget: only a new token gets through.
            simulator.expireProviderTokens(for: .seconds(60))
            let tokens = (2...51).map(Harness.token)
            let outcomes = try await Self.sendAll(supervisor, tokens: tokens)
            #expect(Self.undelivered(outcomes) == [])
            #expect(simulator.providerTokensSeen == 2, "one new token for the whole spell")
            #expect(Self.forcedRenewals() - renewalsBefore == 1)
        }
    }

    @Test("1 s of ExpiredProviderToken for every token: one forced renewal (the floor holds the rest back), then delivered")
    func expiredProviderTokenSpell() async throws {
        try await Harness.run(Self.setup()) { simulator, supervisor in
            #expect(await Self.sendAsRelay(supervisor, try Harness.notification(token: Harness.token(1))).classification == .delivered)
            let renewalsBefore = Self.forcedRenewals()
            simulator.addFault(.expiredProviderToken, count: nil, for: .seconds(1))
            let tokens = (2...31).map(Harness.token)
            let outcomes = try await Self.sendAll(supervisor, tokens: tokens)
            #expect(Self.undelivered(outcomes) == [])
            #expect(simulator.providerTokensSeen == 2)
            #expect(Self.forcedRenewals() - renewalsBefore == 1)
            #expect(ProcessMetrics.total("apns_jwt_renewals_deferred_total") > 0)
        }
    }

    @Test("a host that never answers TLS, or answers it but never speaks HTTP/2: nothing fails, no connection is ready meanwhile, all goes out once it answers",
          arguments: [SimulatorSilence.beforeTLS, .afterTLS])
    func unresponsiveHost(silence: SimulatorSilence) async throws {
        var setup = Self.setup()
        setup.connections = 1
        setup.connectTimeout = .milliseconds(300)
        try await Harness.run(setup) { simulator, supervisor in
            #expect(await Self.sendAsRelay(supervisor, try Harness.notification(token: Harness.token(1))).classification == .delivered)
            let connectFailuresBefore = ProcessMetrics.total("apns_connect_failures_total")
            simulator.silence(silence)
            // The open connection is closed under it: once the pool has seen that, nothing is on the wire (an
            // abrupt close may lose answers to requests already processed, which would then be sent twice).
            while supervisor.readyConnectionCount > 0 { try await Task.sleep(for: .milliseconds(10)) }
            let tokens = (2...21).map(Harness.token)
            async let sent = Self.sendAll(supervisor, tokens: tokens)
            // Connects time out against the silent host, again and again (the counts are waited for, not time).
            while ProcessMetrics.total("apns_connect_failures_total") - connectFailuresBefore < 3 {
                try await Task.sleep(for: .milliseconds(20))
            }
            // What /readyz reads: no ready connection while the host is silent.
            #expect(supervisor.readyConnectionCount == 0)
            simulator.silence(nil)
            let outcomes = try await sent
            #expect(Self.undelivered(outcomes) == [])
            #expect(outcomes.values.allSatisfy { $0.attempts == 1 }, "waiting for a connection spends no attempt")
            #expect(simulator.deliveryCount == tokens.count + 1)
        }
    }
}
