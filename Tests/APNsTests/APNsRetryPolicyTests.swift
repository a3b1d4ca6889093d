import APNs
import Foundation
import NIOCore
import Testing

@Suite("Retry policy: the table and the state machine (injected clock and jitter)")
struct APNsRetryPolicyTests {
    let t0 = NIODeadline.uptimeNanoseconds(1_000_000_000)
    let policy = APNsRetryPolicy(maxAttempts: 5, backoff: Backoff(base: .milliseconds(200), cap: .seconds(30)), maxRetryDuration: .seconds(300))

    /// The reasons that are retried, and how; every other reason Apple documents is final.
    static let retriedReasons: [APNsReason: (APNsRetryRule, APNsRetryCause)] = [
        .idleTimeout: (.retryOnAnotherConnection, .connection),
        .expiredProviderToken: (.renewCredential, .expiredProviderToken),
        .tooManyProviderTokenUpdates: (.retryAfterBackoff, .tooManyRequests),
        .tooManyRequests: (.retryAfterBackoff, .tooManyRequests),
        .internalServerError: (.retryAfterBackoff, .serverError),
        .serviceUnavailable: (.retryAfterBackoff, .serverError),
        .shutdown: (.retryOnAnotherConnection, .serverError),
    ]

    /// The statuses Apple documents, answered without a reason it documents.
    static let statusesWithoutReason: [Int: (APNsRetryRule, APNsRetryCause?)] = [
        200: (.final, nil), 400: (.final, nil), 403: (.final, nil), 404: (.final, nil), 405: (.final, nil),
        410: (.final, nil), 413: (.final, nil), 429: (.retryAfterBackoff, .tooManyRequests),
        500: (.retryAfterBackoff, .serverError), 503: (.retryAfterBackoff, .serverError),
    ]

    static let failures: [(name: String, failure: APNsTransportFailure, rule: APNsRetryRule, cause: APNsRetryCause?, processed: Bool)] = [
        ("refused", .refused, .retryNow, .refused, false),
        ("goingAway", .goingAway, .retryOnAnotherConnection, .goAway, false),
        ("connectionLost", .connectionLost, .retryAfterBackoff, .connection, true),
        ("deadlineExceeded", .deadlineExceeded, .retryAfterBackoff, .connection, true),
        ("streamError", .streamError("reset"), .retryAfterBackoff, .stream, true),
        ("noConnection", .noConnection, .final, nil, false),
        ("expired", .expired, .final, nil, false),
        ("cancelled", .cancelled, .final, nil, false),
        ("overloaded", .overloaded, .final, nil, false),
        ("shuttingDown", .shuttingDown, .final, nil, false),
        ("noCredential", .noCredential, .final, nil, false),
    ]

    /// The rows of docs/APNS.md's retry tables: `| status | reason | treatment | cause |` keyed by status and
    /// reason, and `| failure (what it means) | treatment | cause | attempt? |` keyed by the failure's name.
    static func documentedRows() throws -> [String: [String]] {
        let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/APNS.md").standardized
        let text = try String(contentsOf: docs, encoding: .utf8)
        var rows: [String: [String]] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("| ") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "`", with: "") }
            guard cells.count >= 3, cells[0] == "-" || Int(cells[0]) != nil || cells[0].first?.isLowercase == true else { continue }
            // A failure row's first cell is its name, then what it means in parentheses.
            let key = Int(cells[0]) != nil || cells[0] == "-" ? "\(cells[0]) \(cells[1])" : String(cells[0].split(separator: " ")[0])
            rows[key] = cells
        }
        return rows
    }

    @Test("every reason Apple documents, at its status: the expected treatment, and the same row in docs/APNS.md")
    func everyReason() throws {
        let documented = try Self.documentedRows()
        #expect(APNsReason.allCases.count == 39)
        for reason in APNsReason.allCases {
            let treatment = APNsRetryTable.treatment(of: APNsResponse(status: reason.httpStatus, reason: reason))
            let expected = Self.retriedReasons[reason]
            #expect(treatment.rule == (expected?.0 ?? .final), "\(reason.rawValue)")
            #expect(treatment.cause == expected?.1, "\(reason.rawValue)")
            #expect(!treatment.countsAgainstMaxAttempts, "\(reason.rawValue): an answer of Apple's is never a failure of the request itself")
            // What is retried is `failed` when the retries end; the rest keeps its final class.
            let classification = APNsResponse(status: reason.httpStatus, reason: reason).classification
            #expect((classification == .retryable) == (treatment.rule != .final), "\(reason.rawValue)")
            let row = documented["\(reason.httpStatus) \(reason.rawValue)"]
            #expect(row?[2] == treatment.rule.rawValue, "docs/APNS.md row for \(reason.httpStatus) \(reason.rawValue)")
            #expect(row?[3] == (treatment.cause?.rawValue ?? "-"), "docs/APNS.md cause for \(reason.rawValue)")
        }
        for (status, expected) in Self.statusesWithoutReason {
            for reason in [nil, APNsReason.other("HTTP \(status)")] {
                let treatment = APNsRetryTable.treatment(of: APNsResponse(status: status, reason: reason))
                #expect(treatment.rule == expected.0, "\(status) \(String(describing: reason))")
                #expect(treatment.cause == expected.1, "\(status)")
            }
            let row = documented["\(status) -"]
            #expect(row?[2] == expected.0.rawValue, "docs/APNS.md row for \(status) without a documented reason")
            #expect(row?[3] == (expected.1?.rawValue ?? "-"))
        }
        #expect(APNsRetryTable.treatment(of: APNsResponse(status: 502)).rule == .retryAfterBackoff)
        #expect(APNsRetryTable.treatment(of: APNsResponse(status: 418)).rule == .final)
    }

    @Test("every transport failure: the expected treatment, and the same row in docs/APNS.md")
    func everyFailure() throws {
        let documented = try Self.documentedRows()
        for entry in Self.failures {
            let treatment = APNsRetryTable.treatment(of: .failure(entry.failure))
            #expect(treatment.rule == entry.rule, "\(entry.name)")
            #expect(treatment.cause == entry.cause, "\(entry.name)")
            #expect(treatment.processed == entry.processed, "\(entry.name)")
            #expect(treatment.countsAgainstMaxAttempts == (entry.cause == .stream), "\(entry.name)")
            #expect(documented[entry.name]?[1] == entry.rule.rawValue, "docs/APNS.md row for \(entry.name)")
            #expect(documented[entry.name]?[2] == (entry.cause?.rawValue ?? "-"), "docs/APNS.md cause for \(entry.name)")
        }
    }

    @Test("a 503 spell: growing backoff, every send an attempt but none against max attempts, the last send at the deadline, then final")
    func serverErrorSpell() {
        var machine = APNsRetryStateMachine(policy: policy, started: t0, expiry: nil)
        let answer = APNsAttemptResult.response(APNsResponse(status: 503, reason: .serviceUnavailable))
        var now = t0
        var delays: [TimeAmount] = []
        while case .retryAfter(let delay, let cause) = machine.attemptEnded(answer, now: now, jitter: 1) {
            #expect(cause == .serverError)
            delays.append(delay)
            now = now + delay
        }
        // 0.2, 0.4, ... doubling to the 30 s cap, then 30 s steps; the last one ends exactly at the 300 s deadline.
        #expect(Array(delays.prefix(4)) == [.milliseconds(200), .milliseconds(400), .milliseconds(800), .milliseconds(1_600)])
        #expect(delays.contains(.seconds(30)))
        #expect(delays.allSatisfy { $0 <= .seconds(30) })
        #expect(now == t0 + .seconds(300))
        #expect(machine.attempts == delays.count + 1)
        #expect(machine.attempts > policy.maxAttempts)
        #expect(machine.attemptsAgainstLimit == 0)
        // Jitter scales each step to between half and all of it.
        var jittered = APNsRetryStateMachine(policy: policy, started: t0, expiry: nil)
        #expect(jittered.attemptEnded(answer, now: t0, jitter: 0) == .retryAfter(.milliseconds(100), .serverError))
    }

    @Test("unprocessed streams: retried at once and no attempt; after 10 in a row the next waits the backoff")
    func unprocessed() {
        var machine = APNsRetryStateMachine(policy: policy, started: t0, expiry: nil)
        for _ in 0..<5 { #expect(machine.attemptEnded(.failure(.refused), now: t0, jitter: 1) == .retryNow(.refused)) }
        for _ in 0..<5 { #expect(machine.attemptEnded(.failure(.goingAway), now: t0, jitter: 1) == .retryOnAnotherConnection(.goAway)) }
        #expect(machine.attemptEnded(.failure(.goingAway), now: t0, jitter: 1) == .retryAfter(.milliseconds(200), .goAway))
        #expect(machine.attemptEnded(.failure(.refused), now: t0, jitter: 1) == .retryNow(.refused))
        #expect(machine.attempts == 0)
        // A connection that closed before the request was written: the same, without an attempt.
        #expect(machine.waitEnded(.refused, now: t0, jitter: 1) == .retryNow(.refused))
        #expect(machine.attempts == 0)
        // Past the deadline even an unprocessed stream is final.
        #expect(machine.attemptEnded(.failure(.refused), now: t0 + .seconds(300), jitter: 1) == .final)
    }

    @Test("429: Retry-After honoured (never earlier than it), one past the deadline ends at once, a huge one does not trap")
    func retryAfter() {
        var machine = APNsRetryStateMachine(policy: policy, started: t0, expiry: nil)
        func throttled(_ seconds: Int?) -> APNsAttemptResult {
            .response(APNsResponse(status: 429, reason: .tooManyRequests, retryAfterSeconds: seconds))
        }
        #expect(machine.attemptEnded(throttled(3), now: t0, jitter: 1) == .retryAfter(.seconds(3), .tooManyRequests))
        #expect(machine.attemptEnded(throttled(nil), now: t0, jitter: 1) == .retryAfter(.milliseconds(400), .tooManyRequests))
        #expect(machine.attemptEnded(throttled(299), now: t0 + .seconds(1), jitter: 1) == .retryAfter(.seconds(299), .tooManyRequests))
        #expect(machine.attemptEnded(throttled(300), now: t0 + .seconds(1), jitter: 1) == .final)
        var huge = APNsRetryStateMachine(policy: policy, started: t0, expiry: nil)
        #expect(huge.attemptEnded(throttled(Int.max), now: t0, jitter: 1) == .final)
        #expect(machine.attemptsAgainstLimit == 0)
    }

    @Test("ExpiredProviderToken: renew, then retry (after the backoff when no new token can be had)")
    func expiredProviderToken() {
        var machine = APNsRetryStateMachine(policy: policy, started: t0, expiry: nil)
        let expired = APNsAttemptResult.response(APNsResponse(status: 403, reason: .expiredProviderToken))
        #expect(machine.attemptEnded(expired, now: t0, jitter: 1) == .renewCredentialThenRetry(ifNotRenewed: .milliseconds(200)))
        #expect(machine.attemptEnded(expired, now: t0, jitter: 1) == .renewCredentialThenRetry(ifNotRenewed: .milliseconds(400)))
        #expect(machine.attempts == 2)
        #expect(APNsRetryDecision.renewCredentialThenRetry(ifNotRenewed: .zero).cause == .expiredProviderToken)
    }

    @Test("failures of the request itself count against max attempts; Apple's final answers and waits end at once")
    func maxAttempts() {
        var machine = APNsRetryStateMachine(policy: policy, started: t0, expiry: nil)
        for _ in 1..<policy.maxAttempts {
            guard case .retryAfter(_, .stream) = machine.attemptEnded(.failure(.streamError("reset")), now: t0, jitter: 1) else {
                Issue.record("a reset stream is retried after the backoff")
                return
            }
        }
        #expect(machine.attemptEnded(.failure(.streamError("reset")), now: t0, jitter: 1) == .final)
        #expect(machine.attemptsAgainstLimit == policy.maxAttempts)
        var other = APNsRetryStateMachine(policy: policy, started: t0, expiry: nil)
        #expect(other.attemptEnded(.response(APNsResponse(status: 200)), now: t0, jitter: 1) == .final)
        #expect(other.attemptEnded(.response(APNsResponse(status: 410, reason: .unregistered)), now: t0, jitter: 1) == .final)
        #expect(other.waitEnded(.noConnection, now: t0, jitter: 1) == .final)
        #expect(other.attempts == 2)
    }

    @Test("the deadline: relay.max_retry_s after the hand-over, or apns-expiration when sooner; a draining pool takes no retry that waits")
    func deadlineAndDrain() {
        let expiring = APNsRetryStateMachine(policy: policy, started: t0, expiry: t0 + .seconds(20))
        #expect(expiring.deadline == t0 + .seconds(20))
        #expect(APNsRetryStateMachine(policy: policy, started: t0, expiry: nil).deadline == t0 + .seconds(300))
        // An expiration a week away (or one too far to convert) does not stretch the retries past max_retry_s.
        #expect(APNsRetryStateMachine(policy: policy, started: t0, expiry: t0 + .hours(168)).deadline == t0 + .seconds(300))
        #expect(APNsRetryStateMachine(policy: policy, started: t0, expiry: .distantFuture).deadline == t0 + .seconds(300))
        var machine = APNsRetryStateMachine(policy: policy, started: t0, expiry: nil)
        let unavailable = APNsAttemptResult.response(APNsResponse(status: 503, reason: .serviceUnavailable))
        #expect(machine.attemptEnded(unavailable, now: t0, jitter: 1, shuttingDown: true) == .final)
        #expect(machine.attemptEnded(.failure(.refused), now: t0, jitter: 1, shuttingDown: true) == .retryNow(.refused))
        // A backoff never reaches past the deadline: 1 s before it, the next send is at it.
        var late = APNsRetryStateMachine(policy: policy, started: t0, expiry: nil)
        for _ in 0..<10 { _ = late.attemptEnded(unavailable, now: t0, jitter: 1) }
        #expect(late.attemptEnded(unavailable, now: t0 + .seconds(299), jitter: 1) == .retryAfter(.seconds(1), .serverError))
    }
}
