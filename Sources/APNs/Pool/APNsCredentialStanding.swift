public import APNsCore
import Synchronization

/// Whether APNs accepts a pool's credential, as its answers show: a key limited to another environment
/// (`403 BadEnvironmentKeyIdInToken`, or `BadEnvironmentKeyInToken` as APNs has also spelled it), to other topics
/// (`403 UnrelatedKeyIdInToken`), a key or certificate APNs does not know (`InvalidProviderToken`, `BadCertificate`, `BadCertificateEnvironment`). These are configuration errors:
/// no retry or other device helps, so the pool is marked refused until an answer shows the credential accepted
/// again. Readiness reports a refused pool; the supervisor counts and logs each refusal.
public final class APNsCredentialStanding: Sendable {
    /// A refusal: Apple's reason and how many answers gave it since the credential was last accepted.
    public struct Refusal: Sendable, Equatable {
        public var reason: String
        public var count: Int
    }

    private let refusal = Mutex<Refusal?>(nil)

    public init() {}

    /// The reasons that say the credential, not the notification, is refused.
    public static func isCredentialRefusal(_ reason: APNsReason?) -> Bool {
        switch reason {
        case .badEnvironmentKeyIdInToken?, .badEnvironmentKeyInToken?, .unrelatedKeyIdInToken?, .invalidProviderToken?,
             .badCertificate?, .badCertificateEnvironment?: true
        default: false
        }
    }

    /// Reads one final answer: a credential refusal marks the pool refused and returns the refusal (its count tells a
    /// first one, which is logged, from repeats); an answer that got past authentication clears it.
    public func observe(_ response: APNsResponse) -> Refusal? {
        if Self.isCredentialRefusal(response.reason) {
            let reason = response.reason?.rawValue ?? ""
            return refusal.withLock { refusal in
                var next = refusal?.reason == reason ? refusal! : Refusal(reason: reason, count: 0)
                next.count += 1
                refusal = next
                return next
            }
        }
        // Only 403 answers are about the credential; anything else means APNs took it.
        guard response.status != 403 else { return nil }
        refusal.withLock { if $0 != nil { $0 = nil } }
        return nil
    }

    /// The refusal in force, if the pool's last final answer about its credential refused it.
    public var current: Refusal? { refusal.withLock { $0 } }
}
