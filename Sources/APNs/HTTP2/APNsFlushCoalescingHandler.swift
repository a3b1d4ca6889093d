public import NIOCore

/// Coalesces flushes: every `flush` within one event-loop tick becomes a single flush on the next handler
/// (fewer TLS records and syscalls when many streams write at once). Sits right after TLS in the HTTP/2 and the binary connections.
public final class APNsFlushCoalescingHandler: ChannelOutboundHandler, RemovableChannelHandler {
    public typealias OutboundIn = ByteBuffer
    public typealias OutboundOut = ByteBuffer

    private var flushPending = false

    /// Creates the handler.
    public init() {}

    public func flush(context: ChannelHandlerContext) {
        guard !flushPending else { return }
        flushPending = true
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (handler, context) = bound.value
            guard handler.flushPending else { return }
            handler.flushPending = false
            context.flush()
        }
    }

    public func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        // Never let a close overtake writes that wait for the coalesced flush (answered streams would be lost).
        if flushPending {
            flushPending = false
            context.flush()
        }
        context.close(mode: mode, promise: promise)
    }
}
