import APNs
import NIOCore
import Testing

@Suite("HTTP/2 connection state machine (no sockets)")
struct APNsHTTP2ConnectionStateMachineTests {
    let t0 = NIODeadline.uptimeNanoseconds(1_000_000_000)

    @Test("the first SETTINGS makes the connection ready with its limit, or 100 without one; later ones report changes only")
    func settings() {
        var machine = APNsHTTP2ConnectionStateMachine()
        #expect(machine.settingsReceived(maxConcurrentStreams: nil) == .connectionReady(maxConcurrentStreams: 100))
        #expect(machine.settingsReceived(maxConcurrentStreams: nil) == .none)
        #expect(machine.settingsReceived(maxConcurrentStreams: 500) == .maxConcurrentStreamsChanged(500))
        #expect(machine.maxConcurrentStreams == 500)

        var limited = APNsHTTP2ConnectionStateMachine()
        #expect(limited.settingsReceived(maxConcurrentStreams: 1) == .connectionReady(maxConcurrentStreams: 1))
        #expect(limited.settingsReceived(maxConcurrentStreams: 1000) == .maxConcurrentStreamsChanged(1000))
    }

    @Test("a failed handshake is failed once; the close after it is reported to the delegate, once")
    func handshakeFailure() {
        var machine = APNsHTTP2ConnectionStateMachine()
        #expect(machine.handshakeFailed() == true)
        #expect(machine.handshakeFailed() == false)
        #expect(machine.channelInactive() == .reportClosed)
        #expect(machine.channelInactive() == .none)
        #expect(machine.handlerRemoved() == false)
    }

    @Test("a channel that closes before the first SETTINGS fails the handshake and reports no close")
    func closedDuringHandshake() {
        var machine = APNsHTTP2ConnectionStateMachine()
        #expect(machine.channelInactive() == .failHandshake)
        #expect(machine.isInactive)
        #expect(machine.handlerRemoved() == false)

        var removed = APNsHTTP2ConnectionStateMachine()
        #expect(removed.handlerRemoved() == true)
        #expect(removed.isInactive)
        #expect(removed.handshakeFailed() == false)
    }

    @Test("an established connection reports its close once, and the handler's removal fails nothing")
    func closeAfterReady() {
        var machine = APNsHTTP2ConnectionStateMachine()
        _ = machine.settingsReceived(maxConcurrentStreams: 10)
        #expect(machine.handshakeFailed() == false)
        #expect(!machine.isInactive)
        #expect(machine.channelInactive() == .reportClosed)
        #expect(machine.handlerRemoved() == false)
        #expect(machine.channelInactive() == .none)
    }

    @Test("one PING at a time, numbered; only its own acknowledgement answers it; none once inactive")
    func ping() {
        var machine = APNsHTTP2ConnectionStateMachine()
        #expect(machine.pingDue() == 1)
        #expect(machine.pingDue() == nil)
        #expect(machine.pingAcknowledged(7) == false)
        #expect(machine.pingDue() == nil)
        #expect(machine.pingAcknowledged(1) == true)
        #expect(machine.pingAcknowledged(1) == false)
        #expect(machine.pingDue() == 2)
        #expect(machine.pingAcknowledged(2) == true)
        _ = machine.channelInactive()
        #expect(machine.pingDue() == nil)
    }

    @Test("the deadline timer is armed for the earliest deadline only, and again after it fired or the channel closed")
    func deadlineTimer() {
        var machine = APNsHTTP2ConnectionStateMachine()
        #expect(machine.armDeadlineTimer(for: t0 + .seconds(5)) == true)
        #expect(machine.armDeadlineTimer(for: t0 + .seconds(5)) == false)
        #expect(machine.armDeadlineTimer(for: t0 + .seconds(9)) == false)
        #expect(machine.armDeadlineTimer(for: t0 + .seconds(3)) == true)
        #expect(machine.armDeadlineTimer(for: t0 + .seconds(5)) == false)
        machine.deadlineTimerFired()
        #expect(machine.armDeadlineTimer(for: t0 + .seconds(5)) == true)
        _ = machine.channelInactive()
        #expect(machine.armDeadlineTimer(for: t0 + .seconds(6)) == true)
    }
}
