import APNs
import Crypto
import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import X509

/// Per-connection state of the simulator; confined to the connection's event loop.
final class SimulatorConnectionState {
    let channel: any Channel
    var highestStreamID = 0
    var goAwayLastStreamID: Int?
    var openAcceptedStreams = 0
    var frozen = false
    var closeScheduled = false
    /// The last token that passed every check on this connection (signature checks are skipped for it).
    var lastVerifiedJWT: VerifiedProviderToken?
    /// The last `authorization` value this connection presented (the simulator notes each new one once).
    var lastAuthorization: String?
    /// The app of the connection's client certificate (one of `clientCertificateTopics`), looked up once.
    var certificateTopic: String?
    var certificateTopicLookedUp = false

    init(channel: any Channel) {
        self.channel = channel
    }

    /// Sends GOAWAY once, naming `lastStreamID` (by default the highest stream seen); the connection closes when
    /// the streams up to it are answered.
    func goAway(lastStreamID: Int? = nil) {
        guard goAwayLastStreamID == nil else { return }
        let last = lastStreamID ?? highestStreamID
        goAwayLastStreamID = last
        let frame = HTTP2Frame(
            streamID: .rootStream,
            payload: .goAway(lastStreamID: HTTP2StreamID(last), errorCode: .noError, opaqueData: nil))
        channel.writeAndFlush(frame, promise: nil)
        closeIfDone()
    }

    /// Once every stream up to last-stream-id is answered, the connection closes after a grace period; a
    /// well-behaved client closes it first, once it has read every answer, so no answer is ever cut off.
    func closeIfDone() {
        if goAwayLastStreamID != nil && openAcceptedStreams == 0 && !closeScheduled {
            closeScheduled = true
            let channel = self.channel
            channel.eventLoop.scheduleTask(in: .seconds(10)) { channel.close(promise: nil) }
        }
    }
}

/// Drops every inbound byte once the connection is frozen (no responses, no PING ACKs).
final class FreezeHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    private let connection: SimulatorConnectionState

    init(connection: SimulatorConnectionState) { self.connection = connection }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if connection.frozen { return }
        context.fireChannelRead(data)
    }
}

/// One request stream of a simulator connection, from its HEADERS to its answer.
struct SimulatorStream {
    var headers: HPACKHeaders?
    var body: ByteBuffer?
    /// The request ended (END_STREAM seen) and was handled.
    var handled = false
    /// Counted in ``SimulatorConnectionState/openAcceptedStreams`` until the stream closes.
    var accepted = false
    /// The answer held back by a `.delay` fault.
    var delayed: Scheduled<Void>?
}

/// Serves APNs requests on one HTTP/2 connection at the frame level: HEADERS and DATA are collected per stream id,
/// the request is validated when the stream ends, and the answer goes out on the same stream. No per-stream child
/// channel is created (a channel and pipeline per request would cost more than the request itself).
final class SimulatorConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private let simulator: APNsSimulator
    private let connection: SimulatorConnectionState
    private let validator: SimulatorValidator
    private let role: APNsSimulator.Role
    private var streams: [HTTP2StreamID: SimulatorStream] = [:]

    init(simulator: APNsSimulator, connection: SimulatorConnectionState, role: APNsSimulator.Role) {
        self.simulator = simulator
        self.connection = connection
        self.role = role
        self.validator = SimulatorValidator(options: simulator.options, publicKey: simulator.jwtPublicKey)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let payload):
            if let existing = streams[frame.streamID] {
                // Trailers: only their END_STREAM matters.
                if payload.endStream && !existing.handled { handle(context: context, streamID: frame.streamID) }
                return
            }
            connection.highestStreamID = max(connection.highestStreamID, Int(frame.streamID))
            streams[frame.streamID] = SimulatorStream(headers: payload.headers)
            if payload.endStream { handle(context: context, streamID: frame.streamID) }
        case .data(let payload):
            guard streams[frame.streamID] != nil else { return }
            if case .byteBuffer(var buffer) = payload.data {
                if streams[frame.streamID]?.body == nil {
                    streams[frame.streamID]?.body = buffer
                } else {
                    streams[frame.streamID]?.body?.writeBuffer(&buffer)
                }
            }
            if payload.endStream { handle(context: context, streamID: frame.streamID) }
        default:
            // SETTINGS, PING (acknowledged by NIOHTTP2Handler), WINDOW_UPDATE, RST_STREAM (the stream-closed event
            // follows), GOAWAY from the client.
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let closed = event as? StreamClosedEvent, let stream = streams.removeValue(forKey: closed.streamID) {
            // A reset stream is never answered (a delayed answer is dropped, and not recorded).
            stream.delayed?.cancel()
            if stream.accepted {
                connection.openAcceptedStreams -= 1
                connection.closeIfDone()
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        for stream in streams.values { stream.delayed?.cancel() }
        streams.removeAll()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        simulator.logger.debug("simulator connection error", metadata: ["error": "\(error)"])
        // Stream-level problems are reported here too (NIOHTTP2Handler has reset the stream already); they must
        // not take down the other streams. Transport and TLS failures end the connection.
        if error is IOError || error is NIOSSLError || error is BoringSSLError || error is ChannelError {
            context.close(promise: nil)
        }
    }

    private func handle(context: ChannelHandlerContext, streamID: HTTP2StreamID) {
        guard var stream = streams[streamID], !stream.handled, let headers = stream.headers else { return }
        stream.handled = true
        if let last = connection.goAwayLastStreamID, Int(streamID) > last {
            streams[streamID] = stream
            write(context: context, HTTP2Frame(streamID: streamID, payload: .rstStream(.refusedStream)))
            return
        }
        stream.accepted = true
        connection.openAcceptedStreams += 1
        // Faults match a device token, or a broadcast's channel id.
        let path = headers.first(name: ":path") ?? ""
        let target = path.hasPrefix(SimulatorValidator.broadcastPathPrefix)
            ? headers.first(name: "apns-channel-id") ?? "" : String(path.dropFirst("/3/device/".count)).lowercased()
        let authorization = headers.first(name: "authorization")
        if let authorization, authorization != connection.lastAuthorization {
            connection.lastAuthorization = authorization
            simulator.noteAuthorization(authorization)
        }
        let fault = role == .management ? nil : simulator.takeFault(token: target, authorization: authorization)
        if case .delay(let amount) = fault {
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            stream.delayed = context.eventLoop.scheduleTask(in: amount) {
                let (handler, context) = bound.value
                guard handler.streams[streamID] != nil else { return }
                handler.streams[streamID]?.delayed = nil
                handler.answer(context: context, streamID: streamID, fault: nil)
            }
            streams[streamID] = stream
            return
        }
        streams[streamID] = stream
        answer(context: context, streamID: streamID, fault: fault)
    }

    private func answer(context: ChannelHandlerContext, streamID: HTTP2StreamID, fault: SimulatorFault?) {
        guard let stream = streams[streamID], let headers = stream.headers else { return }
        if role == .management {
            answerManagement(context: context, streamID: streamID, headers: headers, body: stream.body.map { Array($0.readableBytesView) } ?? [])
            return
        }
        let requestID = headers.first(name: "apns-id") ?? headers.first(name: "apns-request-id")
        // Apple's sandbox host names each device request's entry in the Push Notifications Console's delivery log.
        let uniqueID = simulator.options.environment == .sandbox && (headers.first(name: ":path") ?? "").hasPrefix("/3/device/")
            ? APNsUUIDText.format(UUID()) : nil
        let extra = uniqueID.map { [("apns-unique-id", $0)] } ?? []
        switch fault {
        case .status(let status, let reason):
            respond(context: context, streamID: streamID, status: status, apnsID: requestID, reason: reason, timestamp: nil, extraHeaders: extra)
            return
        case .unregistered(let timestamp):
            respond(context: context, streamID: streamID, status: 410, apnsID: requestID, reason: "Unregistered", timestamp: timestamp, extraHeaders: extra)
            return
        case .badDeviceToken:
            respond(context: context, streamID: streamID, status: 400, apnsID: requestID, reason: "BadDeviceToken", timestamp: nil, extraHeaders: extra)
            return
        case .closeConnection:
            connection.channel.close(promise: nil)
            return
        case .freeze:
            connection.frozen = true
            return
        case .shutdown:
            respond(context: context, streamID: streamID, status: 503, apnsID: requestID, reason: "Shutdown", timestamp: nil, extraHeaders: extra)
            return
        case .tooManyRequests(let retryAfterSeconds):
            respond(context: context, streamID: streamID, status: 429, idHeader: "apns-id", id: requestID,
                    extraHeaders: (retryAfterSeconds.map { [("retry-after", String($0))] } ?? []) + extra, json: "{\"reason\":\"TooManyRequests\"}")
            return
        case .expiredProviderToken:
            respond(context: context, streamID: streamID, status: 403, apnsID: requestID, reason: "ExpiredProviderToken", timestamp: nil, extraHeaders: extra)
            return
        case .resetStream:
            write(context: context, HTTP2Frame(streamID: streamID, payload: .rstStream(.internalError)))
            return
        case .delay, .goAway, .goAwayAfterStream, .setMaxConcurrentStreams, .binaryStatus, nil:
            break
        }
        var lastVerified = connection.lastVerifiedJWT
        let simulator = self.simulator
        lookUpCertificateTopic(context: context)
        let body = stream.body.map { Array($0.readableBytesView) } ?? []
        let verdict = validator.validate(
            headers: headers, body: body, now: simulator.options.now(),
            certificateAuthenticated: simulator.options.requireClientCertificate, certificateTopic: connection.certificateTopic,
            lastVerifiedJWT: &lastVerified, tokenStatus: { simulator.tokenStatus($0) },
            channelExists: { simulator.channelExists(bundleID: $0, channelID: $1) })
        connection.lastVerifiedJWT = lastVerified
        switch verdict {
        case .reject(let status, let reason, let timestamp):
            respond(context: context, streamID: streamID, status: status, apnsID: requestID, reason: reason, timestamp: timestamp, extraHeaders: extra)
        case .accept(var delivery):
            delivery.uniqueID = uniqueID
            simulator.record(delivery)
            respond(context: context, streamID: streamID, status: 200, apnsID: delivery.apnsID, reason: nil, timestamp: nil, extraHeaders: extra)
            afterAcceptance(fault, streamID: streamID)
        case .acceptBroadcast(let broadcast):
            simulator.record(broadcast)
            respond(context: context, streamID: streamID, status: 200, idHeader: "apns-request-id", id: broadcast.requestID, extraHeaders: [], json: nil)
            afterAcceptance(fault, streamID: streamID)
        }
    }

    /// The faults that act once a request was accepted.
    private func afterAcceptance(_ fault: SimulatorFault?, streamID: HTTP2StreamID) {
        if case .goAway = fault { connection.goAway() }
        if case .goAwayAfterStream = fault { connection.goAway(lastStreamID: Int(streamID)) }
        if case .setMaxConcurrentStreams(let limit) = fault { simulator.setMaxConcurrentStreams(limit) }
    }

    /// A channel management request: path, method and authentication, then the channel table answers.
    private func answerManagement(context: ChannelHandlerContext, streamID: HTTP2StreamID, headers: HPACKHeaders, body: [UInt8]) {
        let requestID = headers.first(name: "apns-request-id")
        var answer: SimulatorManagementAnswer
        if let (bundleID, resource) = SimulatorChannels.parseManagementPath(headers.first(name: ":path") ?? "") {
            lookUpCertificateTopic(context: context)
            var lastVerified = connection.lastVerifiedJWT
            let authenticated = validator.authenticate(
                headers, now: simulator.options.now(), certificateAuthenticated: simulator.options.requireClientCertificate,
                certificateTopic: connection.certificateTopic, lastVerifiedJWT: &lastVerified)
            connection.lastVerifiedJWT = lastVerified
            if case .failure(let problem) = authenticated {
                answer = .reject(problem.reason)
            } else if let allowed = simulator.options.allowedTopics, !allowed.contains(bundleID) {
                answer = .reject(.topicDisallowed)
            } else if case .success(let topics?) = authenticated, !topics.contains(bundleID) {
                // A team's key, an app's certificate: its own apps' channels only.
                answer = .reject(.topicDisallowed)
            } else {
                answer = simulator.manage(
                    method: headers.first(name: ":method") ?? "", bundleID: bundleID, resource: resource,
                    channelHeader: headers.first(name: "apns-channel-id"), body: body)
            }
        } else {
            answer = .reject(.badPath)
        }
        var extra: [(String, String)] = []
        if let channelID = answer.channelID { extra.append(("apns-channel-id", channelID)) }
        let json = answer.reason.map { "{\"reason\":\"\($0)\"}" } ?? answer.body
        respond(context: context, streamID: streamID, status: answer.status, idHeader: "apns-request-id", id: requestID, extraHeaders: extra, json: json)
    }

    /// Looks up, once per connection, the app of its client certificate (certificate auth).
    private func lookUpCertificateTopic(context: ChannelHandlerContext) {
        guard simulator.options.requireClientCertificate && !connection.certificateTopicLookedUp else { return }
        connection.certificateTopic = Self.certificateTopic(of: context.channel, among: simulator.options.clientCertificateTopics)
        connection.certificateTopicLookedUp = true
    }

    /// The bundle id of the peer's client certificate (its subject CN) when it is one of `topics`.
    static func certificateTopic(of channel: any Channel, among topics: [String]) -> String? {
        guard !topics.isEmpty,
              let peer = try? channel.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self).peerCertificate,
              let der = try? peer.toDERBytes(),
              let certificate = try? Certificate(derEncoded: der)
        else { return nil }
        for name in certificate.subject {
            for attribute in name where attribute.type == .RDNAttributeType.commonName {
                let commonName = String(describing: attribute.value)
                if topics.contains(commonName) { return commonName }
            }
        }
        return nil
    }

    private func respond(context: ChannelHandlerContext, streamID: HTTP2StreamID, status: Int, apnsID: String?, reason: String?, timestamp: Int64?,
                         extraHeaders: [(String, String)] = []) {
        var json: String?
        if let reason {
            json = "{\"reason\":\"\(reason)\"" + (timestamp.map { ",\"timestamp\":\($0)" } ?? "") + "}"
        }
        respond(context: context, streamID: streamID, status: status, idHeader: "apns-id", id: apnsID, extraHeaders: extraHeaders, json: json)
    }

    /// An answer: the status, the request's id under `idHeader` (a new UUID when it sent none), and a JSON body if any.
    private func respond(
        context: ChannelHandlerContext, streamID: HTTP2StreamID, status: Int, idHeader: String, id: String?, extraHeaders: [(String, String)], json: String?
    ) {
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: String(status))
        headers.add(name: idHeader, value: id ?? APNsUUIDText.format(UUID()), indexing: .nonIndexable)
        for (name, value) in extraHeaders { headers.add(name: name, value: value, indexing: .nonIndexable) }
        guard let json else {
            write(context: context, HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: true))))
            return
        }
        headers.add(name: "content-type", value: "application/json")
        write(context: context, HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: false))))
        var buffer = context.channel.allocator.buffer(capacity: json.utf8.count)
        buffer.writeString(json)
        write(context: context, HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(buffer), endStream: true))))
    }

    /// Writes and flushes each frame: NIOHTTP2Handler releases the DATA frames of one flush in hash order, so a flush
    /// per many answers would reorder them. APNsFlushCoalescingHandler makes it one socket write per event-loop tick.
    private func write(context: ChannelHandlerContext, _ frame: HTTP2Frame) {
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
    }
}
