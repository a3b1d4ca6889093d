import APNsCore
import Testing

/// The legacy interface's status codes, read as the HTTP/2 answers' classifications.
@Suite("Legacy binary statuses")
struct BinaryStatusTests {
    @Test("status classification: 8 token dead, 10 and 0 processed, the rest permanent")
    func classification() {
        #expect(APNsBinaryStatus.invalidToken.response.classification == .tokenDead)
        #expect(APNsBinaryStatus.invalidToken.response.reason == .other("InvalidToken"))
        #expect(APNsBinaryStatus.shutdown.response.classification == .delivered)
        #expect(APNsBinaryStatus.noErrors.response.classification == .delivered)
        for status in [APNsBinaryStatus.processingError, .missingDeviceToken, .missingTopic, .missingPayload, .invalidTokenSize,
                       .invalidTopicSize, .invalidPayloadSize, .unknown, .other(9)] {
            #expect(status.response.classification == .permanent, "\(status)")
        }
        let outcome = APNsOutcome(classification: .tokenDead, lastAttempt: .response(APNsBinaryStatus.invalidToken.response), attempts: 1, apnsID: .init())
        #expect(outcome.httpStatus == nil)
        #expect(outcome.legacyStatus == .invalidToken)
    }

}
