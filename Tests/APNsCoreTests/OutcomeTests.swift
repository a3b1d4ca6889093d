@testable import APNsCore
import Foundation
import Testing

/// APNs' answers read into reasons and classifications.
@Suite("APNs answers")
struct OutcomeTests {
    @Test("reasons round-trip and classify")
    func reasons() {
        #expect(APNsReason.allCases.count == 39)
        for reason in APNsReason.allCases {
            #expect(APNsReason(rawValue: reason.rawValue) == reason)
        }
        #expect(APNsReason(rawValue: "Whatever") == .other("Whatever"))
        let unregistered = APNsResponse.parse(status: 410, apnsIDHeader: nil, retryAfterHeader: nil, body: Array(#"{"reason":"Unregistered","timestamp":1700000000000}"#.utf8))
        #expect(unregistered.reason == .unregistered)
        #expect(unregistered.timestamp == 1_700_000_000_000)
        #expect(unregistered.classification == .tokenDead)
        #expect(APNsResponse(status: 400, reason: .badDeviceToken).classification == .tokenDead)
        #expect(APNsResponse(status: 400, reason: .deviceTokenNotForTopic).classification == .tokenDead)
        #expect(APNsResponse(status: 400, reason: .badTopic).classification == .permanent)
        #expect(APNsResponse(status: 429, reason: .tooManyRequests).classification == .retryable)
        #expect(APNsResponse(status: 500, reason: .internalServerError).classification == .retryable)
        #expect(APNsResponse(status: 503, reason: .serviceUnavailable).classification == .retryable)
        #expect(APNsResponse(status: 200).classification == .delivered)
        // Broadcasts: a deleted channel is gone for good, and is not a dead device token.
        #expect(APNsReason.channelNotRegistered.httpStatus == 404)
        #expect(APNsResponse(status: 404, reason: .channelNotRegistered).classification == .permanent)
        #expect(APNsResponse(status: 400, reason: .badChannelId).classification == .permanent)
        #expect(APNsAttemptResult.failure(.connectionLost).classification == .retryable)
        #expect(APNsAttemptResult.failure(.deadlineExceeded).classification == .retryable)
        let retry = APNsResponse.parse(status: 429, apnsIDHeader: nil, retryAfterHeader: "3", body: Array(#"{"reason":"TooManyRequests"}"#.utf8))
        #expect(retry.retryAfterSeconds == 3)
    }

    @Test("apns-unique-id is kept when it is printable ASCII of at most 128 bytes, on any answer")
    func uniqueID() {
        let id = "a6b1c2d3-0000-4000-8000-00000000abcd"
        #expect(APNsResponse.parse(status: 200, apnsIDHeader: nil, retryAfterHeader: nil, uniqueIDHeader: id, body: []).uniqueID == id)
        #expect(APNsResponse.parse(status: 400, apnsIDHeader: nil, retryAfterHeader: nil, uniqueIDHeader: id,
                                   body: Array(#"{"reason":"BadTopic"}"#.utf8)).uniqueID == id)
        for odd in ["", "a b", "é", String(repeating: "a", count: 129), "a\u{7f}"] {
            #expect(APNsResponse.parse(status: 200, apnsIDHeader: nil, retryAfterHeader: nil, uniqueIDHeader: odd, body: []).uniqueID == nil)
        }
        #expect(APNsResponse.parse(status: 200, apnsIDHeader: nil, retryAfterHeader: nil, body: []).uniqueID == nil)
    }

    func answer(_ status: Int, _ reason: APNsReason? = nil, uniqueID: String? = nil, attempts: Int = 1) -> APNsOutcome {
        let response = APNsResponse(status: status, reason: reason, timestamp: status == 410 ? 7 : nil, uniqueID: uniqueID)
        return APNsOutcome(.response(response), attempts: attempts, apnsID: UUID())
    }

    @Test("only BadDeviceToken (HTTP/2) or the legacy invalid token (status 8) send a device notification to the other environment")
    func whatIsTriedElsewhere() throws {
        #expect(answer(400, .badDeviceToken).isBadDeviceToken)
        #expect(!answer(400, .deviceTokenNotForTopic).isBadDeviceToken && !answer(410, .unregistered).isBadDeviceToken)
        let legacy = APNsResponse(status: 8, legacyStatus: .invalidToken)
        #expect(APNsOutcome(.response(legacy), attempts: 1, apnsID: UUID()).isBadDeviceToken)
    }

    @Test("apns-unique-id is carried on every kind of answer that had one")
    func uniqueIDOnEveryAnswer() {
        #expect(answer(200, uniqueID: "x").uniqueID == "x")
        #expect(answer(400, .badTopic, uniqueID: "y").uniqueID == "y")
        #expect(answer(200).uniqueID == nil)
    }
}
