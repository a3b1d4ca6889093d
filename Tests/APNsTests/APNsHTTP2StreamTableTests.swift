import APNs
import Foundation
import NIOCore
import Synchronization
import Testing

@Suite("The streams in flight on one HTTP/2 connection: answers, deadlines, GOAWAY, one hand-off each")
struct APNsHTTP2StreamTableTests {
    typealias Table = APNsHTTP2StreamTable

    /// Every outcome handed over, in order, with its stream: the table calls completions synchronously.
    final class Handoffs: Sendable {
        enum Ended: Equatable {
            case answered(status: Int, apnsID: UUID?, retryAfter: String?, channelID: String?, uniqueID: String?, body: [UInt8])
            case failed(APNsTransportFailure)
        }

        private let ended = Mutex<[(Table.StreamID, Ended)]>([])

        var all: [(Table.StreamID, Ended)] { ended.withLock { $0 } }
        var streams: [Table.StreamID] { all.map { $0.0 } }
        func of(_ streamID: Table.StreamID) -> [Ended] { all.filter { $0.0 == streamID }.map(\.1) }

        func completion(_ streamID: Table.StreamID) -> Table.Completion {
            .exchange { exchange in
                let value: Ended
                switch exchange {
                case .answered(let answer):
                    value = .answered(status: answer.status, apnsID: answer.apnsID, retryAfter: answer.retryAfter, channelID: answer.channelID,
                                      uniqueID: answer.uniqueID, body: answer.body)
                case .failed(let failure):
                    value = .failed(failure)
                }
                self.ended.withLock { $0.append((streamID, value)) }
            }
        }
    }

    final class AttemptResults: Sendable {
        let list = Mutex<[APNsAttemptResult]>([])
    }

    let t0 = NIODeadline.uptimeNanoseconds(1_000_000_000)
    let first = UUID(uuidString: "11111111-2222-3333-4444-555555555555")!
    let second = UUID(uuidString: "AAAAAAAA-BBBB-CCCC-DDDD-EEEEEEEEEEEE")!

    /// A table with `ids` open, each with deadline `t0 + 10 s`.
    func table(_ ids: [Table.StreamID], _ handoffs: Handoffs) -> Table {
        var table = Table()
        for id in ids { table.open(id, completion: handoffs.completion(id), deadline: t0 + .seconds(10)) }
        return table
    }

    @Test("an answer keeps the first :status, id and header of each kind and every DATA chunk; finish hands it over once and the stream leaves")
    func answerCollected() {
        let handoffs = Handoffs()
        var table = table([1], handoffs)
        #expect(table.contains(1))
        table.update(1) { stream in
            stream.keepFirst(status: 410)
            stream.keepFirst(status: 200)
            stream.keepFirst(apnsID: first)
            stream.keepFirst(apnsID: second)
            stream.keepFirst(.retryAfter, "30")
            stream.keepFirst(.retryAfter, "60")
            stream.keepFirst(.channelID, "channel-a")
            stream.keepFirst(.channelID, "channel-b")
            stream.keepFirst(.uniqueID, "unique-a")
            stream.keepFirst(.uniqueID, "unique-b")
            stream.body.append(contentsOf: Array("{\"reason\":".utf8))
        }
        table.update(1) { $0.body.append(contentsOf: Array("\"Unregistered\"}".utf8)) }
        #expect(handoffs.all.isEmpty, "nothing is handed over before the stream ends")
        table.finish(1)
        #expect(handoffs.of(1) == [.answered(status: 410, apnsID: first, retryAfter: "30", channelID: "channel-a", uniqueID: "unique-a",
                                             body: Array("{\"reason\":\"Unregistered\"}".utf8))])
        #expect(!table.contains(1))
        // Whatever comes after (a late trailer, a reset, a deadline): nothing more is handed over.
        table.finish(1)
        table.complete(1, .failed(.connectionLost))
        #expect(table.expire(now: t0 + .seconds(60)).isEmpty)
        table.completeAll(.connectionLost)
        #expect(handoffs.all.count == 1)
    }

    @Test("the first id header is kept even when it is no UUID: a valid one after it does not replace it")
    func firstIDHeaderEvenInvalid() {
        let handoffs = Handoffs()
        var table = table([1, 3], handoffs)
        table.update(1) { stream in
            stream.keepFirst(status: 200)
            stream.keepFirst(apnsID: nil)
            stream.keepFirst(apnsID: first)
        }
        table.update(3) { $0.keepFirst(status: 200) }
        table.finish(1)
        table.finish(3)
        #expect(handoffs.of(1) == [.answered(status: 200, apnsID: nil, retryAfter: nil, channelID: nil, uniqueID: nil, body: [])])
        #expect(handoffs.of(3) == [.answered(status: 200, apnsID: nil, retryAfter: nil, channelID: nil, uniqueID: nil, body: [])])
    }

    @Test("a response that ends without :status fails as a stream error")
    func endedWithoutStatus() {
        let handoffs = Handoffs()
        var table = table([5], handoffs)
        table.update(5) { $0.body = Array("x".utf8) }
        table.finish(5)
        #expect(handoffs.of(5) == [.failed(.streamError("response without :status"))])
        #expect(!table.contains(5))
    }

    @Test("a stream not in flight (never opened, or already ended) is not updated, finished or completed")
    func unknownStreams() {
        let handoffs = Handoffs()
        var table = table([1], handoffs)
        var called = false
        #expect(table.update(7) { _ in called = true } == nil)
        #expect(!called)
        #expect(table.update(1) { _ in 42 } == 42, "an update returns its body's result")
        table.finish(7)
        table.complete(9, .failed(.refused))
        #expect(handoffs.all.isEmpty)
        #expect(table.contains(1))
    }

    @Test("an attempt's completion gets the exchange as the supervisor reads it: the answer parsed, or the transport failure")
    func attemptCompletion() {
        let results = AttemptResults()
        var table = Table()
        for id: Table.StreamID in [1, 3] {
            table.open(id, completion: .attempt { result in results.list.withLock { $0.append(result) } }, deadline: t0 + .seconds(10))
        }
        table.update(1) { stream in
            stream.keepFirst(status: 410)
            stream.keepFirst(apnsID: first)
            stream.body = Array(#"{"reason":"Unregistered","timestamp":1700000000000}"#.utf8)
        }
        table.finish(1)
        table.complete(3, .failed(.refused))
        let got = results.list.withLock { $0 }
        #expect(got == [.response(APNsResponse(status: 410, apnsID: first, reason: .unregistered, timestamp: 1_700_000_000_000)), .failure(.refused)])
    }

    @Test("the earliest deadline is the least of the streams', whatever order they were opened in; answering the earliest moves it on")
    func earliestDeadline() {
        let handoffs = Handoffs()
        var table = Table()
        #expect(table.earliestDeadline == nil)
        table.open(1, completion: handoffs.completion(1), deadline: t0 + .seconds(5))
        table.open(3, completion: handoffs.completion(3), deadline: t0 + .seconds(3))
        table.open(5, completion: handoffs.completion(5), deadline: t0 + .seconds(7))
        table.open(7, completion: handoffs.completion(7), deadline: t0 + .seconds(4))
        #expect(table.earliestDeadline == t0 + .seconds(3))
        table.complete(3, .failed(.refused))
        #expect(table.earliestDeadline == t0 + .seconds(4))
        // An answered stream behind the front keeps its place until the front passes it.
        table.complete(1, .failed(.refused))
        #expect(table.earliestDeadline == t0 + .seconds(4))
        table.complete(7, .failed(.refused))
        #expect(table.earliestDeadline == t0 + .seconds(7), "stream 1's deadline went with the front")
        table.complete(5, .failed(.refused))
        #expect(table.earliestDeadline == nil)
    }

    @Test("expire ends the streams due at or before now with deadlineExceeded, earliest first (equal ones in the order opened), and returns them; the rest stay")
    func expiry() {
        let handoffs = Handoffs()
        var table = Table()
        table.open(1, completion: handoffs.completion(1), deadline: t0 + .seconds(2))
        table.open(3, completion: handoffs.completion(3), deadline: t0 + .seconds(1))
        table.open(5, completion: handoffs.completion(5), deadline: t0 + .seconds(2))
        table.open(7, completion: handoffs.completion(7), deadline: t0 + .seconds(3))
        table.open(9, completion: handoffs.completion(9), deadline: t0 + .seconds(2))
        table.complete(5, .failed(.refused))  // answered: not expired again, not returned
        #expect(table.expire(now: t0).isEmpty)
        #expect(handoffs.streams == [5])
        #expect(table.expire(now: t0 + .seconds(2)) == [3, 1, 9], "a deadline equal to now is due")
        #expect(handoffs.all.dropFirst().map { $0.0 } == [3, 1, 9])
        #expect(handoffs.all.dropFirst().allSatisfy { $0.1 == .failed(.deadlineExceeded) })
        #expect(table.contains(7) && !table.contains(1) && !table.contains(3) && !table.contains(9))
        #expect(table.earliestDeadline == t0 + .seconds(3))
        #expect(table.expire(now: t0 + .seconds(3) - .nanoseconds(1)).isEmpty)
        #expect(table.expire(now: t0 + .seconds(3)) == [7])
        #expect(table.earliestDeadline == nil)
    }

    @Test("a GOAWAY fails the streams above its last-stream-id with goingAway at once and keeps the rest; a later one only lowers the limit")
    func goAway() {
        let handoffs = Handoffs()
        var table = table([1, 3, 5, 7], handoffs)
        #expect(table.goAwayLastStreamID == nil)
        #expect(table.goAway(lastStreamID: 3) == true, "the first GOAWAY")
        #expect(Set(handoffs.streams) == [5, 7])
        #expect(handoffs.all.allSatisfy { $0.1 == .failed(.goingAway) })
        #expect(table.contains(1) && table.contains(3))
        #expect(table.goAwayLastStreamID == 3)

        #expect(table.goAway(lastStreamID: 5) == false)
        #expect(table.goAwayLastStreamID == 3, "a higher limit than the first does not raise it")
        #expect(table.contains(3) && handoffs.all.count == 2)

        #expect(table.goAway(lastStreamID: 1) == false)
        #expect(table.goAwayLastStreamID == 1)
        #expect(handoffs.of(3) == [.failed(.goingAway)])
        #expect(table.contains(1))
    }

    @Test("after a GOAWAY, a stream above the limit that fails reads goingAway, except on its deadline; one at or below keeps its failure; answers pass unchanged")
    func failuresAfterGoAway() {
        let handoffs = Handoffs()
        var table = table([1, 3], handoffs)
        _ = table.goAway(lastStreamID: 3)
        // Opened after the GOAWAY (the handlers refuse this; the table must still not misreport it).
        for id: Table.StreamID in [5, 7, 9] { table.open(id, completion: handoffs.completion(id), deadline: t0 + .seconds(10)) }
        table.complete(5, .failed(.connectionLost))
        table.complete(1, .failed(.connectionLost))
        table.update(7) { $0.keepFirst(status: 200) }
        table.finish(7)
        #expect(handoffs.of(5) == [.failed(.goingAway)], "certainly not processed")
        #expect(handoffs.of(1) == [.failed(.connectionLost)], "at or below the limit: may have been processed")
        #expect(handoffs.of(7) == [.answered(status: 200, apnsID: nil, retryAfter: nil, channelID: nil, uniqueID: nil, body: [])])
        #expect(table.expire(now: t0 + .seconds(10)) == [3, 9])
        #expect(handoffs.of(9) == [.failed(.deadlineExceeded)])
    }

    @Test("completeAll ends every stream in flight with the failure, once each (goingAway above a GOAWAY's limit), and leaves no deadline")
    func completeAll() {
        let handoffs = Handoffs()
        var table = table([1, 3, 5], handoffs)
        table.update(3) { $0.keepFirst(status: 200) }
        table.finish(3)
        _ = table.goAway(lastStreamID: 3)
        table.open(7, completion: handoffs.completion(7), deadline: t0 + .seconds(10))
        table.completeAll(.connectionLost)
        #expect(handoffs.of(1) == [.failed(.connectionLost)])
        #expect(handoffs.of(5) == [.failed(.goingAway)])
        #expect(handoffs.of(7) == [.failed(.goingAway)])
        #expect(handoffs.of(3).count == 1)
        #expect(handoffs.all.count == 4)
        #expect(table.earliestDeadline == nil)
        #expect(!table.contains(1) && !table.contains(5) && !table.contains(7))
        table.completeAll(.connectionLost)
        #expect(handoffs.all.count == 4)
    }

    @Test("the body goes out in pieces of at most the length asked for, the last one saying so; an empty body ends at once")
    func outgoingBody() {
        let handoffs = Handoffs()
        var table = Table()
        let body = Array("0123456789".utf8)
        table.open(1, completion: handoffs.completion(1), outgoing: body, deadline: t0 + .seconds(10))
        table.open(3, completion: handoffs.completion(3), deadline: t0 + .seconds(10))
        let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: 4)
        defer { buffer.deallocate() }
        var sent: [UInt8] = []
        var pieces: [(count: Int, isLast: Bool)] = []
        while pieces.last?.isLast != true, pieces.count < 10 {
            guard let piece = table.update(1, { $0.takeOutgoing(into: buffer, length: 4) }) else { break }
            sent.append(contentsOf: UnsafeBufferPointer(start: buffer, count: piece.count))
            pieces.append(piece)
        }
        #expect(pieces.map(\.count) == [4, 4, 2])
        #expect(pieces.map(\.isLast) == [false, false, true])
        #expect(sent == body)
        #expect(table.update(1) { $0.outgoingSent } == body.count)
        let again = table.update(1) { $0.takeOutgoing(into: buffer, length: 4) }
        #expect(again?.count == 0 && again?.isLast == true, "nothing is left to send")
        let empty = table.update(3) { $0.takeOutgoing(into: buffer, length: 4) }
        #expect(empty?.count == 0 && empty?.isLast == true)
    }
}
