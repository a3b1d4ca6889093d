import Foundation

/// Bounds the `push.devices` records on their way from the registry reader to the driver's loop.
///
/// The reader hands records over faster than the loop applies them while the registry loads
/// (1,000,000 registrations at start-up), and each waiting record holds its bytes: without a
/// bound they piled up in the inbox (hundreds of MB at the peak, and fragmented memory after).
/// The reader runs on a thread of its own (never the cooperative pool), so it may block here.
final class DeviceRecordWindow: @unchecked Sendable {
    // @unchecked: `free` and `closed` are read and written only with `condition` locked.
    // (Not a DispatchSemaphore: libdispatch traps when one is freed below its initial value,
    // which a window freed with records still in flight would be.)
    private let condition = NSCondition()
    private var free: Int
    private var closed = false

    init(records: Int) {
        free = records
    }

    /// Waits (blocking the reader's thread) for room for one more record; false once closed.
    func acquire() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while free == 0 && !closed { condition.wait() }
        guard !closed else { return false }
        free -= 1
        return true
    }

    /// The loop applied a record.
    func release() {
        condition.lock()
        free += 1
        condition.signal()
        condition.unlock()
    }

    /// Nothing more is taken: a reader waiting for room stops waiting.
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }
}
