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
}
