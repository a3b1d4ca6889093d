/// The engine's offset commits as a value: when the periodic commit is next due, the one in flight, and when each
/// unanswered request was made (an accepted commit confirms the ownership lease as of then). Pure: times are the
/// engine's monotonic milliseconds, handed in.
package struct CommitRequests: Sendable {
    /// How often the periodic commit goes out (`relay.commit_interval`).
    package let intervalMilliseconds: Int64
    /// How long a periodic commit may go unanswered before the next one is sent anyway.
    package static let answerTimeoutMilliseconds: Int64 = 10_000

    private var nextDueAt: Int64 = .min
    /// The periodic commit waiting for its answer: its request and when it was made.
    private var periodicInFlight: (request: UInt64, at: Int64)?
    /// When each request still unanswered was made.
    private var requestedAt: [UInt64: Int64] = [:]
    private var lastRequest: UInt64 = 0

    package init(intervalMilliseconds: Int64) {
        self.intervalMilliseconds = intervalMilliseconds
    }

    /// The relay starts at `now`: the first periodic commit is an interval away.
    package mutating func start(now: Int64) {
        nextDueAt = now + intervalMilliseconds
    }

    /// Whether the periodic commit goes out at `now`: none is in flight (one unanswered for
    /// ``answerTimeoutMilliseconds`` is forgotten) and its time came, or `urgent` (work waits for the lease). When it
    /// does, the next one is an interval away.
    package mutating func periodicDue(now: Int64, urgent: Bool) -> Bool {
        if let pending = periodicInFlight, now - pending.at >= Self.answerTimeoutMilliseconds {
            periodicInFlight = nil
            requestedAt[pending.request] = nil
        }
        guard periodicInFlight == nil, now >= nextDueAt || urgent else { return false }
        nextDueAt = now + intervalMilliseconds
        return true
    }

    /// A new request made at `now`; `periodic`: the periodic commit's (the one in flight until answered).
    package mutating func request(at now: Int64, periodic: Bool) -> UInt64 {
        lastRequest += 1
        requestedAt[lastRequest] = now
        if periodic { periodicInFlight = (lastRequest, now) }
        return lastRequest
    }

    /// Request `request` was answered (or needs no answer): when it was made, if it was still waiting.
    @discardableResult
    package mutating func answered(_ request: UInt64) -> Int64? {
        if periodicInFlight?.request == request { periodicInFlight = nil }
        return requestedAt.removeValue(forKey: request)
    }

    /// Requests waiting for their answer.
    package var waiting: Int { requestedAt.count }
}
