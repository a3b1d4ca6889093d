@testable import APNs
import Synchronization
import Testing

@Suite("A pool's credential standing: refused by APNs, or accepted again")
struct APNsCredentialStandingTests {
    /// The reasons that refuse the credential itself, at the status Apple sends them with.
    static let credentialReasons: [APNsReason] = [
        .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken, .unrelatedKeyIdInToken, .invalidProviderToken, .badCertificate,
        .badCertificateEnvironment,
    ]

    static func refused(_ reason: APNsReason) -> APNsResponse {
        APNsResponse(status: reason.httpStatus, reason: reason)
    }

    @Test("exactly the six credential reasons (the environment refusal in both of its spellings) are refusals: no other documented reason, no undocumented one, and no reason at all")
    func whichReasonsRefuse() {
        for reason in APNsReason.allCases {
            #expect(APNsCredentialStanding.isCredentialRefusal(reason) == Self.credentialReasons.contains(reason), "\(reason)")
        }
        #expect(!APNsCredentialStanding.isCredentialRefusal(nil))
        #expect(!APNsCredentialStanding.isCredentialRefusal(.other("HTTP 403")))
        // Apple's answer body is read by name: the field's spelling is its own reason, not an undocumented one.
        #expect(APNsReason(rawValue: "BadEnvironmentKeyInToken") == .badEnvironmentKeyInToken)
        #expect(APNsReason.badEnvironmentKeyInToken.rawValue == "BadEnvironmentKeyInToken" && APNsReason.badEnvironmentKeyInToken.httpStatus == 403)
    }

    @Test("a first refusal is counted once under Apple's reason, and stays in force", arguments: credentialReasons)
    func firstRefusal(_ reason: APNsReason) {
        let standing = APNsCredentialStanding()
        #expect(standing.current == nil, "a new pool is not refused")
        let refusal = standing.observe(Self.refused(reason))
        #expect(refusal == APNsCredentialStanding.Refusal(reason: reason.rawValue, count: 1))
        #expect(standing.current == refusal)
    }

    @Test("repeats of one reason count up; another reason starts its own count at 1")
    func repeatsCountUp() {
        let standing = APNsCredentialStanding()
        #expect(standing.observe(Self.refused(.badEnvironmentKeyIdInToken))?.count == 1)
        #expect(standing.observe(Self.refused(.badEnvironmentKeyIdInToken))?.count == 2)
        #expect(standing.observe(Self.refused(.badEnvironmentKeyIdInToken))?.count == 3)
        let other = standing.observe(Self.refused(.unrelatedKeyIdInToken))
        #expect(other == APNsCredentialStanding.Refusal(reason: "UnrelatedKeyIdInToken", count: 1))
        // Back to the first reason: its earlier count is not resumed.
        #expect(standing.observe(Self.refused(.badEnvironmentKeyIdInToken))?.count == 1)
    }

    @Test("an answer that got past authentication clears the refusal and returns none; the next refusal counts from 1",
          arguments: [APNsResponse(status: 200), APNsResponse(status: 400, reason: .badDeviceToken),
                      APNsResponse(status: 410, reason: .unregistered), APNsResponse(status: 429, reason: .tooManyRequests),
                      APNsResponse(status: 503, reason: .serviceUnavailable)])
    func acceptedAgain(_ answer: APNsResponse) {
        let standing = APNsCredentialStanding()
        _ = standing.observe(Self.refused(.invalidProviderToken))
        _ = standing.observe(Self.refused(.invalidProviderToken))
        #expect(standing.observe(answer) == nil)
        #expect(standing.current == nil)
        #expect(standing.observe(Self.refused(.invalidProviderToken))?.count == 1)
    }

    @Test("a 403 not about the credential (Forbidden, ExpiredProviderToken, MissingProviderToken, no reason) neither counts nor clears",
          arguments: [APNsResponse(status: 403, reason: .forbidden), APNsResponse(status: 403, reason: .expiredProviderToken),
                      APNsResponse(status: 403, reason: .missingProviderToken), APNsResponse(status: 403)])
    func otherForbiddenAnswers(_ answer: APNsResponse) {
        let standing = APNsCredentialStanding()
        #expect(standing.observe(answer) == nil)
        #expect(standing.current == nil, "not refused by it")
        _ = standing.observe(Self.refused(.badCertificate))
        #expect(standing.observe(answer) == nil)
        #expect(standing.current == APNsCredentialStanding.Refusal(reason: "BadCertificate", count: 1), "still refused, not counted again")
    }

    @Test("refusals observed from many threads at once are each counted: every count from 1 to n is handed out once")
    func concurrentRefusals() async {
        let standing = APNsCredentialStanding()
        let n = 1_000
        // The supervisor logs the count that is 1 modulo 1,000: each count must go to exactly one answer.
        let counts = await withTaskGroup(of: Int?.self) { group in
            for _ in 0..<n { group.addTask { standing.observe(Self.refused(.badEnvironmentKeyIdInToken))?.count } }
            var counts: [Int] = []
            for await count in group { if let count { counts.append(count) } }
            return counts
        }
        #expect(counts.sorted() == Array(1...n))
        #expect(standing.current?.count == n)
    }

    @Test("APNs's answer body with either spelling of the environment refusal refuses the credential, and the reason is kept as sent")
    func bothSpellings() {
        for spelling in ["BadEnvironmentKeyIdInToken", "BadEnvironmentKeyInToken"] {
            let answer = APNsResponse.parse(status: 403, apnsIDHeader: nil, retryAfterHeader: nil, body: Array(#"{"reason":"\#(spelling)"}"#.utf8))
            #expect(APNsCredentialStanding.isCredentialRefusal(answer.reason), "\(spelling)")
            #expect(answer.classification == .permanent, "\(spelling): rejected, not a dead token")
            let standing = APNsCredentialStanding()
            #expect(standing.observe(answer) == APNsCredentialStanding.Refusal(reason: spelling, count: 1))
        }
    }
}
