import KafkaCore
import Testing
@testable import RelayCore

/// The hand-over's steps alone: each ends at what it waits for or at its deadline, whichever comes first.
@Suite("HandOverPlan: a hand-over's steps and deadlines")
struct HandOverPlanTests {
    static let partitions = [TopicPartition("push.events", 0), TopicPartition("push.events", 1)]

    func plan(now: Int64 = 1_000, drain: Int64 = 6_000, total: Int64 = 9_000) -> HandOverPlan {
        HandOverPlan(id: 7, purpose: .revoke, partitions: Self.partitions, now: now, drain: drain, total: total)
    }

    static let idle = HandOverPlan.Observation(inFlight: false, publishing: false)

    @Test("the drain gets its share; what is left is a third each to publishing, the markers and the commit")
    func deadlines() {
        let split = plan()
        #expect(split.drainUntil == 7_000 && split.publishUntil == 8_000 && split.markersUntil == 9_000 && split.deadline == 10_000)
        let clamped = plan(drain: 20_000, total: -5)
        #expect(clamped.drainUntil == 1_000 && clamped.deadline == 1_000, "no budget: every step is due at once")
    }

    @Test("with nothing in flight it goes straight to the markers, then the commit, and ends at the commit's answer")
    func everythingAnswers() {
        var handOver = plan()
        #expect(handOver.advance(Self.idle, now: 1_000) == [.storeMarkers])
        handOver.markersWritten(2)
        #expect(handOver.advance(Self.idle, now: 1_001).isEmpty, "two markers not yet acknowledged")
        handOver.markerSettled(stored: true)
        #expect(handOver.advance(Self.idle, now: 1_002).isEmpty)
        handOver.markerSettled(stored: true)
        #expect(handOver.advance(Self.idle, now: 1_003) == [.commit])
        handOver.commitRequested(5)
        #expect(handOver.commitAnswered(4).isEmpty, "another commit's answer")
        #expect(handOver.advance(Self.idle, now: 1_004).isEmpty)
        #expect(handOver.commitAnswered(5) == [.finish])
        #expect(handOver.isDone && handOver.isComplete)
        #expect(handOver.advance(Self.idle, now: 1_005).isEmpty, "nothing after the end")
    }

    @Test("a stop's records start sends for the drain's first two thirds (or until nothing is in flight); the last third is for answers")
    func stopFinishesThenDrains() {
        let busy = HandOverPlan.Observation(inFlight: true, publishing: false)
        var stop = HandOverPlan(id: 8, purpose: .stop, partitions: Self.partitions, now: 1_000, drain: 6_000, total: 8_000)
        #expect(stop.finishUntil == 5_000 && stop.drainUntil == 7_000)
        #expect(stop.advance(busy, now: 4_999).isEmpty, "records go on")
        #expect(stop.advance(busy, now: 5_000) == [.startNothingNew])
        #expect(stop.advance(busy, now: 6_999).isEmpty, "sends on the wire get the rest of the drain")
        #expect(stop.advance(Self.idle, now: 6_000 + 500) == [.storeMarkers], "answered: the hand-over goes on at once")

        var finished = HandOverPlan(id: 9, purpose: .stop, partitions: Self.partitions, now: 1_000, drain: 6_000, total: 8_000)
        #expect(finished.advance(Self.idle, now: 1_000) == [.startNothingNew, .storeMarkers], "nothing left: straight to the markers")
        #expect(plan().finishUntil == 1_000, "a revoke starts nothing new from its start")
    }

    @Test("sends still in flight at the drain's deadline are cancelled; what finished is handed over completely")
    func drainEndsInCancelling() {
        var handOver = plan()
        let busy = HandOverPlan.Observation(inFlight: true, publishing: false)
        #expect(handOver.advance(busy, now: 6_999).isEmpty)
        #expect(handOver.advance(busy, now: 7_000) == [.cancelSends, .storeMarkers])
        handOver.markersWritten(0)
        #expect(handOver.advance(Self.idle, now: 7_001) == [.commit])
        handOver.commitRequested(1)
        #expect(handOver.commitAnswered(1) == [.finish])
        #expect(handOver.isComplete, "a cancelled send's record stays open for the next owner: nothing claimed that was not done")
    }

    @Test("with Kafka unreachable every step ends at its deadline and the whole hand-over by the last one, marked incomplete")
    func kafkaUnreachable() {
        var handOver = plan()
        let publishing = HandOverPlan.Observation(inFlight: false, publishing: true)
        #expect(handOver.advance(publishing, now: 6_999).isEmpty)
        #expect(handOver.advance(publishing, now: 7_000).isEmpty, "draining over; the results still have until 8,000")
        #expect(handOver.advance(publishing, now: 8_000) == [.storeMarkers])
        #expect(!handOver.isComplete, "results left unacknowledged: the next owner redoes their devices")
        handOver.markersWritten(2)
        handOver.markerSettled(stored: false)
        #expect(handOver.advance(publishing, now: 8_999).isEmpty)
        #expect(handOver.advance(publishing, now: 9_000) == [.commit])
        handOver.commitRequested(3)
        #expect(handOver.advance(publishing, now: 9_999).isEmpty)
        #expect(handOver.advance(publishing, now: 10_000) == [.finish])
        #expect(handOver.isDone && !handOver.isComplete)
        #expect(handOver.commitAnswered(3).isEmpty, "an answer after the end changes nothing")
    }

    @Test("a marker that failed to be stored makes the hand-over incomplete")
    func markerRefused() {
        var handOver = plan()
        _ = handOver.advance(Self.idle, now: 1_000)
        handOver.markersWritten(1)
        handOver.markerSettled(stored: false)
        #expect(handOver.advance(Self.idle, now: 1_001) == [.commit])
        #expect(!handOver.isComplete)
    }
}
