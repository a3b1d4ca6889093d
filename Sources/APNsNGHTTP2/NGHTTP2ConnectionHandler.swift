import APNs
import CNGHTTP2
#if canImport(Glibc)
import Glibc
#else
import Darwin
#endif
import Logging
import NIOCore

/// The HTTP/2 connection as an nghttp2 session behind TLS: received bytes go into `nghttp2_session_mem_recv`, and
/// whatever `nghttp2_session_mem_send` has to send is written once per event-loop tick. Requests are streams in
/// one table keyed by stream id, each with a deadline; SETTINGS (max concurrent streams), GOAWAY and the PING
/// keep-alive go through an ``APNsHTTP2ConnectionCore``, as in `APNsHTTP2ConnectionHandler`.
///
/// nghttp2 is not thread safe: the session and everything here live on the channel's event loop only. The session
/// calls back into this handler through an unretained pointer; the handler owns the session and deletes it when it
/// leaves the pipeline, so the pointer never outlives the handler.
///
/// nghttp2 answers the server's PINGs itself, and holds new streams back while SETTINGS_MAX_CONCURRENT_STREAMS
/// are open, as `NIOHTTP2Handler` does.
final class NGHTTP2ConnectionHandler: ChannelInboundHandler, APNsHTTP2FrameWriter {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// The stream table, handshake, timers and shutdown shared with the swift-nio-http2 handler.
    private let core: APNsHTTP2ConnectionCore
    /// `nghttp2_session *`; nil before the channel is active and after the handler left the pipeline.
    private var session: OpaquePointer?
    private var sendScheduled = false
    /// Set inside nghttp2's callbacks: a close is deferred until nghttp2 has returned.
    private var closeRequested = false

    init(core: APNsHTTP2ConnectionCore) {
        self.core = core
    }

    deinit {
        if let session { nghttp2_session_del(session) }
    }

    /// The receive windows: responses are small, so the stream window stays at the protocol's default; the
    /// connection window is grown so a burst of error bodies never waits for an update (as the NIO client does).
    static let connectionWindow: Int32 = 1 << 20

    // MARK: lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        core.handlerAdded(context: context)
        if context.channel.isActive { startSession(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        startSession(context: context)
        context.fireChannelActive()
    }

    /// Creates the session and queues the connection preface (NIOSSL holds it until the handshake is done).
    private func startSession(context: ChannelHandlerContext) {
        guard session == nil, !core.isInactive else { return }
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else {
            fail(context: context, "nghttp2_session_callbacks_new failed")
            return
        }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_header_callback(callbacks) { _, frame, name, nameLength, value, valueLength, _, user in
            guard let frame, let name, let value else { return 0 }
            NGHTTP2ConnectionHandler.handler(user).header(streamID: frame.pointee.hd.stream_id, name: name, nameLength, value: value, valueLength)
            return 0
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { _, _, streamID, data, length, user in
            guard let data else { return 0 }
            NGHTTP2ConnectionHandler.handler(user).dataChunk(streamID: streamID, UnsafeBufferPointer(start: data, count: length))
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, user in
            guard let frame else { return 0 }
            NGHTTP2ConnectionHandler.handler(user).frameReceived(frame)
            return 0
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, streamID, errorCode, user in
            NGHTTP2ConnectionHandler.handler(user).streamClosed(streamID, errorCode: errorCode)
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_not_send_callback(callbacks) { _, frame, _, user in
            // A request whose HEADERS could not go out (after GOAWAY, or the stream was reset first) never reached
            // the server.
            guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
            NGHTTP2ConnectionHandler.handler(user).headersNotSent(frame.pointee.hd.stream_id)
            return 0
        }
        var option: OpaquePointer?
        guard nghttp2_option_new(&option) == 0, let option else {
            fail(context: context, "nghttp2_option_new failed")
            return
        }
        defer { nghttp2_option_del(option) }
        // As the NIO client runs with header validation off: every header sent is built from a validated
        // notification, and an answer is read by status and JSON only.
        nghttp2_option_set_no_http_messaging(option, 1)
        var created: OpaquePointer?
        let user = Unmanaged.passUnretained(self).toOpaque()
        guard nghttp2_session_client_new2(&created, callbacks, user, option) == 0, let created else {
            fail(context: context, "nghttp2_session_client_new2 failed")
            return
        }
        session = created
        // No server push; the default stream window; a larger connection window.
        var settings = [nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0)]
        nghttp2_submit_settings(created, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        nghttp2_session_set_local_window_size(created, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Self.connectionWindow)
        scheduleSend()
    }

    private static func handler(_ user: UnsafeMutableRawPointer?) -> NGHTTP2ConnectionHandler {
        Unmanaged<NGHTTP2ConnectionHandler>.fromOpaque(user!).takeUnretainedValue()
    }

    private func fail(context: ChannelHandlerContext, _ message: String) {
        core.logger.warning("nghttp2 connection failed", metadata: ["connection": "\(core.id)", "error": "\(message)"])
        closeSoon(context: context)
    }

    /// Closes the channel, but never from inside an nghttp2 call (closing tears down what the call is using).
    private func closeSoon(context: ChannelHandlerContext) {
        guard !closeRequested else { return }
        closeRequested = true
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.eventLoop.execute { bound.value.close(promise: nil) }
    }

    /// Closes the connection; `graceful` sends GOAWAY (NO_ERROR) first.
    func close(graceful: Bool, promise: EventLoopPromise<Void>) {
        guard let context = core.context else {
            promise.succeed()
            return
        }
        if graceful, let session, !core.isInactive {
            nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, NGHTTP2_NO_ERROR.rawValue, nil, 0)
            sendPending()
        }
        context.close(promise: nil)
        context.channel.closeFuture.cascade(to: promise)
    }

    // MARK: requests

    /// Submits `request` as a new stream; `completion` gets the outcome, on the event loop.
    func start(_ request: NGHTTP2Request, completion: APNsHTTP2StreamTable.Completion) {
        guard let session, core.context != nil, !core.isInactive, !closeRequested else {
            completion(.failed(.connectionLost))
            return
        }
        // After GOAWAY no stream may be opened.
        guard core.streams.goAwayLastStreamID == nil else {
            completion(.failed(.goingAway))
            return
        }
        let fieldCount = request.fieldCount
        let streamID = request.values.withUnsafeBufferPointer { values in
            withUnsafeTemporaryAllocation(of: nghttp2_nv.self, capacity: fieldCount) { nva in
                for index in 0..<fieldCount {
                    let field = request.fields[index]
                    var flags = UInt8(NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue)
                    if !field.indexed { flags |= UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue) }
                    nva.initializeElement(at: index, to: nghttp2_nv(
                        name: UnsafeMutablePointer(mutating: field.name.utf8Start),
                        value: UnsafeMutablePointer(mutating: values.baseAddress! + field.valueStart),
                        namelen: field.name.utf8CodeUnitCount, valuelen: field.valueCount, flags: flags))
                }
                // nghttp2 copies the values (and encodes the names) before it returns.
                if request.payload.isEmpty {
                    return nghttp2_submit_request(session, nil, nva.baseAddress, fieldCount, nil, nil)
                }
                var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: Self.readPayload)
                return nghttp2_submit_request(session, nil, nva.baseAddress, fieldCount, &provider, nil)
            }
        }
        guard streamID > 0 else {
            // Stream ids used up (the connection is done), or out of memory: not sent either way.
            completion(.failed(streamID == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE.rawValue ? .goingAway : .streamError("nghttp2 \(streamID)")))
            return
        }
        core.streams.open(streamID, completion: completion, outgoing: request.payload, deadline: request.deadline)
        core.armDeadlineTimer(writer: self)
        scheduleSend()
    }

    /// nghttp2's data source: copies the next part of the stream's body into its DATA frame.
    private static let readPayload: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, user in
        NGHTTP2ConnectionHandler.handler(user).readPayload(streamID: streamID, into: buffer, length: length, flags: flags)
    }

    private func readPayload(streamID: Int32, into buffer: UnsafeMutablePointer<UInt8>?, length: Int, flags: UnsafeMutablePointer<UInt32>?) -> Int {
        // A stream that already ended here (its deadline passed) is reset by nghttp2 on this answer.
        guard let buffer, let flags, let taken = core.streams.update(streamID, { $0.takeOutgoing(into: buffer, length: length) }) else {
            return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
        }
        if taken.isLast { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return taken.count
    }

    // MARK: writing

    /// Makes sure what nghttp2 has to send goes out at the end of this event-loop tick, in one write and flush.
    private func scheduleSend() {
        guard !sendScheduled, let context = core.context else { return }
        sendScheduled = true
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute { bound.value.sendPending() }
    }

    private func sendPending() {
        sendScheduled = false
        guard let session, let context = core.context, !core.isInactive else { return }
        var buffer: ByteBuffer?
        while true {
            var data: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(session, &data)
            if count < 0 {
                fail(context: context, "nghttp2_session_mem_send: \(count)")
                break
            }
            guard count > 0, let data else { break }
            if buffer == nil { buffer = context.channel.allocator.buffer(capacity: max(count, 16_384)) }
            buffer!.writeBytes(UnsafeRawBufferPointer(start: data, count: count))
        }
        if let buffer { context.writeAndFlush(wrapOutboundOut(buffer), promise: nil) }
        // Both sides are done (GOAWAY exchanged and every stream closed): nothing more can happen here.
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 { closeSoon(context: context) }
    }

    // MARK: reading

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let session, !core.isInactive else { return }
        let buffer = unwrapInboundIn(data)
        let result = buffer.withUnsafeReadableBytes { bytes in
            nghttp2_session_mem_recv(session, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count)
        }
        if result < 0 {
            // A connection error: nghttp2 has queued a GOAWAY saying why; send it, then close.
            core.logger.debug("nghttp2 rejected what the server sent", metadata: ["connection": "\(core.id)", "error": "\(result)"])
            sendPending()
            closeSoon(context: context)
            return
        }
        if nghttp2_session_want_write(session) != 0 { scheduleSend() }
    }

    private func header(streamID: Int32, name: UnsafePointer<UInt8>, _ nameLength: Int, value: UnsafePointer<UInt8>, _ valueLength: Int) {
        // One lookup per header, in place; nothing for a stream no longer in the table.
        if Self.equals(name, nameLength, ":status") {
            core.streams.update(streamID) { $0.keepFirst(status: Self.decimal(value, valueLength)) }
        } else if Self.equals(name, nameLength, "apns-id") || Self.equals(name, nameLength, "apns-request-id") {
            // Read in place from nghttp2's buffer: no string is made for the 36 characters.
            core.streams.update(streamID) { $0.keepFirst(apnsID: APNsUUIDText.parse(utf8: UnsafeBufferPointer(start: value, count: valueLength))) }
        } else if Self.equals(name, nameLength, "retry-after") {
            core.streams.update(streamID) { $0.keepFirst(.retryAfter, Self.string(value, valueLength)) }
        } else if Self.equals(name, nameLength, "apns-channel-id") {
            core.streams.update(streamID) { $0.keepFirst(.channelID, Self.string(value, valueLength)) }
        } else if Self.equals(name, nameLength, "apns-unique-id") {
            core.streams.update(streamID) { $0.keepFirst(.uniqueID, Self.string(value, valueLength)) }
        }
    }

    private func dataChunk(streamID: Int32, _ data: UnsafeBufferPointer<UInt8>) {
        core.streams.update(streamID) { $0.body.append(contentsOf: data) }
    }

    private func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        let header = frame.pointee.hd
        switch UInt32(header.type) {
        case NGHTTP2_HEADERS.rawValue, NGHTTP2_DATA.rawValue:
            if header.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0 { core.streams.finish(header.stream_id) }
        case NGHTTP2_SETTINGS.rawValue:
            guard header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 else { return }
            var maxConcurrentStreams: Int?
            let settings = frame.pointee.settings
            for index in 0..<settings.niv where settings.iv[index].settings_id == Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue) {
                maxConcurrentStreams = Int(settings.iv[index].value)
            }
            core.settingsReceived(maxConcurrentStreams: maxConcurrentStreams, writer: self)
        case NGHTTP2_GOAWAY.rawValue:
            core.goAwayReceived(lastStreamID: frame.pointee.goaway.last_stream_id, errorCode: frame.pointee.goaway.error_code)
        case NGHTTP2_PING.rawValue:
            guard header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0 else { return }
            core.pingAcknowledged(withUnsafeBytes(of: frame.pointee.ping.opaque_data) { $0.loadUnaligned(as: UInt64.self) })
        default:
            break
        }
    }

    private func streamClosed(_ streamID: Int32, errorCode: UInt32) {
        guard core.streams.contains(streamID) else { return }
        if errorCode == NGHTTP2_NO_ERROR.rawValue {
            core.streams.finish(streamID)
        } else {
            // Reset by the server, or dropped by a GOAWAY: REFUSED_STREAM was never processed, CANCEL goes with the
            // connection, any other error is the request's own failure.
            switch errorCode {
            case NGHTTP2_REFUSED_STREAM.rawValue: core.streams.complete(streamID, .failed(.refused))
            case NGHTTP2_CANCEL.rawValue: core.streams.complete(streamID, .failed(.connectionLost))
            default: core.streams.complete(streamID, .failed(.streamError("reset \(errorCode)")))
            }
        }
    }

    private static func equals(_ name: UnsafePointer<UInt8>, _ length: Int, _ literal: StaticString) -> Bool {
        length == literal.utf8CodeUnitCount && memcmp(name, literal.utf8Start, length) == 0
    }

    private static func string(_ value: UnsafePointer<UInt8>, _ length: Int) -> String {
        String(decoding: UnsafeBufferPointer(start: value, count: length), as: UTF8.self)
    }

    private static func decimal(_ value: UnsafePointer<UInt8>, _ length: Int) -> Int? {
        guard length > 0, length <= 9 else { return nil }
        var result = 0
        for index in 0..<length {
            let digit = Int(value[index]) - 48
            guard digit >= 0 && digit <= 9 else { return nil }
            result = result * 10 + digit
        }
        return result
    }

    /// A request whose HEADERS never left: certainly not processed, so refused (sent again elsewhere).
    private func headersNotSent(_ streamID: Int32) {
        core.streams.complete(streamID, .failed(.refused))
    }

    // MARK: frames the core asks for

    func cancelStream(_ streamID: APNsHTTP2StreamTable.StreamID) {
        // RST_STREAM CANCEL: the server may stop working on it.
        guard let session, !core.isInactive else { return }
        nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, NGHTTP2_CANCEL.rawValue)
        scheduleSend()
    }

    func writePing(_ value: UInt64) {
        guard let session else { return }
        withUnsafeBytes(of: value) { bytes in
            _ = nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), bytes.baseAddress?.assumingMemoryBound(to: UInt8.self))
        }
        scheduleSend()
    }

    // MARK: events and errors

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        core.userInboundEventTriggered(event)
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        core.errorCaught(error)
        // Transport and TLS failures end the connection (HTTP/2 errors are nghttp2's, handled in channelRead).
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        core.channelInactive()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        core.handlerRemoved()
        if let session {
            self.session = nil
            nghttp2_session_del(session)
        }
    }
}
