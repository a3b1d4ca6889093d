import APNs
import NIOCore
import Testing

@Suite("Binary unconfirmed window (no sockets)")
struct APNsBinaryWindowTests {
    let t0 = NIODeadline.uptimeNanoseconds(5_000_000_000)

    func window(capacity: Int = 200, quiet: Duration = .milliseconds(500), afterWrites: Int = 1_000) -> APNsBinaryWindow {
        APNsBinaryWindow(configuration: .init(capacity: capacity, quietPeriod: quiet, confirmAfterWrites: afterWrites))
    }

    /// Sends tickets 0..<n with identifiers 1000+ticket.
    func sendAll(_ window: inout APNsBinaryWindow, _ n: Int, at now: NIODeadline) -> [UInt32] {
        (0..<n).map { window.send(ticket: UInt64($0), preferredIdentifier: 1_000 + UInt32($0), now: now)! }
    }

    @Test("100 in one batch, #37 answers 8: 0-36 delivered, 37 answered 8, 38-99 dropped; the window closes")
    func invalidTokenMidBatch() {
        var window = window()
        let ids = sendAll(&window, 100, at: t0)
        let resolved = window.received(APNsBinaryErrorResponse(status: .invalidToken, identifier: ids[37]))
        #expect(resolved.map(\.ticket) == (0..<100).map(UInt64.init))
        #expect(resolved[..<37].allSatisfy { $0.resolution == .delivered })
        #expect(resolved[37].resolution == .answered(.invalidToken))
        #expect(resolved[38...].allSatisfy { $0.resolution == .dropped })
        #expect(window.count == 0)
        #expect(window.isClosed)
        #expect(window.send(ticket: 100, preferredIdentifier: 1, now: t0) == nil)
        #expect(window.closed().isEmpty)
    }

    @Test("shutdown (10) names the last one processed: it and the earlier ones delivered, later ones dropped")
    func shutdown() {
        var window = window()
        let ids = sendAll(&window, 10, at: t0)
        let resolved = window.received(APNsBinaryErrorResponse(status: .shutdown, identifier: ids[4]))
        #expect(resolved[..<4].allSatisfy { $0.resolution == .delivered })
        #expect(resolved[4].resolution == .answered(.shutdown))
        #expect(APNsBinaryStatus.shutdown.classification == .delivered)
        #expect(resolved[5...].allSatisfy { $0.resolution == .dropped })
        #expect(resolved.count == 10)
    }

    @Test("an error for an identifier no longer in the window drops everything still in it")
    func unknownIdentifier() {
        var window = window(quiet: .milliseconds(100))
        let ids = sendAll(&window, 3, at: t0)
        let confirmed = window.confirm(now: t0 + .milliseconds(100))
        #expect(confirmed.map(\.ticket) == [0, 1, 2])
        let later = window.send(ticket: 3, preferredIdentifier: 7, now: t0 + .milliseconds(150))!
        let resolved = window.received(APNsBinaryErrorResponse(status: .invalidToken, identifier: ids[1]))
        #expect(resolved == [.init(ticket: 3, identifier: later, resolution: .dropped)])
    }

    @Test("a close without an error response leaves every unconfirmed notification in doubt")
    func abruptClose() {
        var window = window()
        _ = sendAll(&window, 5, at: t0)
        _ = window.send(ticket: 5, preferredIdentifier: 1, now: t0 + .milliseconds(400))
        let confirmed = window.confirm(now: t0 + .milliseconds(600))
        #expect(confirmed.map(\.ticket) == [0, 1, 2, 3, 4])
        let resolved = window.closed()
        #expect(resolved.map(\.ticket) == [5])
        #expect(resolved.allSatisfy { $0.resolution == .inDoubt })
        #expect(window.isClosed)
        #expect(window.received(APNsBinaryErrorResponse(status: .invalidToken, identifier: 1)).isEmpty)
    }

    @Test("quiet period: a notification counts as delivered once the period after it passed, oldest first")
    func quietPeriod() {
        var window = window(quiet: .milliseconds(500))
        _ = window.send(ticket: 0, preferredIdentifier: 0, now: t0)
        _ = window.send(ticket: 1, preferredIdentifier: 1, now: t0 + .milliseconds(200))
        #expect(window.nextConfirmation == t0 + .milliseconds(500))
        #expect(window.confirm(now: t0 + .milliseconds(499)).isEmpty)
        #expect(window.confirm(now: t0 + .milliseconds(500)).map(\.ticket) == [0])
        #expect(window.nextConfirmation == t0 + .milliseconds(700))
        #expect(window.confirm(now: t0 + .milliseconds(700)).map(\.ticket) == [1])
        #expect(window.nextConfirmation == nil)
    }

    @Test("N later writes: a notification counts as delivered once N more were sent after it")
    func laterWrites() {
        var window = window(quiet: .seconds(60), afterWrites: 3)
        _ = sendAll(&window, 3, at: t0)
        #expect(window.confirm(now: t0).isEmpty)
        _ = window.send(ticket: 3, preferredIdentifier: 9, now: t0)
        #expect(window.confirm(now: t0).map(\.ticket) == [0])
        _ = window.send(ticket: 4, preferredIdentifier: 10, now: t0)
        _ = window.send(ticket: 5, preferredIdentifier: 11, now: t0)
        #expect(window.confirm(now: t0).map(\.ticket) == [1, 2])
        #expect(window.count == 3)
    }

    @Test("capacity bounds the window; confirmation makes room")
    func capacity() {
        var window = window(capacity: 3, quiet: .milliseconds(10))
        _ = sendAll(&window, 3, at: t0)
        #expect(!window.hasRoom)
        #expect(window.send(ticket: 9, preferredIdentifier: 9, now: t0) == nil)
        _ = window.confirm(now: t0 + .milliseconds(10))
        #expect(window.send(ticket: 9, preferredIdentifier: 9, now: t0 + .milliseconds(10)) == 9)
    }

    @Test("identifiers are unique within the window: a collision probes upward, and a freed one is reused")
    func identifiers() {
        var window = window(quiet: .milliseconds(10))
        #expect(window.send(ticket: 0, preferredIdentifier: 42, now: t0) == 42)
        #expect(window.send(ticket: 1, preferredIdentifier: 42, now: t0) == 43)
        #expect(window.send(ticket: 2, preferredIdentifier: 42, now: t0) == 44)
        #expect(window.send(ticket: 3, preferredIdentifier: UInt32.max, now: t0) == UInt32.max)
        #expect(window.send(ticket: 4, preferredIdentifier: UInt32.max, now: t0) == 0)
        _ = window.confirm(now: t0 + .milliseconds(10))
        #expect(window.send(ticket: 5, preferredIdentifier: 42, now: t0 + .milliseconds(10)) == 42)
        // The error names the identifier assigned after the probe.
        let resolved = window.received(APNsBinaryErrorResponse(status: .invalidToken, identifier: 42))
        #expect(resolved == [.init(ticket: 5, identifier: 42, resolution: .answered(.invalidToken))])
    }

    @Test("every split point of a batch resolves each notification exactly once", arguments: [1, 2, 7, 50])
    func exhaustive(size: Int) {
        for failing in 0..<size {
            for status in [APNsBinaryStatus.invalidToken, .shutdown, .processingError] {
                var window = window(capacity: 100)
                let ids = sendAll(&window, size, at: t0)
                let resolved = window.received(APNsBinaryErrorResponse(status: status, identifier: ids[failing]))
                #expect(Set(resolved.map(\.ticket)).count == size)
                #expect(resolved.filter { $0.resolution == .delivered }.count == failing)
                #expect(resolved.filter { $0.resolution == .dropped }.count == size - failing - 1)
                #expect(resolved[failing].resolution == .answered(status))
            }
        }
    }
}
