// A hand-over's steps and their deadlines.

package import KafkaCore

/// Partitions leaving this relay (a revoke, or the graceful stop), step by step. Each step ends
/// when what it waits for arrives or at its deadline, whichever comes first, so the whole
/// hand-over ends by ``deadline`` whatever is unreachable:
///
/// 0. ``Step/finishing`` (a stop only): consumed records go on, sends start, until ``finishUntil`` (two
///    thirds of the drain) or until nothing is left in flight; then nothing new starts.
/// 1. ``Step/draining``: nothing new starts for the partitions; sends in flight finish. At
///    ``drainUntil`` what is still in flight is cancelled: its record stays open for the next owner
///    (a send cancelled after it was written is sent again by it, same `apns-id`). A stop keeps the
///    drain's last third for answers alone, so that a send it starts can be answered before then.
/// 2. ``Step/publishing``: the results of the sends that finished are acknowledged by Kafka.
/// 3. ``Step/storingMarkers``: a progress marker per partition, from what Kafka acknowledged.
/// 4. ``Step/committing``: the offsets of finished records.
/// 5. Done: the revoke is acknowledged (the partitions go to their next owner), or the stop ends.
///
/// Pure: the engine feeds it what it observes and performs what it answers.
package struct HandOverPlan: Sendable, Equatable {
    /// Why the partitions leave.
    package enum Purpose: Sendable, Equatable {
        /// The group takes them away: their state goes at the end.
        case revoke
        /// The relay stops.
        case stop
    }

    /// Where the hand-over is.
    package enum Step: Sendable, Equatable {
        /// A stop's records go on: sends still start.
        case finishing
        case draining
        case publishing
        /// Markers handed over and not yet acknowledged.
        case storingMarkers(left: Int)
        /// The commit request `request` is out.
        case committing(request: UInt64)
        case done
    }

    /// What the engine does next for the hand-over.
    package enum Action: Sendable, Equatable {
        /// Start nothing new for the partitions (a stop's, at the end of ``Step/finishing``): queued sends are
        /// dropped, sends in flight go on.
        case startNothingNew
        /// Cancel the partitions' sends still in flight.
        case cancelSends
        /// Write the partitions' progress markers (the engine answers how many it wrote).
        case storeMarkers
        /// Commit the partitions' finished offsets (the engine answers the request id).
        case commit
        /// The hand-over is done.
        case finish
    }

    package let id: UInt64
    package let purpose: Purpose
    package private(set) var partitions: [TopicPartition]
    package private(set) var step: Step
    /// The next owner will know exactly what was finished: the results of finished sends are
    /// published and the markers stored. (The commit only saves it reading records the markers
    /// skip.) When not, it redoes more: the same notifications again, never a badge twice.
    package private(set) var isComplete = true
    /// When a stop's records stop starting sends (for a revoke: at its start).
    package let finishUntil: Int64
    /// When work still in flight is cancelled.
    package let drainUntil: Int64
    /// When the results of finished sends have had their time.
    package let publishUntil: Int64
    /// When the markers have had theirs.
    package let markersUntil: Int64
    /// When everything is over.
    package let deadline: Int64

    /// A hand-over starting at `now`: draining until `now + drain`, everything over by `now + total`.
    /// A stop's records go on for the drain's first two thirds. What is left after the drain is
    /// shared: a third to publishing, a third to the markers, a third to the commit.
    package init(id: UInt64, purpose: Purpose, partitions: [TopicPartition], now: Int64, drain: Int64, total: Int64) {
        self.id = id
        self.purpose = purpose
        self.partitions = partitions
        let total = max(0, total)
        let drain = min(max(0, drain), total)
        drainUntil = now + drain
        finishUntil = purpose == .stop ? now + drain * 2 / 3 : now
        step = purpose == .stop ? .finishing : .draining
        let rest = total - drain
        publishUntil = drainUntil + rest / 3
        markersUntil = publishUntil + rest / 3
        deadline = now + total
    }

    /// What the partitions have in flight now.
    package struct Observation: Sendable, Equatable {
        /// Sends handed out and not answered (or a stop's records not finished).
        package var inFlight: Bool
        /// Results and dead letters handed to Kafka and not acknowledged.
        package var publishing: Bool

        package init(inFlight: Bool, publishing: Bool) {
            self.inFlight = inFlight
            self.publishing = publishing
        }

        /// Nothing in flight, nothing publishing.
        var isIdle: Bool { !inFlight && !publishing }
    }

    /// Moves on as far as `observed` and `now` allow; returns what to do, in order. After
    /// ``Action/storeMarkers`` call ``markersWritten(_:)``, after ``Action/commit``
    /// ``commitRequested(_:)``.
    package mutating func advance(_ observed: Observation, now: Int64) -> [Action] {
        var actions: [Action] = []
        while true {
            switch step {
            case .finishing:
                guard observed.isIdle || now >= finishUntil else { return actions }
                actions.append(.startNothingNew)
                step = .draining
            case .draining:
                guard observed.isIdle || now >= drainUntil else { return actions }
                if observed.inFlight { actions.append(.cancelSends) }
                step = .publishing
            case .publishing:
                guard !observed.publishing || now >= publishUntil else { return actions }
                if observed.publishing { isComplete = false }
                step = .storingMarkers(left: -1)
                actions.append(.storeMarkers)
                return actions
            case .storingMarkers(let left):
                // Markers withheld (the lease had lapsed): asked for again until they are written or their time is up.
                if left == -1 && now < markersUntil {
                    actions.append(.storeMarkers)
                    return actions
                }
                guard left == 0 || now >= markersUntil else { return actions }
                if left != 0 { isComplete = false }
                step = .committing(request: 0)
                actions.append(.commit)
                return actions
            case .committing:
                guard now >= deadline else { return actions }
                step = .done
                actions.append(.finish)
                return actions
            case .done:
                return actions
            }
        }
    }

    /// These partitions are no longer this hand-over's (the consumer gave them up at once): it hands over the rest.
    package mutating func remove(_ leaving: [TopicPartition]) {
        partitions.removeAll(where: leaving.contains)
    }

    /// The engine wrote `count` markers for ``Action/storeMarkers``.
    package mutating func markersWritten(_ count: Int) {
        if case .storingMarkers = step { step = .storingMarkers(left: count) }
    }

    /// The markers could not be written (the ownership lease had lapsed): ``Action/storeMarkers`` comes again with
    /// the next ``advance(_:now:)`` until they are written, or their time is up (then the hand-over is not complete).
    package mutating func markersWithheld() {
        if case .storingMarkers = step { step = .storingMarkers(left: -1) }
    }

    /// Whether it waits for the ownership lease to write its markers.
    package var waitsForLease: Bool { step == .storingMarkers(left: -1) }

    /// One of the markers was stored, or failed to be: either way it no longer holds the hand-over.
    package mutating func markerSettled(stored: Bool) {
        guard case .storingMarkers(let left) = step, left > 0 else { return }
        if !stored { isComplete = false }
        step = .storingMarkers(left: left - 1)
    }

    /// The engine sent commit request `request` for ``Action/commit``.
    package mutating func commitRequested(_ request: UInt64) {
        if case .committing = step { step = .committing(request: request) }
    }

    /// A commit answered (accepted or refused): when it is this hand-over's, the hand-over is done.
    package mutating func commitAnswered(_ request: UInt64) -> [Action] {
        guard case .committing(let pending) = step, pending == request else { return [] }
        step = .done
        return [.finish]
    }

    /// Whether the hand-over is over.
    package var isDone: Bool { step == .done }
}
