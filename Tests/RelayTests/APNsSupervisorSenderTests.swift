import APNs
import Foundation
import Testing
@testable import Relay

/// How the sender combines a device notification's retry in the other environment with the first answer.
@Suite("The sender: a BadDeviceToken retried in the other environment")
struct APNsSupervisorSenderTests {
    func answer(_ status: Int, _ reason: APNsReason? = nil, uniqueID: String? = nil, attempts: Int = 1) -> APNsOutcome {
        let response = APNsResponse(status: status, reason: reason, timestamp: status == 410 ? 7 : nil, uniqueID: uniqueID)
        return APNsOutcome(.response(response), attempts: attempts, apnsID: UUID())
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
}
