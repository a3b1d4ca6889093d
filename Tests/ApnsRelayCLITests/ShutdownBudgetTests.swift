import Dispatch
import Foundation
import Logging
import Synchronization
import TestSupport
import Testing

@testable import apns_relay

/// A log handler whose every line blocks until released, as a write to a full pipe nobody reads does.
private struct BlockedLogHandler: LogHandler {
    let release: DispatchSemaphore
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        release.wait()
        release.signal()
    }
}

@Suite("The stop's budget and its watchdog")
struct ShutdownBudgetTests {
    @Test("past the budget the watchdog ends the process even when the log cannot take its line (a full log pipe)")
    func watchdogDoesNotWaitForTheLog() async throws {
        let release = DispatchSemaphore(value: 0)
        let ended = Mutex<[Int32]>([])
        let budget = ShutdownBudget(timeout: .milliseconds(100), logger: Logger(label: "blocked") { _ in BlockedLogHandler(release: release) },
                                    end: { status in ended.withLock { $0.append(status) } })
        budget.start()
        budget.start()  // armed once
        #expect(await waitUntil(timeout: .seconds(30), every: .milliseconds(20)) { !ended.withLock { $0 }.isEmpty })
        try await Task.sleep(for: .milliseconds(300))
        #expect(ended.withLock { $0 } == [1])
        release.signal()
    }

    @Test("the budget runs from the first start; before it, all of it is left")
    func remaining() {
        let budget = ShutdownBudget(timeout: .seconds(60), logger: Logger(label: "test"), end: { _ in })
        #expect(budget.remaining == .seconds(60))
        budget.start()
        #expect(budget.remaining <= .seconds(60) && budget.remaining > .seconds(50))
    }
}
