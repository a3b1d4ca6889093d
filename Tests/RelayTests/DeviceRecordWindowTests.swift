import Dispatch
import Testing

@testable import Relay

@Suite("The window between the registry reader and the loop")
struct DeviceRecordWindowTests {
    @Test("a reader gets as many records as the window holds, then waits for the loop to apply one")
    func boundsRecordsInFlight() async {
        let window = DeviceRecordWindow(records: 3)
        #expect(window.acquire() && window.acquire() && window.acquire())
        let fourth = LockedBox(false)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            // The reader's own thread, as in production: it may block.
            DispatchQueue.global().async {
                let got = window.acquire()
                fourth.withLock { $0 = got }
                done.resume()
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(300)) {
                #expect(!fourth.withLock { $0 }, "the fourth record waited while three were in flight")
                window.release()
            }
        }
        #expect(fourth.withLock { $0 }, "released by the loop applying one")
    }

    @Test("closing the window releases a waiting reader, and it takes nothing more")
    func closeReleasesTheReader() async {
        let window = DeviceRecordWindow(records: 1)
        #expect(window.acquire())
        let acquired = LockedBox(true)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                let got = window.acquire()
                acquired.withLock { $0 = got }
                done.resume()
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(200)) { window.close() }
        }
        #expect(!acquired.withLock { $0 })
        window.release()
        #expect(!window.acquire(), "closed: no more records")
    }
}
