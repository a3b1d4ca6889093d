package import Foundation
package import NIOCore

/// The requests in flight on one HTTP/2 connection, whichever library speaks the protocol (swift-nio-http2
/// or nghttp2): each stream's answer as it arrives, its deadline, the GOAWAY limit, and the one hand-off of
/// its outcome. A connection's ``APNsHTTP2ConnectionCore`` keeps one on its event loop; the handlers differ
/// only in how they number streams and read and write frames.
///
/// Not generic on purpose: the nghttp2 handler lives in another module, where a generic table runs unspecialized
/// and looks up its dictionary's and deadline buffer's type metadata at run time on every call, several calls per
/// request. Stream ids are `Int32`, as HTTP/2 and nghttp2 number them.
package struct APNsHTTP2StreamTable {
    package typealias StreamID = Int32

    /// Who a stream's outcome goes to, once, on the event loop.
    package enum Completion: Sendable {
        /// A notification's attempt: handed the exchange as the supervisor reads it. The sender's own closure is
        /// stored, not wrapped in another per request.
        case attempt(@Sendable (APNsAttemptResult) -> Void)
        /// Any other request (the broadcast channel API): handed the exchange as it is.
        case exchange(@Sendable (APNsHTTP2Exchange) -> Void)

        /// Hands `result` over.
        package func callAsFunction(_ result: APNsHTTP2Exchange) {
            switch self {
            case .attempt(let completion): completion(result.attemptResult)
            case .exchange(let completion): completion(result)
            }
        }
    }

    /// A request in flight and what its answer has brought so far.
    package struct Stream {
        /// Called once, on the event loop, with the stream's outcome.
        fileprivate let completion: Completion
        /// The request body (nghttp2 reads it as it builds DATA frames; the swift-nio-http2 handler writes
        /// it at once and leaves this empty) and how much of it is sent.
        package var outgoing: [UInt8]
        package var outgoingSent = 0
        package var status: Int?
        /// The `apns-id` (device sends) or `apns-request-id` header, read as a UUID: `nil` when absent or not one.
        package var apnsID: UUID?
        /// Whether an id header came (its first value is kept, a UUID or not).
        fileprivate var apnsIDSeen = false
        package var retryAfter: String?
        package var channelID: String?
        package var uniqueID: String?
        package var body: [UInt8] = []

        /// The response headers the sender reads besides `:status` and the id.
        package enum Header { case retryAfter, channelID, uniqueID }

        /// Keeps the first `:status` (a trailer block repeats nothing APNs sends).
        package mutating func keepFirst(status value: Int?) {
            if status == nil { status = value }
        }

        /// Keeps the first id header's value.
        package mutating func keepFirst(apnsID value: UUID?) {
            guard !apnsIDSeen else { return }
            apnsIDSeen = true
            apnsID = value
        }

        /// Keeps the first value of `header`.
        package mutating func keepFirst(_ header: Header, _ value: String) {
            switch header {
            case .retryAfter: if retryAfter == nil { retryAfter = value }
            case .channelID: if channelID == nil { channelID = value }
            case .uniqueID: if uniqueID == nil { uniqueID = value }
            }
        }

        /// Copies the next part of `outgoing`, at most `length` bytes, into `buffer`; returns how many bytes it
        /// copied and whether they end the body.
        package mutating func takeOutgoing(into buffer: UnsafeMutablePointer<UInt8>, length: Int) -> (count: Int, isLast: Bool) {
            let count = min(length, outgoing.count - outgoingSent)
            if count > 0 { outgoing.withUnsafeBufferPointer { buffer.update(from: $0.baseAddress! + outgoingSent, count: count) } }
            outgoingSent += count
            return (count, outgoingSent == outgoing.count)
        }
    }

    private var streams: [StreamID: Stream] = [:]
    /// The open streams' deadlines, earliest first. Deadlines arrive almost always in order (one request
    /// timeout, taken just before the hop to the event loop), so adding one is an append.
    private var deadlines = CircularBuffer<(deadline: NIODeadline, streamID: StreamID)>()
    /// The last-stream-id of the GOAWAY received, if any: streams above it were never processed.
    package private(set) var goAwayLastStreamID: StreamID?

    package init() {}

    /// Whether the stream is still in flight (without copying it out).
    package func contains(_ streamID: StreamID) -> Bool { streams.index(forKey: streamID) != nil }

    /// Changes the stream in place, if still in flight; `nil` when it is not.
    ///
    /// Not a `_modify` subscript: `yield &streams[id]` yields an optional copy of the stream from a coroutine
    /// whose frame is too large for its inline buffer, so every change (each response header, each DATA chunk)
    /// cost a malloc, a free and two copies of the stream. Here the change goes straight into the storage.
    @discardableResult
    package mutating func update<Result>(_ streamID: StreamID, _ body: (inout Stream) -> Result) -> Result? {
        guard let index = streams.index(forKey: streamID) else { return nil }
        return body(&streams.values[index])
    }

    /// The earliest deadline of a stream in flight (or of one answered since the last ``expire(now:)``).
    package var earliestDeadline: NIODeadline? { deadlines.first?.deadline }

    /// Adds a stream before its first frame is written (a write may fail it synchronously).
    package mutating func open(_ streamID: StreamID, completion: Completion, outgoing: [UInt8] = [], deadline: NIODeadline) {
        streams[streamID] = Stream(completion: completion, outgoing: outgoing)
        var position = deadlines.endIndex
        while position > deadlines.startIndex, deadlines[deadlines.index(before: position)].deadline > deadline {
            position = deadlines.index(before: position)
        }
        if position == deadlines.endIndex {
            deadlines.append((deadline, streamID))
        } else {
            deadlines.insert((deadline, streamID), at: position)  // rare, and linear: CircularBuffer rebuilds
        }
    }

    /// The stream's response ended: its answer, or a stream error when it came without `:status`.
    package mutating func finish(_ streamID: StreamID) {
        // Taken out once (not copied, then removed): the stream's answer moves into the outcome.
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        guard let status = stream.status else {
            complete(streamID, stream, .failed(.streamError("response without :status")))
            return
        }
        complete(streamID, stream, .answered(APNsHTTP2Answer(
            status: status, apnsID: stream.apnsID, retryAfter: stream.retryAfter, channelID: stream.channelID, uniqueID: stream.uniqueID,
            body: stream.body)))
    }

    /// Hands the outcome to the sender, once; the stream leaves the table.
    package mutating func complete(_ streamID: StreamID, _ result: APNsHTTP2Exchange) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        complete(streamID, stream, result)
    }

    /// Completes a stream already taken out of the table.
    private mutating func complete(_ streamID: StreamID, _ stream: Stream, _ result: APNsHTTP2Exchange) {
        if deadlines.first?.streamID == streamID { dropAnsweredDeadlines() }
        var result = result
        // After GOAWAY, a stream above last-stream-id was certainly not processed.
        if case .failed(let failure) = result, failure != .deadlineExceeded, let last = goAwayLastStreamID, streamID > last {
            result = .failed(.goingAway)
        }
        stream.completion(result)
    }

    /// Ends every stream in flight with `failure` (the connection is gone).
    package mutating func completeAll(_ failure: APNsTransportFailure) {
        for streamID in Array(streams.keys) { complete(streamID, .failed(failure)) }
        deadlines.removeAll()
    }

    /// A GOAWAY arrived: streams above `lastStreamID` were never processed and go back to the supervisor now, to
    /// be sent on another connection, instead of waiting for this one to close. Returns whether it was the first.
    package mutating func goAway(lastStreamID: StreamID) -> Bool {
        let first = goAwayLastStreamID == nil
        let last = min(goAwayLastStreamID ?? lastStreamID, lastStreamID)
        goAwayLastStreamID = last
        for streamID in Array(streams.keys) where streamID > last { complete(streamID, .failed(.goingAway)) }
        return first
    }

    /// Ends the streams whose deadline passed with `deadlineExceeded`; returns them, for the handler to reset.
    package mutating func expire(now: NIODeadline) -> [StreamID] {
        var expired: [StreamID] = []
        while let first = deadlines.first, first.deadline <= now {
            deadlines.removeFirst()
            guard streams.index(forKey: first.streamID) != nil else { continue }
            complete(first.streamID, .failed(.deadlineExceeded))
            expired.append(first.streamID)
        }
        dropAnsweredDeadlines()
        return expired
    }

    /// Drops the deadlines of answered streams from the front (answers come in order, so this keeps up).
    private mutating func dropAnsweredDeadlines() {
        while let first = deadlines.first, streams.index(forKey: first.streamID) == nil { deadlines.removeFirst() }
    }
}
