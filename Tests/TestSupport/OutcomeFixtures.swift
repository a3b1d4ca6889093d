package import APNsCore
package import Foundation

/// APNs' final outcomes as the engine's tests hand them over (the engine never reads their `apns-id`).
extension APNsOutcome {
    package static let testID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1))

    /// A 200, after `attempts` sends; with Apple's `apns-unique-id`; answered in `environment` when not its own.
    package static func delivered(attempts: Int = 1, uniqueID: String? = nil, in environment: APNsEnvironment? = nil) -> APNsOutcome {
        var outcome = APNsOutcome(.response(APNsResponse(status: 200, uniqueID: uniqueID)), attempts: attempts, apnsID: testID)
        outcome.environment = environment
        return outcome
    }

    /// A final refusal: `status` with `reason` (and APNs' `timestamp` for a 410).
    package static func refused(_ status: Int, _ reason: APNsReason, attempts: Int = 1, timestamp: Int64? = nil) -> APNsOutcome {
        APNsOutcome(.response(APNsResponse(status: status, reason: reason, timestamp: timestamp)), attempts: attempts, apnsID: testID)
    }

    /// A send its caller gave up.
    package static func abandoned() -> APNsOutcome { .abandoned(apnsID: testID) }
}
