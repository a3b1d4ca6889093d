import DequeModule
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A front for a Kafka-protocol broker in tests: a TCP proxy on loopback, one listener per upstream broker, that makes
/// the broker behind it keep two rules of Kafka's group coordinator (2.5 and later) that noida-db and librdkafka's mock
/// cluster do not (``KafkaGroupRules``):
/// - a member that is not heard from for its session timeout leaves its group: the front sends the broker a LeaveGroup on
///   its behalf, as Kafka expires it (noida-db never expires a member that dies without leaving);
/// - a TxnOffsetCommit whose group metadata names a member the group no longer has, or another generation than the
///   group's, is answered UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION without reaching the broker (KIP-447's fencing of a
///   stale member's transaction, which both brokers skip).
///
/// - a transaction still open its `transaction.timeout.ms` after it began is aborted (an InitProducerId for its
///   transactional id, which aborts it and bumps the id's epoch), as Kafka's coordinator does with a producer that
///   died mid-transaction (noida-db keeps it open, holding back `read_committed` readers, for good);
/// - a static member (`group.instance.id`, KIP-345) whose process restarted joins again within its session and gets
///   its place back, the group's generation and the others' assignments untouched (noida-db 0.2.3 gives it a fresh
///   assignment beside the one it still counts, so two members own the same partitions).
///
/// With `holdingEmptyFetches`, also a Fetch as Kafka's broker answers it: an answer without records waits for data
/// or the request's MaxWaitMs, the front asking the broker again every ``fetchPollInterval`` (noida-db answers an empty
/// Fetch at once, so librdkafka asks again at once, and every idle consumer keeps a core of each busy).
///
/// Everything else passes unchanged, but the brokers' addresses in Metadata, FindCoordinator and DescribeCluster
/// answers, whose ports are replaced with the front's so that clients keep talking through it. Answers go back to a
/// client in the order of its requests, the front's own among them.
public final class KafkaBrokerFront: Sendable {
    /// What the front did on its own, for a test to read.
    public enum Event: Equatable, Sendable {
        /// A member's session ran out: the front took it out of its group.
        case expired(group: String, member: String)
        /// A TxnOffsetCommit was answered with this error code.
        case refused(group: String, member: String, generation: Int32, errorCode: Int16)
        /// A transaction outlived its timeout: the front had the broker abort it.
        case transactionTimedOut(transactionalID: String)
        /// A static member joined again without its member id within its session: the front gave it its place back
        /// (``KafkaGroupRules/staticRejoin(_:now:)``), the broker and the other members untold.
        case staticMemberRejoined(group: String, instance: String, member: String)
    }

    /// The `bootstrap.servers` of the front: its listeners, in the order of the upstream brokers.
    public let bootstrapServers: String

    private let channels: [any Channel]
    private let expiry: RepeatedTask
    private let state: NIOLockedValueBox<FrontState>

    /// What the front did on its own so far.
    public var events: [Event] { state.withLockedValue { $0.events } }

    /// Fetch requests sent to the brokers so far, each asking again for a held answer counted.
    public var fetchesSent: Int { state.withLockedValue { $0.fetchesSent } }

    /// Holds every `api` request for `delay` before passing it to the broker (a slow link or a busy broker queue);
    /// `nil` passes them at once again. Later requests of the connection are not held behind it (a test's fault, not
    /// the protocol's order).
    public func delayRequests(ofAPIKey api: Int16, by delay: Duration?) {
        state.withLockedValue { $0.delays[api] = delay }
    }

    /// Answers the next `count` TxnOffsetCommit requests with `errorCode` whatever their group metadata, as a broker
    /// that refuses them for its own reasons (a fault for a test to inject).
    public func refuseTxnOffsetCommits(errorCode: Int16, count: Int = 1) {
        state.withLockedValue { $0.injected += Array(repeating: errorCode, count: count) }
    }

    /// How often the front asks the broker again for a Fetch whose answer it holds (``init(upstreams:holdingEmptyFetches:)``).
    public static let fetchPollInterval: Duration = .milliseconds(5)

    /// Starts a listener for each of `upstreams` (`host:port`, each a broker of one cluster) on that broker's host;
    /// `holdingEmptyFetches`: an empty Fetch answer waits as Kafka's does.
    public init(upstreams: String, holdingEmptyFetches: Bool = false) async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        let addresses = try upstreams.split(separator: ",").map { entry -> (host: String, port: Int) in
            guard let colon = entry.lastIndex(of: ":"), let port = Int(entry[entry.index(after: colon)...]) else {
                throw KafkaWireError(description: "not host:port: \(entry)")
            }
            return (String(entry[..<colon]), port)
        }
        let state = NIOLockedValueBox(FrontState())
        self.state = state
        let ports = NIOLockedValueBox([Int: Int]())
        var channels: [any Channel] = []
        for (index, upstream) in addresses.enumerated() {
            let channel = try await ServerBootstrap(group: group)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                // Nothing is read from a client until its upstream connection is up and the handlers are in place.
                .childChannelOption(.autoRead, value: false)
                                .childChannelInitializer { client in
                    // Both channels of a connection run on the client's event loop, where the connection lives.
                    let connection = NIOLoopBound(FrontConnection(client: client, upstreamIndex: index, state: state, ports: ports,
                                                                  holdingEmptyFetches: holdingEmptyFetches),
                                                  eventLoop: client.eventLoop)
                    return ClientBootstrap(group: client.eventLoop)
                        .channelInitializer { channel in
                            channel.eventLoop.makeCompletedFuture {
                                try channel.pipeline.syncOperations.addHandlers(
                                    ByteToMessageHandler(KafkaFrameDecoder()), UpstreamSide(connection: connection.value))
                            }
                        }
                        .connect(host: upstream.host, port: upstream.port)
                        .flatMapThrowing { upstreamChannel in
                            connection.value.upstream = upstreamChannel
                            try client.pipeline.syncOperations.addHandlers(ByteToMessageHandler(KafkaFrameDecoder()), ClientSide(connection: connection.value))
                            try client.syncOptions?.setOption(.autoRead, value: true)
                        }
                }
                .bind(host: upstream.host, port: 0).get()
            ports.withLockedValue { $0[upstream.port] = channel.localAddress?.port ?? 0 }
            channels.append(channel)
        }
        self.channels = channels
        bootstrapServers = zip(addresses, channels).map { "\($0.0.host):\($0.1.localAddress?.port ?? 0)" }.joined(separator: ",")
        let loop = group.next()
        expiry = loop.scheduleRepeatedTask(initialDelay: .milliseconds(100), delay: .milliseconds(100)) { _ in
            let (expired, timedOut) = state.withLockedValue { state in
                let now = ContinuousClock.now
                let expired = state.rules.expire(now: now)
                let timedOut = state.transactions.expire(now: now)
                state.events += expired.map { .expired(group: $0.group, member: $0.member) }
                state.events += timedOut.map { .transactionTimedOut(transactionalID: $0.transactionalID) }
                return (expired, timedOut)
            }
            for member in expired {
                let request = KafkaLeaveGroupRequest(groupID: member.group, memberIDs: [member.member])
                Self.send(request.write(correlationID: 1, clientID: "kafka-broker-front"), to: addresses[member.upstream], on: loop)
            }
            for transaction in timedOut {
                let request = KafkaInitProducerIDRequest(transactionalID: transaction.transactionalID,
                                                         transactionTimeoutMilliseconds: Int32(transaction.timeout.components.seconds * 1_000))
                Self.send(request.write(correlationID: 1, clientID: "kafka-broker-front"), to: addresses[transaction.upstream], on: loop)
            }
        }
    }

    /// Stops listening and closes every connection through the front.
    public func close() async {
        expiry.cancel()
        for channel in channels { try? await channel.close() }
    }

    /// Sends the broker a request of the front's own on a connection of its own, closed once answered.
    private static func send(_ request: ByteBuffer, to upstream: (host: String, port: Int), on loop: any EventLoop) {
        ClientBootstrap(group: loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers(ByteToMessageHandler(KafkaFrameDecoder()), CloseOnAnswer())
                }
            }
            .connect(host: upstream.host, port: upstream.port)
            .whenSuccess { channel in channel.writeAndFlush(KafkaFrameDecoder.framed(request), promise: nil) }
    }
}

/// The front's state, shared by its connections: the group rules, what it did, the refusals a test injected.
struct FrontState {
    var rules = KafkaGroupRules()
    var transactions = KafkaTransactionTimeouts()
    var events: [KafkaBrokerFront.Event] = []
    var injected: [Int16] = []
    var delays: [Int16: Duration] = [:]
    var fetchesSent = 0
}

/// A client's connection through the front and its upstream connection, on one event loop: the requests waiting for
/// their answers, in order.
private final class FrontConnection {
    let client: any Channel
    var upstream: (any Channel)?
    let upstreamIndex: Int
    let state: NIOLockedValueBox<FrontState>
    let ports: NIOLockedValueBox<[Int: Int]>

    /// A request's place in the answers' order: its answer once it came (or the front's own).
    struct Waiting {
        enum Context {
            case none
            case join(KafkaJoinGroupRequest)
            case sync(KafkaMemberRequest)
            case initProducerID(KafkaInitProducerIDRequest)
            case endTxn(transactionalID: String)
            /// A Fetch whose empty answers the front holds until `deadline`, asking again with `request`.
            case fetch(request: ByteBuffer, deadline: ContinuousClock.Instant)
        }

        var header: KafkaRequestHeader
        var context: Context
        var answer: ByteBuffer?
    }

    private var waiting = Deque<Waiting>()
    let holdingEmptyFetches: Bool

    init(client: any Channel, upstreamIndex: Int, state: NIOLockedValueBox<FrontState>,
         ports: NIOLockedValueBox<[Int: Int]>, holdingEmptyFetches: Bool) {
        self.holdingEmptyFetches = holdingEmptyFetches
        self.client = client
        self.upstreamIndex = upstreamIndex
        self.state = state
        self.ports = ports
    }

    func fromClient(_ request: ByteBuffer) {
        var body = request
        guard let header = try? KafkaRequestHeader.read(from: &body) else { return forward(request, waiting: nil) }
        var entry = Waiting(header: header, context: .none)
        let now = ContinuousClock.now
        do {
            switch header.api {
            case .joinGroup:
                let join = try KafkaJoinGroupRequest.read(&body, version: header.apiVersion)
                let rejoined = state.withLockedValue { state -> KafkaJoinGroupResponse? in
                    guard header.apiVersion >= 2, header.apiVersion <= 6, let answer = state.rules.staticRejoin(join, now: now) else {
                        state.rules.joinRequested(join, now: now)
                        return nil
                    }
                    state.events.append(.staticMemberRejoined(group: join.groupID, instance: join.groupInstanceID ?? "", member: answer.memberID))
                    return answer
                }
                if let rejoined {
                    entry.answer = rejoined.encoded(correlationID: header.correlationID, version: header.apiVersion)
                    waiting.append(entry)
                    return answerInOrder()
                }
                entry.context = .join(join)
            case .syncGroup:
                let sync = try KafkaMemberRequest.read(&body, api: .syncGroup, version: header.apiVersion)
                state.withLockedValue { $0.rules.syncRequested(sync, now: now) }
                entry.context = .sync(sync)
            case .heartbeat:
                let member = try KafkaMemberRequest.read(&body, api: .heartbeat, version: header.apiVersion)
                state.withLockedValue { $0.rules.heard(member, now: now) }
            case .offsetCommit where header.apiVersion >= 1:
                let member = try KafkaMemberRequest.read(&body, api: .offsetCommit, version: header.apiVersion)
                state.withLockedValue { $0.rules.heard(member, now: now) }
            case .leaveGroup:
                let leave = try KafkaLeaveGroupRequest.read(&body, version: header.apiVersion)
                state.withLockedValue { $0.rules.left(leave) }
            case .initProducerID:
                entry.context = .initProducerID(try KafkaInitProducerIDRequest.read(&body, version: header.apiVersion))
            case .addPartitionsToTxn where header.apiVersion <= 3, .addOffsetsToTxn:
                let id = try KafkaTransactionalRequest.transactionalID(body, api: header.api!, version: header.apiVersion)
                state.withLockedValue { $0.transactions.joined(id, now: now) }
            case .endTxn:
                entry.context = .endTxn(transactionalID: try KafkaTransactionalRequest.transactionalID(body, api: .endTxn, version: header.apiVersion))
            case .txnOffsetCommit:
                let commit = try KafkaTxnOffsetCommitRequest.read(&body, version: header.apiVersion)
                let verdict = state.withLockedValue { state in
                    let verdict = state.injected.isEmpty ? state.rules.verdict(on: commit) : .refuse(errorCode: state.injected.removeFirst())
                    if case .refuse(let code) = verdict {
                        state.events.append(.refused(group: commit.groupID, member: commit.memberID, generation: commit.generationID, errorCode: code))
                    }
                    return verdict
                }
                if case .refuse(let code) = verdict {
                    entry.answer = commit.refusal(code, correlationID: header.correlationID, version: header.apiVersion)
                    waiting.append(entry)
                    return answerInOrder()
                }
            case .fetch where holdingEmptyFetches:
                let wait = try KafkaFetch.maxWait(body, version: header.apiVersion)
                if wait > .zero { entry.context = .fetch(request: request, deadline: now + wait) }
            case .produce where KafkaAPIKey.produceExpectsNoResponse(body, version: header.apiVersion):
                return forward(request, waiting: nil)
            default:
                break
            }
        } catch {
            // A request the front cannot read goes on unchanged, unjudged.
        }
        forward(request, waiting: entry)
    }

    func fromUpstream(_ response: ByteBuffer) {
        guard let correlationID = response.getInteger(at: response.readerIndex, as: Int32.self),
              let index = waiting.firstIndex(where: { $0.answer == nil && $0.header.correlationID == correlationID }) else {
            client.close(promise: nil)
            return
        }
        var answer = response
        let header = waiting[index].header
        if let api = header.api {
            var body = response
            body.moveReaderIndex(forwardBy: 4)
            if api.responseHeaderIsFlexible(header.apiVersion) { try? body.skipKafkaTaggedFields() }
            let now = ContinuousClock.now
            switch waiting[index].context {
            case .join(let request):
                if let join = try? KafkaJoinGroupResponse.read(&body, version: header.apiVersion) {
                    state.withLockedValue { $0.rules.joinAnswered(join, to: request, upstream: upstreamIndex, now: now) }
                }
            case .sync(let request):
                state.withLockedValue { $0.rules.syncAnswered(request, now: now) }
            case .initProducerID(let request):
                state.withLockedValue { $0.transactions.initialised(request, upstream: upstreamIndex) }
            case .endTxn(let transactionalID):
                state.withLockedValue { $0.transactions.ended(transactionalID) }
            case .fetch(let request, let deadline):
                if now + KafkaBrokerFront.fetchPollInterval < deadline, (try? KafkaFetch.isEmpty(body, version: header.apiVersion)) == true {
                    let framed = KafkaFrameDecoder.framed(request)
                    client.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(KafkaBrokerFront.fetchPollInterval)) {
                        self.state.withLockedValue { $0.fetchesSent += 1 }
                        self.upstream?.writeAndFlush(framed, promise: nil)
                    }
                    return
                }
            case .none:
                if let brokers = try? KafkaBrokerAddresses.find(in: body, api: api, version: header.apiVersion) {
                    let ports = self.ports.withLockedValue { $0 }
                    for broker in brokers {
                        if let front = ports[Int(broker.port)] { answer.setInteger(Int32(front), at: broker.portIndex) }
                    }
                }
            }
        }
        waiting[index].answer = answer
        answerInOrder()
    }

    private func forward(_ request: ByteBuffer, waiting entry: Waiting?) {
        if let entry { waiting.append(entry) }
        if entry?.header.api == .fetch { state.withLockedValue { $0.fetchesSent += 1 } }
        let framed = KafkaFrameDecoder.framed(request)
        if let entry, let delay = state.withLockedValue({ $0.delays[entry.header.apiKey] }) {
            client.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(delay)) {
                self.upstream?.writeAndFlush(framed, promise: nil)
            }
            return
        }
        upstream?.writeAndFlush(framed, promise: nil)
    }

    /// Writes the answers now first in line.
    private func answerInOrder() {
        var wrote = false
        while let first = waiting.first, let answer = first.answer {
            waiting.removeFirst()
            client.write(KafkaFrameDecoder.framed(answer), promise: nil)
            wrote = true
        }
        if wrote { client.flush() }
    }

    func close() {
        client.close(promise: nil)
        upstream?.close(promise: nil)
    }
}

private final class ClientSide: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let connection: FrontConnection
    init(connection: FrontConnection) { self.connection = connection }
    func channelRead(context: ChannelHandlerContext, data: NIOAny) { connection.fromClient(unwrapInboundIn(data)) }
    func channelInactive(context: ChannelHandlerContext) { connection.close() }
    func errorCaught(context: ChannelHandlerContext, error: any Error) { connection.close() }
}

private final class UpstreamSide: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let connection: FrontConnection
    init(connection: FrontConnection) { self.connection = connection }
    func channelRead(context: ChannelHandlerContext, data: NIOAny) { connection.fromUpstream(unwrapInboundIn(data)) }
    func channelInactive(context: ChannelHandlerContext) { connection.close() }
    func errorCaught(context: ChannelHandlerContext, error: any Error) { connection.close() }
}

private final class CloseOnAnswer: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    func channelRead(context: ChannelHandlerContext, data: NIOAny) { context.close(promise: nil) }
}

/// Kafka's framing: each message is preceded by its size, an INT32.
struct KafkaFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let size = buffer.getInteger(at: buffer.readerIndex, as: Int32.self), buffer.readableBytes >= 4 + Int(size) else {
            return .needMoreData
        }
        buffer.moveReaderIndex(forwardBy: 4)
        context.fireChannelRead(wrapInboundOut(buffer.readSlice(length: Int(size))!))
        return .continue
    }

    static func framed(_ message: ByteBuffer) -> ByteBuffer {
        var framed = ByteBuffer()
        framed.reserveCapacity(4 + message.readableBytes)
        framed.writeInteger(Int32(message.readableBytes))
        framed.writeImmutableBuffer(message)
        return framed
    }
}
