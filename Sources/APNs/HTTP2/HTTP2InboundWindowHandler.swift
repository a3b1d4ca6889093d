public import NIOCore
public import NIOHTTP2

/// Keeps the peer's send windows open on an HTTP/2 connection that handles frames itself (no per-stream child
/// channels, which would otherwise send the WINDOW_UPDATEs). Sits right after `NIOHTTP2Handler`.
///
/// `NIOHTTP2Handler` accounts for every DATA frame received and reports the remaining receive window of the
/// connection and of the stream in a `NIOHTTP2WindowUpdatedEvent`; once a window has fallen below half its
/// target, this handler tops it back up. On activation it grows the connection window from the protocol's
/// 65,535 bytes to `connectionTarget`, so many small streams in flight never wait for an update.
public final class HTTP2InboundWindowHandler: ChannelInboundHandler {
    public typealias InboundIn = HTTP2Frame
    public typealias InboundOut = HTTP2Frame
    public typealias OutboundOut = HTTP2Frame

    /// The connection window every connection starts with (RFC 9113, 6.9.2).
    static let initialConnectionWindow = 65_535

    private let connectionTarget: Int
    private let streamTarget: Int
    private var grown = false

    /// - Parameters:
    ///   - connectionTarget: the connection receive window to keep (at most 2^31 - 1).
    ///   - streamTarget: the stream receive window to keep: the SETTINGS_INITIAL_WINDOW_SIZE this side announced.
    public init(connectionTarget: Int, streamTarget: Int) {
        self.connectionTarget = min(connectionTarget, Int(Int32.max))
        self.streamTarget = min(streamTarget, Int(Int32.max))
    }

    /// The WINDOW_UPDATE increment that brings a receive window of `size` back to `target` once it has fallen below
    /// half of it; `nil` while it has not (one update per half window, not one per frame).
    public static func increment(windowSize size: Int, target: Int) -> Int? {
        guard size < target / 2 else { return nil }
        return min(target - size, Int(Int32.max))
    }

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { growConnectionWindow(context: context) }
    }

    public func channelActive(context: ChannelHandlerContext) {
        // Forward first: NIOHTTP2Handler has written its preamble by now, and the update must follow the SETTINGS.
        context.fireChannelActive()
        growConnectionWindow(context: context)
    }

    public func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let update = event as? NIOHTTP2WindowUpdatedEvent, let size = update.inboundWindowSize {
            let target = update.streamID == .rootStream ? connectionTarget : streamTarget
            if let increment = Self.increment(windowSize: size, target: target) {
                // A stream may be closed by the time the update is written; that write failing is harmless.
                context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: update.streamID, payload: .windowUpdate(windowSizeIncrement: increment))), promise: nil)
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func growConnectionWindow(context: ChannelHandlerContext) {
        guard !grown else { return }
        grown = true
        let increment = connectionTarget - Self.initialConnectionWindow
        guard increment > 0 else { return }
        context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: increment))), promise: nil)
    }
}
