import APNsCore
import Testing

/// The table's own rules beyond the per-reason and per-failure rows that APNsRetryPolicyTests checks against
/// docs/APNS.md: the legacy binary statuses, the reason deciding before the status, the status ranges, and the
/// invariants every treatment keeps.
@Suite("Retry table: how each answer or failure is treated")
struct RetryTableTests {
    static let legacyStatuses: [APNsBinaryStatus] = APNsBinaryStatus.allCases + [.other(9), .other(11), .other(128)]

    static let failures: [APNsTransportFailure] = [
        .refused, .goingAway, .connectionLost, .deadlineExceeded, .noConnection, .expired, .cancelled, .overloaded,
        .shuttingDown, .noCredential, .streamError(""), .streamError("reset"),
    ]

    /// Every answer the tests below look at: each reason at its own status and at others, and bare statuses.
    static var responses: [APNsResponse] {
        var all: [APNsResponse] = []
        for reason in APNsReason.allCases {
            for status in [reason.httpStatus, 200, 400, 429, 500, 503] {
                all.append(APNsResponse(status: status, reason: reason))
            }
        }
        for status in [-1, 0, 100, 200, 204, 301, 400, 403, 404, 410, 428, 429, 430, 499, 500, 501, 502, 504, 599, 600, 999] {
            all.append(APNsResponse(status: status))
            all.append(APNsResponse(status: status, reason: .other("HTTP \(status)")))
        }
        for status in legacyStatuses { all.append(status.response) }
        return all
    }

    @Test("a legacy binary status is final whatever it is, even under an HTTP status or reason that would be retried")
    func legacyStatusesAreFinal() {
        for status in Self.legacyStatuses {
            #expect(APNsRetryTable.treatment(of: status.response) == APNsRetryTreatment(.final), "\(status.name)")
            for (httpStatus, reason) in [(503, APNsReason.serviceUnavailable), (429, .tooManyRequests), (403, .expiredProviderToken),
                                         (400, .idleTimeout), (500, .shutdown)] {
                let response = APNsResponse(status: httpStatus, reason: reason, legacyStatus: status)
                #expect(APNsRetryTable.treatment(of: response) == APNsRetryTreatment(.final), "\(status.name) under \(httpStatus)")
                #expect(APNsRetryTable.treatment(of: .response(response)).rule == .final)
            }
        }
    }

    @Test("the reason decides before the status: ExpiredProviderToken, IdleTimeout and Shutdown keep their treatment at any status")
    func reasonBeforeStatus() {
        for status in [200, 400, 403, 429, 500, 503] {
            #expect(APNsRetryTable.treatment(of: APNsResponse(status: status, reason: .expiredProviderToken))
                == APNsRetryTreatment(.renewCredential, cause: .expiredProviderToken), "\(status)")
            #expect(APNsRetryTable.treatment(of: APNsResponse(status: status, reason: .idleTimeout))
                == APNsRetryTreatment(.retryOnAnotherConnection, cause: .connection), "\(status)")
            #expect(APNsRetryTable.treatment(of: APNsResponse(status: status, reason: .shutdown))
                == APNsRetryTreatment(.retryOnAnotherConnection, cause: .serverError), "\(status)")
        }
    }

    @Test("any other reason leaves the decision to the status: a final reason under a 5xx or 429 is retried, a retried one under 4xx is final")
    func otherReasonsFollowTheStatus() {
        let special: Set<APNsReason> = [.expiredProviderToken, .idleTimeout, .shutdown]
        for reason in APNsReason.allCases + [.other("Whatever")] where !special.contains(reason) {
            #expect(APNsRetryTable.treatment(of: APNsResponse(status: 503, reason: reason))
                == APNsRetryTreatment(.retryAfterBackoff, cause: .serverError), "\(reason.rawValue)")
            #expect(APNsRetryTable.treatment(of: APNsResponse(status: 429, reason: reason))
                == APNsRetryTreatment(.retryAfterBackoff, cause: .tooManyRequests), "\(reason.rawValue)")
            #expect(APNsRetryTable.treatment(of: APNsResponse(status: 400, reason: reason)) == APNsRetryTreatment(.final), "\(reason.rawValue)")
        }
    }

    @Test("statuses: 500 through 599 and 429 are retried after the backoff; 499, 600, 428, 430 and anything else are final")
    func statusRanges() {
        for status in -1...1_000 {
            let treatment = APNsRetryTable.treatment(of: APNsResponse(status: status))
            switch status {
            case 429: #expect(treatment == APNsRetryTreatment(.retryAfterBackoff, cause: .tooManyRequests))
            case 500...599: #expect(treatment == APNsRetryTreatment(.retryAfterBackoff, cause: .serverError), "\(status)")
            default: #expect(treatment == APNsRetryTreatment(.final), "\(status)")
            }
        }
    }

    @Test("an answer wrapped as an attempt's result is treated as the answer itself")
    func wrappedAnswer() {
        for response in Self.responses {
            #expect(APNsRetryTable.treatment(of: .response(response)) == APNsRetryTable.treatment(of: response), "\(response)")
        }
    }

    @Test("invariants of every treatment: a cause exactly when retried; what was not processed is retried at once or final; only the stream's own failure counts against max attempts")
    func invariants() {
        let treatments = Self.responses.map { APNsRetryTable.treatment(of: $0) }
            + Self.failures.map { APNsRetryTable.treatment(of: .failure($0)) }
        for treatment in treatments {
            #expect((treatment.cause == nil) == (treatment.rule == .final), "\(treatment)")
            #expect(treatment.countsAgainstMaxAttempts == (treatment.cause == .stream), "\(treatment)")
            if !treatment.processed {
                #expect([.final, .retryNow, .retryOnAnotherConnection].contains(treatment.rule), "\(treatment)")
            }
        }
        // Every answer from APNs was processed by it.
        #expect(Self.responses.allSatisfy { APNsRetryTable.treatment(of: $0).processed })
        // A stream error's message does not change its treatment.
        #expect(APNsRetryTable.treatment(of: .failure(.streamError(""))) == APNsRetryTable.treatment(of: .failure(.streamError("GOAWAY"))))
    }

    @Test("a treatment's defaults: processed and not counted against max attempts, no cause")
    func treatmentDefaults() {
        let treatment = APNsRetryTreatment(.retryNow)
        #expect(treatment.rule == .retryNow && treatment.cause == nil && treatment.processed && !treatment.countsAgainstMaxAttempts)
    }

    @Test("causes and rules have distinct names: the causes are the cause label of apns_retries_total")
    func names() {
        #expect(APNsRetryCause.allCases.map(\.rawValue) == ["goaway", "refused", "5xx", "429", "connection", "expired_provider_token", "stream"])
        #expect(Set(APNsRetryRule.allCases.map(\.rawValue)).count == APNsRetryRule.allCases.count)
        #expect(APNsRetryCause.allCases.allSatisfy { APNsRetryCause(rawValue: $0.rawValue) == $0 })
        #expect(APNsRetryRule.allCases.allSatisfy { APNsRetryRule(rawValue: $0.rawValue) == $0 })
    }
}
