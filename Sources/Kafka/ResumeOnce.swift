import Dispatch
import Synchronization

/// A continuation resumed by whichever of several parties comes first (an answer or a timer);
/// the later ones do nothing. Lets a wait be bounded without a task racing it.
final class ResumeOnce<Value: Sendable>: Sendable {
    private let continuation: Mutex<CheckedContinuation<Value, Never>?>

    init(_ continuation: CheckedContinuation<Value, Never>) {
        self.continuation = Mutex(continuation)
    }

    func resume(_ value: Value) {
        continuation.withLock { pending in
            defer { pending = nil }
            return pending
        }?.resume(returning: value)
    }
}

extension Duration {
    /// The duration as Dispatch's interval (nanoseconds, clamped).
    var dispatchInterval: DispatchTimeInterval {
        let (seconds, attoseconds) = components
        let nanoseconds = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !nanoseconds.overflow else { return .never }
        return .nanoseconds(Int(clamping: nanoseconds.partialValue + attoseconds / 1_000_000_000))
    }
}
