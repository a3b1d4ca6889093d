import Synchronization
import Testing

@testable import Relay

/// The consumer task hands batches to the loop through the gate; here the loop is the test itself.
@Suite("The gate between the consumer and the loop: one batch at a time")
struct ConsumedBatchGateTests {
    /// What happened, in order, on either side of the gate.
    final class Events: Sendable {
        private let entries = Mutex<[String]>([])
        func append(_ entry: String) { entries.withLock { $0.append(entry) } }
        var all: [String] { entries.withLock { $0 } }
    }

    /// A consumer task that submits one batch (noting "delivered" as it is handed over and "returned" once the submit
    /// returned), and the loop's side: the batches handed over, in order.
    static func submittingOne(
        through gate: ConsumedBatchGate, noting events: Events, cancelledFirst: Bool = false
    ) -> (consumer: Task<Void, Never>, loop: AsyncStream<Int>.AsyncIterator) {
        let (deliveries, delivered) = AsyncStream.makeStream(of: Int.self)
        let consumer = Task {
            if cancelledFirst {
                withUnsafeCurrentTask { $0?.cancel() }
                events.append(Task.isCancelled ? "cancelled" : "not cancelled")
            }
            await gate.submit {
                events.append("delivered")
                delivered.yield(1)
            }
            events.append("returned")
        }
        return (consumer, deliveries.makeAsyncIterator())
    }

    @Test("a submit hands its batch over at once and returns only once the loop has handled it")
    func returnsWhenHandled() async {
        let gate = ConsumedBatchGate()
        let events = Events()
        var (consumer, loop) = Self.submittingOne(through: gate, noting: events)
        #expect(await loop.next() == 1)
        // Nothing but handled() (or close()) resumes the submit, so it cannot have returned yet.
        events.append("handled")
        gate.handled()
        await consumer.value
        #expect(events.all == ["delivered", "handled", "returned"])
    }

    @Test("batches reach the loop one at a time, in order, each only after the one before was handled")
    func oneBatchAhead() async {
        let gate = ConsumedBatchGate()
        let events = Events()
        let (deliveries, delivered) = AsyncStream.makeStream(of: Int.self)
        let consumer = Task {
            for batch in 1...4 {
                await gate.submit {
                    events.append("delivered \(batch)")
                    delivered.yield(batch)
                }
            }
            delivered.finish()
        }
        var handled: [Int] = []
        for await batch in deliveries {
            events.append("handled \(batch)")
            handled.append(batch)
            gate.handled()
        }
        await consumer.value
        #expect(handled == [1, 2, 3, 4])
        #expect(events.all == (1...4).flatMap { ["delivered \($0)", "handled \($0)"] })
    }

    @Test("a handled() with no batch waiting is not kept: the next batch still waits for its own")
    func handledWithoutWaiter() async {
        let gate = ConsumedBatchGate()
        let events = Events()
        gate.handled()
        var (consumer, loop) = Self.submittingOne(through: gate, noting: events)
        #expect(await loop.next() == 1)
        events.append("handled")
        gate.handled()
        await consumer.value
        #expect(events.all == ["delivered", "handled", "returned"], "the early handled() released nothing")
    }

    @Test("close releases the batch waiting, and every later submit returns at once without handing its batch over")
    func closeReleasesForGood() async {
        let gate = ConsumedBatchGate()
        let events = Events()
        let (deliveries, delivered) = AsyncStream.makeStream(of: Int.self)
        let consumer = Task {
            for batch in 1...3 {
                await gate.submit {
                    events.append("delivered \(batch)")
                    delivered.yield(batch)
                }
                events.append("returned \(batch)")
            }
        }
        var loop = deliveries.makeAsyncIterator()
        #expect(await loop.next() == 1)
        events.append("closed")
        gate.close()
        await consumer.value
        #expect(events.all == ["delivered 1", "closed", "returned 1", "returned 2", "returned 3"])

        // Handled or closed again after the close: nothing waits, nothing breaks, and submits still pass.
        gate.handled()
        gate.close()
        await gate.submit { events.append("delivered late") }
        #expect(!events.all.contains("delivered late"))
    }

    @Test("a consumer task already cancelled still hands its batch over and waits for the loop: no batch is dropped")
    func cancelledConsumer() async {
        let gate = ConsumedBatchGate()
        let events = Events()
        var (consumer, loop) = Self.submittingOne(through: gate, noting: events, cancelledFirst: true)
        #expect(await loop.next() == 1)
        events.append("handled")
        gate.handled()
        await consumer.value
        #expect(events.all == ["cancelled", "delivered", "handled", "returned"])
    }
}
