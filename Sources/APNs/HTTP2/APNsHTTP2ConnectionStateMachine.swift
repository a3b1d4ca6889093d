package import NIOCore

/// The connection-level decisions of one APNs HTTP/2 connection, whichever library speaks the protocol
/// (swift-nio-http2 or nghttp2): whether the handshake is still waiting for the server's first SETTINGS, the
/// server's stream limit, the one PING in flight, the earliest deadline a timer is armed for, and the one report
/// of the connection's close. Pure: it decides, ``APNsHTTP2ConnectionCore`` carries the decisions out.
package struct APNsHTTP2ConnectionStateMachine {
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS (100, as APNs starts, until it says otherwise).
    package private(set) var maxConcurrentStreams = 100
    /// The channel went inactive or the handler left the pipeline: nothing more is sent.
    package private(set) var isInactive = false
    /// The connection waits for the server's first SETTINGS (or for the failure that ends the handshake).
    private var handshakePending = true
    private var closedReported = false
    private var outstandingPing: UInt64?
    private var pingCounter: UInt64 = 0
    /// The deadline the one stream-deadline timer is armed for, if one is.
    private var deadlineTimerAt: NIODeadline?

    package init() {}

    // MARK: handshake and SETTINGS

    /// What a SETTINGS frame from the server calls for.
    package enum SettingsAction: Equatable {
        case none
        /// The first SETTINGS: the connection is ready with this many streams; PINGs start.
        case connectionReady(maxConcurrentStreams: Int)
        /// A later SETTINGS changed the stream limit: the delegate hears of it.
        case maxConcurrentStreamsChanged(Int)
    }

    /// A SETTINGS frame (not an acknowledgement) arrived; `maxConcurrentStreams` is its last
    /// SETTINGS_MAX_CONCURRENT_STREAMS, if it has one.
    package mutating func settingsReceived(maxConcurrentStreams: Int?) -> SettingsAction {
        if let maxConcurrentStreams { self.maxConcurrentStreams = maxConcurrentStreams }
        if handshakePending {
            handshakePending = false
            return .connectionReady(maxConcurrentStreams: self.maxConcurrentStreams)
        }
        return maxConcurrentStreams == nil ? .none : .maxConcurrentStreamsChanged(self.maxConcurrentStreams)
    }

    /// The handshake failed (ALPN, a transport error before the first SETTINGS). Returns whether it was still
    /// pending, so that whoever waits for it hears of the failure once.
    package mutating func handshakeFailed() -> Bool {
        defer { handshakePending = false }
        return handshakePending
    }

    // MARK: deadlines

    /// A stream's deadline is now the earliest: returns whether a timer must be armed for it (none is, or the one
    /// armed fires later), and counts it as armed.
    package mutating func armDeadlineTimer(for earliest: NIODeadline) -> Bool {
        if let armed = deadlineTimerAt, armed <= earliest { return false }  // it fires first and re-arms
        deadlineTimerAt = earliest
        return true
    }

    /// The deadline timer fired: none is armed until the next ``armDeadlineTimer(for:)``.
    package mutating func deadlineTimerFired() {
        deadlineTimerAt = nil
    }

    // MARK: PING

    /// The PING interval passed: the value of the PING to send now, or `nil` when one is still unanswered (its
    /// timeout is already armed) or the connection is inactive.
    package mutating func pingDue() -> UInt64? {
        guard !isInactive, outstandingPing == nil else { return nil }
        pingCounter &+= 1
        outstandingPing = pingCounter
        return pingCounter
    }

    /// A PING acknowledgement arrived: returns whether it answers the PING in flight (its timeout is cancelled).
    package mutating func pingAcknowledged(_ value: UInt64) -> Bool {
        guard let outstanding = outstandingPing, outstanding == value else { return false }
        outstandingPing = nil
        return true
    }

    // MARK: shutdown

    /// What the end of the channel calls for, besides failing the streams in flight and cancelling the timers.
    package enum CloseAction: Equatable {
        case none
        /// The channel closed before the first SETTINGS: the handshake fails.
        case failHandshake
        /// The connection was established and closed: the delegate hears of it, once.
        case reportClosed
    }

    /// The channel went inactive.
    package mutating func channelInactive() -> CloseAction {
        isInactive = true
        deadlineTimerAt = nil
        outstandingPing = nil
        if handshakePending {
            handshakePending = false
            return .failHandshake
        }
        if closedReported { return .none }
        closedReported = true
        return .reportClosed
    }

    /// The handler left the pipeline (the channel may close before it ever became active). Returns whether the
    /// handshake was still pending and fails now.
    package mutating func handlerRemoved() -> Bool {
        isInactive = true
        return handshakeFailed()
    }
}
