import Testing

@testable import Relay

@Suite("The driver's inbox")
struct RelayInboxTests {
    private func ticks(_ batch: RelayInbox.Batch) -> Int {
        batch.filter { if case .tick = $0 { true } else { false } }.count
    }

    @Test("inputs waiting are taken in one batch, in the order they came, and the batch's storage is reused")
    func batchesInOrder() async {
        let inbox = RelayInbox()
        inbox.yield(.committed(1, nil))
        inbox.yield(.tick)
        inbox.yield(.committed(2, nil))
        var batch = RelayInbox.Batch()
        #expect(await inbox.take(into: &batch))
        let tokens = batch.compactMap { if case .committed(let request, _) = $0 { request } else { nil } }
        #expect(batch.count == 3 && tokens == [1, 2] && ticks(batch) == 1)
        if case .tick = batch[1] {} else { Issue.record("the tick kept its place between the two: \(batch)") }

        inbox.yield(.stop(askedAt: .now))
        #expect(await inbox.take(into: &batch))
        #expect(batch.count == 1, "only what came after the last take")
    }

    @Test("a take with nothing waiting wakes for the next input")
    func wakesForInput() async {
        let inbox = RelayInbox()
        await withTaskGroup(of: Int.self) { group in
            group.addTask {
                var batch = RelayInbox.Batch()
                _ = await inbox.take(into: &batch)
                return batch.count
            }
            // Whether the taker is already waiting or not, the input reaches it.
            await Task.yield()
            inbox.yield(.tick)
            #expect(await group.next() == 1)
        }
    }

    @Test("cancelling a waiting take ends it with false and an empty batch")
    func cancellation() async {
        let inbox = RelayInbox()
        let taker = Task {
            var batch: RelayInbox.Batch = [.tick]
            let taken = await inbox.take(into: &batch)
            return (taken, batch.count)
        }
        await Task.yield()
        taker.cancel()
        let (taken, count) = await taker.value
        #expect(!taken && count == 0)
    }
}
