import Foundation
import Synchronization
import RelayCore

/// Bounds the `push.devices` records on their way from the registry reader to the driver's loop.
///
/// The reader hands records over faster than the loop applies them while the registry loads
/// (1,000,000 registrations at start-up), and each waiting record holds its bytes: without a
/// bound they piled up in the inbox (hundreds of MB at the peak, and fragmented memory after).
/// The reader runs on a thread of its own (never the cooperative pool), so it may block here.
final class DeviceRecordWindow: Sendable {
    // Not a DispatchSemaphore: libdispatch traps when one is freed below its initial value, which a
    // window freed with records still in flight would be. A full window is rare (start-up only), so
    // the reader polls every millisecond instead of waiting on a condition.
    private let state: Mutex<(free: Int, closed: Bool)>

    init(records: Int) {
        state = Mutex((records, false))
    }

    /// Waits (blocking the reader's thread) for room for one more record; false once closed.
    func acquire() -> Bool {
        while true {
            let taken = state.withLock { state -> Bool? in
                if state.closed { return false }
                guard state.free > 0 else { return nil }
                state.free -= 1
                return true
            }
            if let taken { return taken }
            usleep(1_000)
        }
    }

    /// The loop applied a record.
    func release() {
        state.withLock { $0.free += 1 }
    }

    /// Nothing more is taken: a reader waiting for room stops waiting.
    func close() {
        state.withLock { $0.closed = true }
    }
}
