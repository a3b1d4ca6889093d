import APNs
import Foundation
import Testing
@testable import Relay

/// What a result says of APNs' final outcome (`APNsOutcome.deliveryStatus`, `resultReason`,
/// `tokenDeadSince(now:)`), and how the sender combines a retry in the other environment.
@Suite("APNs outcomes as result statuses")
struct SenderOutcomeTests {
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

    @Test("refused with BadDeviceToken, then delivered in the other environment: delivered, naming that environment, both sends counted")
    func deliveredInTheOtherEnvironment() {
        let outcome = APNsSupervisorSender.outcome(after: answer(400, .badDeviceToken), retriedIn: .sandbox, as: answer(200, uniqueID: "u-1"))
        #expect(outcome.deliveryStatus == .delivered && outcome.httpStatus == 200 && outcome.attempts == 2)
        #expect(outcome.uniqueID == "u-1" && outcome.environment == .sandbox)
        #expect(outcome.isDeliveredInOtherEnvironment && outcome.tokenDeadSince(now: 5) == nil)
    }

    @Test("refused in both environments: the token is dead (rejected, BadDeviceToken, reported with the time of the answer)")
    func refusedInBoth() {
        let outcome = APNsSupervisorSender.outcome(after: answer(400, .badDeviceToken), retriedIn: .production, as: answer(400, .badDeviceToken))
        #expect(outcome.deliveryStatus == .rejected && outcome.resultReason == "BadDeviceToken" && outcome.attempts == 2)
        #expect(outcome.tokenDeadSince(now: 5) == 5 && outcome.environment == .production)
        #expect(!outcome.isDeliveredInOtherEnvironment)
    }

    @Test("another final answer in the other environment is reported as it is (a 410 there: unregistered); an abandoned retry abandons the send")
    func otherAnswers() {
        let gone = APNsSupervisorSender.outcome(after: answer(400, .badDeviceToken), retriedIn: .sandbox, as: answer(410, .unregistered))
        #expect(gone.deliveryStatus == .unregistered && gone.resultReason == "Unregistered" && gone.attempts == 2)
        #expect(gone.tokenDeadSince(now: 5) == 7 && gone.environment == .sandbox)
        let cancelled = APNsOutcome(classification: .retryable, lastAttempt: .failure(.cancelled), attempts: 0, apnsID: UUID())
        let abandoned = APNsSupervisorSender.outcome(after: answer(400, .badDeviceToken), retriedIn: .sandbox, as: cancelled)
        #expect(abandoned.isAbandoned && abandoned.attempts == 1 && abandoned.environment == nil)
    }

    @Test("only BadDeviceToken (HTTP/2) or the legacy invalid token (status 8) send a device notification to the other environment")
    func whatIsTriedElsewhere() throws {
        #expect(answer(400, .badDeviceToken).isBadDeviceToken)
        #expect(!answer(400, .deviceTokenNotForTopic).isBadDeviceToken && !answer(410, .unregistered).isBadDeviceToken)
        let legacy = APNsResponse(status: 8, legacyStatus: .invalidToken)
        #expect(APNsOutcome(.response(legacy), attempts: 1, apnsID: UUID()).isBadDeviceToken)
    }

    @Test("apns-unique-id is carried on every kind of answer that had one")
    func uniqueID() {
        #expect(answer(200, uniqueID: "x").uniqueID == "x")
        #expect(answer(400, .badTopic, uniqueID: "y").uniqueID == "y")
        #expect(answer(200).uniqueID == nil)
    }
}
