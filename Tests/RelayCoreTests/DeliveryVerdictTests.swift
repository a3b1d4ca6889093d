import APNsCore
import Foundation
import Testing
@testable import RelayCore

/// What a result says of APNs' final outcome: `APNsOutcome.deliveryStatus`, `resultReason` and `tokenDeadSince(now:)`.
@Suite("APNs outcomes as result statuses")
struct DeliveryVerdictTests {
    func outcome(_ last: APNsAttemptResult, attempts: Int) -> APNsOutcome {
        APNsOutcome(last, attempts: attempts, apnsID: UUID())
    }

    func answer(_ status: Int, _ reason: APNsReason? = nil, uniqueID: String? = nil, attempts: Int = 1) -> APNsOutcome {
        let response = APNsResponse(status: status, reason: reason, timestamp: status == 410 ? 7 : nil, uniqueID: uniqueID)
        return APNsOutcome(.response(response), attempts: attempts, apnsID: UUID())
    }

    @Test("no connection within relay.max_retry_s is failed, naming it; an apns-expiration passed before sending is expired")
    func waits() {
        let unreachable = outcome(.failure(.noConnection), attempts: 0)
        #expect(unreachable.deliveryStatus == .failed && unreachable.resultReason == "noConnection" && unreachable.httpStatus == nil)
        let expired = outcome(.failure(.expired), attempts: 0)
        #expect(expired.deliveryStatus == .expired && expired.resultReason == "apns-expiration passed before it could be sent")
        #expect(!unreachable.isAbandoned && !expired.isAbandoned)
    }

    @Test("a topic no credential sends for is rejected, NoCredentialForTopic, never sent")
    func noCredential() {
        let unsigned = outcome(.failure(.noCredential), attempts: 0)
        #expect(unsigned.deliveryStatus == .rejected && unsigned.resultReason == "NoCredentialForTopic" && unsigned.tokenDeadSince(now: 5) == nil)
    }

    @Test("a cancelled send is abandoned: the caller gave it up, APNs did not fail it")
    func cancelled() {
        let abandoned = outcome(.failure(.cancelled), attempts: 1)
        #expect(abandoned.isAbandoned && abandoned.attempts == 1 && abandoned.httpStatus == nil)
        #expect(APNsOutcome.abandoned(apnsID: UUID()).isAbandoned)
    }

    @Test("APNs' answers: delivered; 410 unregistered and BadDeviceToken rejected, both dead tokens; other refusals rejected; retries spent failed")
    func answers() {
        let delivered = answer(200)
        #expect(delivered.deliveryStatus == .delivered && delivered.resultReason == nil && delivered.tokenDeadSince(now: 5) == nil)
        let gone = answer(410, .unregistered)
        #expect(gone.deliveryStatus == .unregistered && gone.resultReason == "Unregistered" && gone.tokenDeadSince(now: 5) == 7)
        let unknown = answer(400, .badDeviceToken)
        #expect(unknown.deliveryStatus == .rejected && unknown.resultReason == "BadDeviceToken" && unknown.tokenDeadSince(now: 5) == 5)
        let badTopic = answer(400, .badTopic)
        #expect(badTopic.deliveryStatus == .rejected && badTopic.resultReason == "BadTopic" && badTopic.tokenDeadSince(now: 5) == nil)
        let unavailable = answer(503, .serviceUnavailable, attempts: 9)
        #expect(unavailable.deliveryStatus == .failed && unavailable.resultReason == "ServiceUnavailable" && unavailable.httpStatus == 503)
    }
}
