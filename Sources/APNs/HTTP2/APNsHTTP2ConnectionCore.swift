package import Logging
import Metrics
package import NIOCore
import NIOTLS

/// The frames the shared connection logic (``APNsHTTP2ConnectionCore``) has a connection handler write, each in
/// its own HTTP/2 library.
package protocol APNsHTTP2FrameWriter: AnyObject, SendableMetatype {
    /// Resets a stream whose deadline passed (RST_STREAM CANCEL), so the server may stop working on it.
    func cancelStream(_ streamID: APNsHTTP2StreamTable.StreamID)
    /// Sends a PING (not an acknowledgement) carrying `value`.
    func writePing(_ value: UInt64)
}

/// What both APNs HTTP/2 connection handlers (swift-nio-http2's `APNsHTTP2ConnectionHandler`, nghttp2's
/// `NGHTTP2ConnectionHandler`) do alike around their own framing: the stream table, the handshake and its ready
/// promise, SETTINGS and GOAWAY as the delegate hears of them, the stream-deadline timer, the PING keep-alive and
/// its timeout, and the shutdown that fails the streams in flight and reports the close once.
///
/// A handler owns one, made with its promise by ``APNsHTTP2ConnectionBootstrap``, and calls it from its channel
/// events; the decisions are ``APNsHTTP2ConnectionStateMachine``'s, the timers and promise here. A class, so a
/// handler reaches ``streams`` in place on every frame and a write it asks for may re-enter (a write can fail a
/// stream synchronously) without overlapping an access. Confined to the connection's event loop.
package final class APNsHTTP2ConnectionCore {
    /// The connection's id, for the delegate and the logs.
    package let id: APNsConnectionID
    /// The connection's logger.
    package let logger: Logger
    /// The requests in flight, their deadlines and the GOAWAY limit.
    package var streams = APNsHTTP2StreamTable()
    /// The handler's context, from ``handlerAdded(context:)`` to ``handlerRemoved()``.
    package private(set) var context: ChannelHandlerContext?
    private let delegate: any APNsConnectionDelegate
    /// Succeeded with the server's stream limit at its first SETTINGS, failed if the handshake fails.
    private let ready: EventLoopPromise<Int>
    private let pingInterval: TimeAmount
    private let pingTimeout: TimeAmount
    private var state = APNsHTTP2ConnectionStateMachine()
    /// The one timer armed for the earliest deadline.
    private var deadlineTimer: Scheduled<Void>?
    private var pingTask: RepeatedTask?
    private var pingTimeoutTask: Scheduled<Void>?

    /// Creates the core of a connection whose handshake `ready` waits for, with the PING settings of `configuration`.
    package init(id: APNsConnectionID, delegate: any APNsConnectionDelegate, ready: EventLoopPromise<Int>,
                 configuration: APNsHTTP2ConnectionConfiguration, logger: Logger) {
        (self.id, self.delegate, self.ready, self.logger) = (id, delegate, ready, logger)
        pingInterval = TimeAmount(configuration.pingInterval)
        pingTimeout = TimeAmount(configuration.pingTimeout)
    }

    /// The channel went inactive or the handler left the pipeline: no stream may be opened, nothing is sent.
    package var isInactive: Bool { state.isInactive }

    /// The handler joined the pipeline.
    package func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    // MARK: handshake, SETTINGS, GOAWAY, PING acknowledgements

    /// A user event went by: a TLS handshake that did not negotiate `h2` fails the handshake and closes.
    package func userInboundEventTriggered(_ event: Any) {
        if case .handshakeCompleted(let negotiated) = event as? TLSUserEvent, negotiated != "h2" {
            if state.handshakeFailed() { ready.fail(APNsConnectError.alpnNotH2(negotiated)) }
            context?.close(promise: nil)
        }
    }

    /// A SETTINGS frame (not an acknowledgement) arrived, with its last SETTINGS_MAX_CONCURRENT_STREAMS if any: the
    /// first makes the connection ready and starts the PINGs `writer` sends; a later change goes to the delegate.
    package func settingsReceived(maxConcurrentStreams: Int?, writer: some APNsHTTP2FrameWriter) {
        switch state.settingsReceived(maxConcurrentStreams: maxConcurrentStreams) {
        case .connectionReady(let limit):
            ready.succeed(limit)
            startPinging(writer: writer)
        case .maxConcurrentStreamsChanged(let limit):
            delegate.connection(id, maxConcurrentStreamsChanged: limit)
        case .none:
            break
        }
    }

    /// A GOAWAY arrived: the streams above `lastStreamID` go back at once, and the first tells the delegate.
    package func goAwayReceived(lastStreamID: APNsHTTP2StreamTable.StreamID, errorCode: some Any) {
        if streams.goAway(lastStreamID: lastStreamID) {
            logger.info("APNs sent GOAWAY", metadata: ["connection": "\(id)", "last_stream_id": "\(lastStreamID)", "error_code": "\(errorCode)"])
            delegate.connectionGoingAway(id)
        }
    }

    /// A PING acknowledgement arrived: if it answers ours, its timeout is off.
    package func pingAcknowledged(_ value: UInt64) {
        guard state.pingAcknowledged(value) else { return }
        pingTimeoutTask?.cancel()
        pingTimeoutTask = nil
    }

    // MARK: deadlines

    /// Makes sure a timer fires no later than the earliest deadline; when it fires, the streams past their
    /// deadline fail with `deadlineExceeded` and `writer` resets them.
    package func armDeadlineTimer(writer: some APNsHTTP2FrameWriter) {
        // Called per request: the common case (a timer already armed no later) returns before anything is fetched.
        guard let earliest = streams.earliestDeadline, let context, state.armDeadlineTimer(for: earliest) else { return }
        deadlineTimer?.cancel()
        let eventLoop = context.eventLoop
        let bound = NIOLoopBound((self, writer), eventLoop: eventLoop)
        deadlineTimer = eventLoop.scheduleTask(deadline: earliest) {
            let (core, writer) = bound.value
            core.deadlinesDue(writer: writer)
        }
    }

    private func deadlinesDue(writer: some APNsHTTP2FrameWriter) {
        deadlineTimer = nil
        state.deadlineTimerFired()
        for streamID in streams.expire(now: .now()) {
            writer.cancelStream(streamID)
        }
        armDeadlineTimer(writer: writer)
    }

    // MARK: PING

    private func startPinging(writer: some APNsHTTP2FrameWriter) {
        guard let eventLoop = context?.eventLoop else { return }
        let bound = NIOLoopBound((self, writer), eventLoop: eventLoop)
        pingTask = eventLoop.scheduleRepeatedTask(initialDelay: pingInterval, delay: pingInterval) { _ in
            let (core, writer) = bound.value
            core.pingDue(writer: writer)
        }
    }

    private func pingDue(writer: some APNsHTTP2FrameWriter) {
        guard let context, let value = state.pingDue() else { return }
        writer.writePing(value)
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        pingTimeoutTask = context.eventLoop.scheduleTask(in: pingTimeout) {
            let (core, context) = bound.value
            core.logger.warning("APNs connection PING timed out; declaring it dead", metadata: ["connection": "\(core.id)"])
            Counter(label: "apns_ping_timeouts_total").increment()
            context.close(promise: nil)
        }
    }

    // MARK: errors and shutdown

    /// An error reached the handler. Before the first SETTINGS it fails the handshake: returns whether it did.
    @discardableResult
    package func errorCaught(_ error: any Error) -> Bool {
        logger.debug("APNs connection error", metadata: ["connection": "\(id)", "error": "\(error)"])
        guard state.handshakeFailed() else { return false }
        ready.fail(error)
        return true
    }

    /// The channel went inactive: the streams in flight are lost with it, the timers stop, and either the
    /// handshake fails or the delegate hears that the connection closed (once).
    package func channelInactive() {
        let action = state.channelInactive()
        streams.completeAll(.connectionLost)
        deadlineTimer?.cancel()
        deadlineTimer = nil
        pingTask?.cancel()
        pingTask = nil
        pingTimeoutTask?.cancel()
        pingTimeoutTask = nil
        switch action {
        case .failHandshake: ready.fail(APNsConnectError.closedDuringHandshake)
        case .reportClosed: delegate.connectionClosed(id)
        case .none: break
        }
    }

    /// The handler left the pipeline. The channel may close before it ever became active (connect timeout): the
    /// promise is never leaked, and the streams in flight are lost.
    package func handlerRemoved() {
        if state.handlerRemoved() { ready.fail(APNsConnectError.closedDuringHandshake) }
        streams.completeAll(.connectionLost)
        context = nil
    }
}
