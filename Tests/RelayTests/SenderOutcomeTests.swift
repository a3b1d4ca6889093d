import APNs
import Foundation
import Testing
@testable import Relay

@Suite("APNs outcomes as result statuses")
struct SenderOutcomeTests {
    func outcome(_ last: APNsAttemptResult, attempts: Int) -> SendOutcome {
        APNsSupervisorSender.outcome(
            of: APNsOutcome(classification: last.classification, lastAttempt: last, attempts: attempts, apnsID: UUID()), now: 0)
    }

    @Test("no connection within relay.max_retry_s is failed, naming it; an apns-expiration passed before sending is expired")
    func waits() {
        #expect(outcome(.failure(.noConnection), attempts: 0)
            == SendOutcome(status: .failed, httpStatus: nil, reason: "noConnection", attempts: 0))
        #expect(outcome(.failure(.expired), attempts: 0)
            == SendOutcome(status: .expired, httpStatus: nil, reason: "apns-expiration passed before it could be sent", attempts: 0))
    }

    @Test("a cancelled send is abandoned (failed with reason cancelled): the caller gave it up, APNs did not fail it")
    func cancelled() {
        let abandoned = outcome(.failure(.cancelled), attempts: 1)
        #expect(abandoned.isAbandoned)
        #expect(abandoned.status == .failed && abandoned.reason == "cancelled" && abandoned.attempts == 1 && abandoned.httpStatus == nil)
    }

    func answer(_ status: Int, _ reason: APNsReason? = nil, uniqueID: String? = nil, attempts: Int = 1) -> APNsOutcome {
        let response = APNsResponse(status: status, reason: reason, timestamp: status == 410 ? 7 : nil, uniqueID: uniqueID)
        return APNsOutcome(classification: response.classification, lastAttempt: .response(response), attempts: attempts, apnsID: UUID())
    }

    @Test("refused with BadDeviceToken, then delivered in the other environment: delivered, naming that environment, both sends counted")
    func deliveredInTheOtherEnvironment() {
        let outcome = APNsSupervisorSender.outcome(after: answer(400, .badDeviceToken), retriedIn: .sandbox,
                                                   as: answer(200, uniqueID: "u-1"), now: 5)
        #expect(outcome == SendOutcome(status: .delivered, httpStatus: 200, reason: nil, attempts: 2, apnsUniqueID: "u-1", environment: .sandbox))
        #expect(outcome.isDeliveredInOtherEnvironment && outcome.tokenDeadSince == nil)
    }

    @Test("refused in both environments: the token is dead (rejected, BadDeviceToken, reported with the time of the answer)")
    func refusedInBoth() {
        let outcome = APNsSupervisorSender.outcome(after: answer(400, .badDeviceToken), retriedIn: .production, as: answer(400, .badDeviceToken), now: 5)
        #expect(outcome == SendOutcome(status: .rejected, httpStatus: 400, reason: "BadDeviceToken", attempts: 2, tokenDeadSince: 5, environment: .production))
        #expect(!outcome.isDeliveredInOtherEnvironment)
    }

    @Test("another final answer in the other environment is reported as it is (a 410 there: unregistered); an abandoned retry abandons the send")
    func otherAnswers() {
        let gone = APNsSupervisorSender.outcome(after: answer(400, .badDeviceToken), retriedIn: .sandbox, as: answer(410, .unregistered), now: 5)
        #expect(gone == SendOutcome(status: .unregistered, httpStatus: 410, reason: "Unregistered", attempts: 2, tokenDeadSince: 7, environment: .sandbox))
        let cancelled = APNsOutcome(classification: .retryable, lastAttempt: .failure(.cancelled), attempts: 0, apnsID: UUID())
        let abandoned = APNsSupervisorSender.outcome(after: answer(400, .badDeviceToken), retriedIn: .sandbox, as: cancelled, now: 5)
        #expect(abandoned.isAbandoned && abandoned.attempts == 1 && abandoned.environment == nil)
    }

    @Test("only BadDeviceToken (HTTP/2) or the legacy invalid token (status 8) send a device notification to the other environment")
    func whatIsTriedElsewhere() throws {
        #expect(answer(400, .badDeviceToken).isBadDeviceToken)
        #expect(!answer(400, .deviceTokenNotForTopic).isBadDeviceToken && !answer(410, .unregistered).isBadDeviceToken)
        let legacy = APNsResponse(status: 8, legacyStatus: .invalidToken)
        #expect(APNsOutcome(classification: legacy.classification, lastAttempt: .response(legacy), attempts: 1, apnsID: UUID()).isBadDeviceToken)
    }

    @Test("apns-unique-id is carried on every kind of answer that had one")
    func uniqueID() {
        #expect(APNsSupervisorSender.outcome(of: answer(200, uniqueID: "x"), now: 0).apnsUniqueID == "x")
        #expect(APNsSupervisorSender.outcome(of: answer(400, .badTopic, uniqueID: "y"), now: 0).apnsUniqueID == "y")
        #expect(APNsSupervisorSender.outcome(of: answer(200), now: 0).apnsUniqueID == nil)
    }
}
