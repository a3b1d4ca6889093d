package import NIOCore

/// The requests in flight on one HTTP/2 connection, whichever library speaks the protocol (swift-nio-http2
/// or nghttp2): each stream's answer as it arrives, its deadline, the GOAWAY limit, and the one hand-off of
/// its outcome. A connection handler keeps one on its event loop; the handlers differ only in how they
/// number streams, read frames and arm timers.
///
/// Inlinable: the nghttp2 handler uses it from another module, where unspecialized generic code looked up the
/// metadata of its dictionary and deadline buffer at run time on every call (~2% of the relay's CPU).
package struct APNsHTTP2StreamTable<StreamID: Hashable & Comparable, Extra> {
    /// A request in flight and what its answer has brought so far.
    package struct Stream {
        /// Called once, on the event loop, with the stream's outcome.
        @usableFromInline let completion: @Sendable (APNsHTTP2Exchange) -> Void
        /// What the handler keeps per stream besides the answer (nghttp2: the body still to send).
        package var extra: Extra
        package var status: Int?
        package var apnsID: String?
        package var retryAfter: String?
        package var channelID: String?
        package var body: [UInt8] = []

        @inlinable init(completion: @escaping @Sendable (APNsHTTP2Exchange) -> Void, extra: Extra) {
            self.completion = completion
            self.extra = extra
        }
    }

    @usableFromInline var streams: [StreamID: Stream] = [:]
    /// The open streams' deadlines, earliest first. Deadlines arrive almost always in order (one request
    /// timeout, taken just before the hop to the event loop), so adding one is an append.
    @usableFromInline var deadlines = CircularBuffer<(deadline: NIODeadline, streamID: StreamID)>()
    /// The last-stream-id of the GOAWAY received, if any: streams above it were never processed.
    @usableFromInline package internal(set) var goAwayLastStreamID: StreamID?

    @inlinable package init() {}

    /// The stream, if still in flight; changes go into the table in place.
    @inlinable package subscript(streamID: StreamID) -> Stream? {
        get { streams[streamID] }
        _modify { yield &streams[streamID] }
    }

    /// The earliest deadline of a stream in flight (or of one answered since the last ``expire(now:)``).
    @inlinable package var earliestDeadline: NIODeadline? { deadlines.first?.deadline }

    /// Adds a stream before its first frame is written (a write may fail it synchronously).
    @inlinable package mutating func open(_ streamID: StreamID, completion: @escaping @Sendable (APNsHTTP2Exchange) -> Void, extra: Extra, deadline: NIODeadline) {
        streams[streamID] = Stream(completion: completion, extra: extra)
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
    @inlinable package mutating func finish(_ streamID: StreamID) {
        guard let stream = streams[streamID] else { return }
        guard let status = stream.status else {
            complete(streamID, .failed(.streamError("response without :status")))
            return
        }
        complete(streamID, .answered(APNsHTTP2Answer(
            status: status, apnsID: stream.apnsID, retryAfter: stream.retryAfter, channelID: stream.channelID, body: stream.body)))
    }

    /// Hands the outcome to the sender, once; the stream leaves the table.
    @inlinable package mutating func complete(_ streamID: StreamID, _ result: APNsHTTP2Exchange) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        if deadlines.first?.streamID == streamID { dropAnsweredDeadlines() }
        var result = result
        // After GOAWAY, a stream above last-stream-id was certainly not processed.
        if case .failed(let failure) = result, failure != .deadlineExceeded, let last = goAwayLastStreamID, streamID > last {
            result = .failed(.refused)
        }
        stream.completion(result)
    }

    /// Ends every stream in flight with `failure` (the connection is gone).
    @inlinable package mutating func completeAll(_ failure: APNsTransportFailure) {
        for streamID in Array(streams.keys) { complete(streamID, .failed(failure)) }
        deadlines.removeAll()
    }

    /// A GOAWAY arrived: streams above `lastStreamID` were never processed and go back to the supervisor now, to
    /// be sent on another connection, instead of waiting for this one to close. Returns whether it was the first.
    @inlinable package mutating func goAway(lastStreamID: StreamID) -> Bool {
        let first = goAwayLastStreamID == nil
        let last = min(goAwayLastStreamID ?? lastStreamID, lastStreamID)
        goAwayLastStreamID = last
        for streamID in Array(streams.keys) where streamID > last { complete(streamID, .failed(.refused)) }
        return first
    }

    /// Ends the streams whose deadline passed with `deadlineExceeded`; returns them, for the handler to reset.
    @inlinable package mutating func expire(now: NIODeadline) -> [StreamID] {
        var expired: [StreamID] = []
        while let first = deadlines.first, first.deadline <= now {
            deadlines.removeFirst()
            guard streams[first.streamID] != nil else { continue }
            complete(first.streamID, .failed(.deadlineExceeded))
            expired.append(first.streamID)
        }
        dropAnsweredDeadlines()
        return expired
    }

    /// Drops the deadlines of answered streams from the front (answers come in order, so this keeps up).
    @usableFromInline mutating func dropAnsweredDeadlines() {
        while let first = deadlines.first, streams[first.streamID] == nil { deadlines.removeFirst() }
    }
}
