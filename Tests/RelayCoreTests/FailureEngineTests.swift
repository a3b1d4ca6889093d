import APNsCore
import KafkaCore
import Testing

@testable import RelayCore

/// Failures never stall, crash-loop or drop a notification: each failure is an input of the
/// engine, and each test drives the engine as the service would (``EngineHarness``).
@Suite("Failures as engine inputs")
struct FailureEngineTests {
    let events = TopicPartition("push.events", 0)

    func message(_ offset: Int64, _ value: [UInt8], key: String? = nil) -> KafkaMessage {
        KafkaMessage(topic: events.topic, partition: 0, offset: offset, key: key.map { Array($0.utf8) }, value: value)
    }

    func results(_ harness: EngineHarness, status: DeliveryStatus) -> Int {
        harness.results.filter { $0.status == status }.count
    }

    /// A harness with `events` assigned, APNs silent and one notification in flight (event `e0`, user `u-1`, token 1).
    func oneSendInFlight(_ configuration: RelayEngine.Configuration = .init(), seed: UInt64) -> EngineHarness {
        var harness = EngineHarness(configuration: configuration, seed: seed)
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true
        harness.run(harness.engine.consumed(message(0, eventJSON(id: "e0", user: "u-1", seq: 1, tokens: [token(1)])), now: harness.now))
        harness.settle()
        return harness
    }

    // MARK: 1. A full queue is backpressure

    /// Consumes `events` events of `devices` tokens each (event `n`: user `u-n`, seq 1), settling after each one when
    /// `settlingEach` (else only at the end), then settles everything.
    func fanOut(events count: Int, devices: Int, into harness: inout EngineHarness, settlingEach: Bool) {
        for offset in 0..<count {
            let tokens = (0..<devices).map { token(offset * devices + $0) }
            harness.run(harness.engine.consumed(message(Int64(offset), eventJSON(id: "e\(offset)", user: "u-\(offset)", seq: 1, tokens: tokens)), now: harness.now))
            if settlingEach { harness.settle() }
        }
        harness.settle()
    }

    @Test("never more sends outstanding than max_in_flight (the sender's queue), every notification delivered, none failed", arguments: 0..<5)
    func sendWindow(seed: Int) {
        var harness = EngineHarness(configuration: .init(maxInFlight: 4), seed: UInt64(seed))
        harness.run(harness.engine.assigned([events]))
        fanOut(events: 10, devices: 3, into: &harness, settlingEach: seed % 2 == 0)
        #expect(harness.maxSendsOutstanding <= 4)
        #expect(results(harness, status: .delivered) == 30)
        #expect(results(harness, status: .failed) == 0)
        #expect(harness.committed[events] == 10)
    }

    @Test("the window follows the sender's streams: never more outstanding than a tenth over them, every notification delivered, none failed", arguments: 0..<3)
    func sendWindowFollowsSenderStreams(seed: Int) {
        var harness = EngineHarness(configuration: .init(maxInFlight: 100), seed: UInt64(seed))
        harness.run(harness.engine.assigned([events]))
        harness.run(harness.engine.senderStreamsChanged(10, now: harness.now))
        fanOut(events: 20, devices: 3, into: &harness, settlingEach: seed % 2 == 0)
        #expect(harness.maxSendsOutstanding <= 11)
        // Unsettled, the 60 notifications fill the window to exactly the streams and a tenth.
        if seed % 2 == 1 { #expect(harness.maxSendsOutstanding == 11) }
        #expect(results(harness, status: .delivered) == 60)
        #expect(results(harness, status: .failed) == 0)
        #expect(harness.committed[events] == 20)
    }

    // MARK: 2. Dead letters near 1 MB

    @Test("an invalid event of ~950 KB whose push type is 150,000 characters: x-error at most 1 KB, and a reference record when the input cannot be published")
    func hugeDeadLetter() {
        var harness = EngineHarness(seed: 2)
        harness.failPublish = { effect in
            if case .publishDeadLetter = effect { return .tooLarge }
            return nil
        }
        harness.run(harness.engine.assigned([events]))
        let pushType = String(repeating: "x", count: 150_000)
        let padding = String(repeating: "p", count: 800_000)
        let value = Array(#"{"id":"big","user":"u-1","tokens":["\#(token(1))"],"apns":{"push_type":"\#(pushType)"},"alert":{"title":"\#(padding)"}}"#.utf8)
        #expect(value.count > 900_000)
        harness.run(harness.engine.consumed(message(0, value, key: "big"), now: harness.now))
        harness.settle()
        #expect(harness.deadLetters.count == 1, "the dead letter was refused; its reference published")
        #expect(harness.deadLetters.allSatisfy { $0.utf8.count <= 1_024 })
        #expect(harness.deadLetters.first?.contains("push_type") == true)
        let invalid = harness.results.filter { $0.status == .invalid }
        #expect(invalid.count == 1)
        #expect((invalid.first?.reason?.utf8.count ?? .max) <= 1_024)
        #expect(harness.committed[events] == 1, "the reference finished the record")
    }

    @Test("the reference record names the input's place, size and error")
    func referenceRecord() {
        var engine = RelayEngine(configuration: RelayEngine.Configuration().withTestTopic)
        _ = engine.assigned([events])
        _ = engine.restored(events, records: [], now: 0)
        let input = message(7, Array("{not json".utf8), key: "k")
        let effects = engine.consumed(input, now: 0)
        guard let deadLetter = effects.first(where: { if case .publishDeadLetter = $0 { true } else { false } }) else {
            Issue.record("no dead letter")
            return
        }
        let reference = engine.publishFailed(deadLetter, failure: .tooLarge, now: 0)
        guard case .publishDeadLetterReference(let record)? = reference.first else {
            Issue.record("no reference: \(reference)")
            return
        }
        #expect(record.source.partition == events && record.source.offset == 7)
        #expect(record.size == 9)
        #expect(record.key == Array("k".utf8))
        let text = String(decoding: record.encoded(), as: UTF8.self)
        #expect(text.hasPrefix(#"{"source_topic":"push.events","source_partition":0,"source_offset":7,"size":9,"error":""#))
    }

    // MARK: 3. Publish and changelog failures

    @Test("results refused for a while are published again after jittered backoffs; the offset completes and is committed")
    func resultsRetried() {
        var harness = EngineHarness(seed: 3)
        var refusals = 0
        harness.failPublish = { effect in
            guard case .publishResult = effect, refusals < 4 else { return nil }
            refusals += 1
            return .other("Local: Message timed out")
        }
        harness.run(harness.engine.assigned([events]))
        harness.run(harness.engine.consumed(message(0, eventJSON(id: "a", user: "u-1", seq: 1, tokens: [token(1)])), now: harness.now))
        harness.settle()
        #expect((harness.committed[events] ?? 0) == 0, "not finished while its result is refused")
        harness.advance(by: 10_000)
        #expect(refusals == 4)
        #expect(harness.results.filter { $0.eventID == "a" && $0.status == .delivered }.count == 1, "published once, after four refusals")
        #expect(harness.committed[events] == 1)
        #expect(harness.exits.isEmpty)
        #expect(harness.sent.count == 1, "a publish retry never sends again")
    }

    @Test("a destination refusing every record past the failure bound: the relay exits 1 and does nothing more")
    func publishBound() {
        var harness = EngineHarness(seed: 4)
        harness.failPublish = { effect in
            if case .publishResult = effect { return .other("Broker: Topic authorization failed") }
            return nil
        }
        harness.run(harness.engine.assigned([events]))
        harness.run(harness.engine.consumed(message(0, eventJSON(id: "a", user: "u-1", seq: 1, tokens: [token(1)])), now: harness.now))
        harness.settle()
        harness.advance(by: 59_000)
        #expect(harness.exits.isEmpty, "within the bound it retries")
        harness.advance(by: 6_000)
        #expect(harness.exits.map(\.code) == [1])
        #expect(harness.exits.first?.reason.contains("results and dead letters") == true)
        #expect(harness.engine.lifecycle != .running)
        let before = harness.results.count
        harness.run(harness.engine.consumed(message(1, eventJSON(id: "b", user: "u-2", seq: 1, tokens: [token(2)])), now: harness.now))
        harness.advance(by: 1_000)
        #expect(harness.results.count == before, "nothing more after giving up")
    }

    @Test("a failed changelog append is retried with the user's current state; the event is sent with that count, never an older one after a newer")
    func changelogRetried() {
        var harness = EngineHarness(seed: 5)
        var failedOnce = false
        harness.failPublish = { effect in
            guard case .appendChangelog(_, let record, _, _) = effect, record.seq == 1, !failedOnce else { return nil }
            failedOnce = true
            return .other("Local: Message timed out")
        }
        harness.run(harness.engine.assigned([events]))
        let device = token(1)
        harness.run(harness.engine.consumed(message(0, eventJSON(id: "e1", user: "u-1", seq: 1, tokens: [device])), now: harness.now))
        harness.run(harness.engine.consumed(message(1, eventJSON(id: "e2", user: "u-1", seq: 2, tokens: [device])), now: harness.now))
        harness.settle()
        harness.advance(by: 5_000)
        #expect(failedOnce)
        let badges = harness.received[device, default: []].compactMap { $0 }
        #expect(badges == badges.sorted(), "never backwards: \(badges)")
        #expect(badges.last == 2)
        #expect(harness.changelog.last?.record.badge == 2, "the stored state is the newest")
        #expect(harness.committed[events] == 2)
    }

    // MARK: 4. Restores

    @Test("a failed restore is read again until complete; the partition processes nothing meanwhile and is not ready")
    func restoreRetried() {
        var engine = RelayEngine(configuration: RelayEngine.Configuration().withTestTopic)
        let assigned = engine.assigned([events])
        guard case .restore(_, let generation)? = assigned.first else {
            Issue.record("no restore")
            return
        }
        let event = KafkaMessage(topic: events.topic, partition: 0, offset: 0, key: nil, value: eventJSON(id: "x", user: "u-1", seq: 4, tokens: [token(1)]))
        #expect(engine.consumed(event, now: 0).allSatisfy { if case .appendChangelog = $0 { false } else { true } })
        #expect(engine.restoreFailed(events, generation: generation, error: "Local: Timed out", now: 0).isEmpty)
        #expect(!engine.isRestored)
        #expect(engine.tick(now: 10).allSatisfy { if case .restore = $0 { false } else { true } }, "not before the backoff")
        let retried = engine.tick(now: 1_000)
        #expect(retried.contains { if case .restore(events, generation) = $0 { true } else { false } })
        _ = engine.restoreFailed(events, generation: generation, error: "Local: Timed out", now: 1_000)
        let again = engine.tick(now: 3_000)
        #expect(again.contains { if case .restore(events, generation) = $0 { true } else { false } })
        let state = BadgeStateRecord(badge: 3, seq: 3, updatedAt: 0).encoded()
        let after = engine.restored(events, generation: generation, records: [(key: Array("u-1".utf8), value: state)], now: 3_000)
        #expect(engine.isRestored)
        let appended = after.compactMap { if case .appendChangelog(_, let record, _, _) = $0 { record } else { nil } }
        #expect(appended.map(\.badge) == [4], "continues from the full state, not from 0")
    }

    @Test("a restore of an earlier assignment is ignored")
    func staleRestore() {
        var engine = RelayEngine(configuration: RelayEngine.Configuration().withTestTopic)
        guard case .restore(_, let first)? = engine.assigned([events]).first else { return }
        _ = engine.revokeRequested([events], now: 0)
        guard case .restore(_, let second)? = engine.assigned([events]).first else { return }
        #expect(first != second)
        let stale = BadgeStateRecord(badge: 1, seq: 1, updatedAt: 0).encoded()
        _ = engine.restored(events, generation: first, records: [(key: Array("u-1".utf8), value: stale)], now: 0)
        #expect(!engine.isRestored, "the earlier assignment's read is not this one's")
    }

    @Test("a restore failing past the bound makes the relay exit 1")
    func restoreBound() {
        var harness = EngineHarness(seed: 6)
        var generation: UInt64 = 0
        for effect in harness.engine.assigned([events]) {
            if case .restore(_, let value) = effect { generation = value }
        }
        var exits: [RelayEffect] = []
        for second in stride(from: 0, through: 61, by: 1) {
            let now = RelayTime(monotonic: Int64(second) * 1_000, epoch: 0)
            exits += harness.engine.restoreFailed(events, generation: generation, error: "Broker: Not coordinator", now: now)
        }
        #expect(exits.count == 1)
        guard case .exit(1, let reason)? = exits.first else { return }
        #expect(reason.contains("push.events[0]"))
    }

    // MARK: 6. Fan-out

    @Test("an event with more tokens than relay.max_tokens_per_event is a dead letter naming the key")
    func tooManyTokens() {
        var harness = EngineHarness(configuration: .init(maxTokensPerEvent: 3), seed: 7)
        harness.run(harness.engine.assigned([events]))
        harness.run(harness.engine.consumed(message(0, eventJSON(id: "a", user: "u-1", seq: nil, tokens: (0..<4).map(token))), now: harness.now))
        harness.settle()
        #expect(harness.deadLetters.count == 1)
        #expect(harness.deadLetters.first?.contains("relay.max_tokens_per_event") == true)
        #expect(harness.sent.isEmpty)
    }

    @Test("1,000 tokens with max_in_flight 100: every token delivered, the fan-out held by the send window, none failed")
    func wideFanOut() {
        var harness = EngineHarness(configuration: .init(maxInFlight: 100, urgentReserve: 0, maxInFlightPerUser: 100), seed: 8)
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true
        harness.run(harness.engine.consumed(message(0, eventJSON(id: "wide", user: "u-1", seq: nil, tokens: (0..<1_000).map(token))), now: harness.now))
        harness.settle()
        #expect(harness.sendsOutstanding == 100, "the rest wait in the engine")
        #expect(!harness.engine.isPaused, "consumption reads ahead: the rest of the fan-out waits unrendered")
        harness.apnsSilent = false
        harness.settle()
        #expect(harness.maxSendsOutstanding <= 100)
        #expect(results(harness, status: .delivered) == 1_000)
        #expect(harness.committed[events] == 1)
    }

    @Test("relay.max_in_flight bounds the notifications between consume and result, whatever a fetch's events fan out to: the rest wait unrendered, in order")
    func maxInFlightIsNeverExceeded() {
        var harness = EngineHarness(configuration: .init(maxInFlight: 100), seed: 15)
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true
        var highest = 0
        // A fetch of ten events of 30 devices each, handled before backpressure can pause the partition; one user's
        // events, so they must reach each device in seq order.
        let devices = (0..<30).map(token)
        for seq in 1...10 {
            let event = #"{"id":"e\#(seq)","user":"u-1","seq":\#(seq),"badge":{"increment":1},"tokens":[\#(devices.map { "\"\($0)\"" }.joined(separator: ","))],"apns":{"payload":{"aps":{"alert":"n\#(seq)"}}}}"#
            harness.run(harness.engine.consumed(message(Int64(seq - 1), Array(event.utf8)), now: harness.now))
            harness.settle()
            highest = max(highest, harness.engine.notificationsInFlight)
        }
        #expect(highest <= 100, "\(highest) notifications between consume and result")
        harness.apnsSilent = false
        while harness.results.count < 300 && harness.now.monotonic < 2_000_000 {
            harness.advance(by: 100)
            highest = max(highest, harness.engine.notificationsInFlight)
        }
        #expect(highest <= 100, "\(highest) notifications between consume and result")
        #expect(results(harness, status: .delivered) == 300)
        for device in devices { #expect(harness.received[device] == (1...10).map { Int64($0) }, "\(device)'s badges in order") }
        #expect(harness.committed[events] == 10)
    }

    // MARK: 7. Revokes with a slow APNs

    @Test("a revoke with APNs not answering: queued sends dropped, no changelog write after it, in-flight sends cancelled at the drain deadline, then the hand-over; later answers publish nothing")
    func revokeWithSlowAPNs() {
        var configuration = RelayEngine.Configuration(maxInFlight: 1_000)
        configuration.revokeDrain = .seconds(6)
        var harness = EngineHarness(configuration: configuration, seed: 9)
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true
        let device = token(1)
        for offset in 0..<3 {
            harness.run(harness.engine.consumed(message(Int64(offset), eventJSON(id: "e\(offset)", user: "u-1", seq: offset + 1, tokens: [device])), now: harness.now))
        }
        harness.settle()
        #expect(harness.sent.count == 1, "one in flight per device; two queued")
        let inFlight = harness.pending.compactMap { if case .sent(let dispatch) = $0 { dispatch } else { nil } }
        let changelogBefore = harness.changelog.count
        harness.run(harness.engine.revokeRequested([events], id: 7, now: harness.now))
        harness.advance(by: 5_900)
        #expect(harness.acknowledgedRevokes.isEmpty, "waiting for the send in flight")
        #expect(harness.sent.count == 1, "nothing new sent while revoking")
        harness.advance(by: 200)
        #expect(harness.cancelled == [events])
        #expect(harness.acknowledgedRevokes == [7])
        #expect(harness.changelog.count == changelogBefore)
        let resultsBefore = harness.results.count
        for dispatch in inFlight {
            harness.answer(dispatch, APNsOutcome(.failure(.connectionLost), attempts: 1, apnsID: APNsOutcome.testID))
        }
        harness.apnsSilent = false
        harness.settle()
        #expect(harness.results.count == resultsBefore, "a partition that moved gets nothing more from here")
        #expect(harness.sent.count == 1)
    }

    @Test("a partition assigned again while its revoke's hand-over runs (the consumer gave it up at its revoke timeout): the new assignment processes its records; the old one's late answer publishes and resends nothing",
          arguments: [false, true])
    func reassignedDuringHandOver(answerAbandoned: Bool) {
        var configuration = RelayEngine.Configuration(maxInFlight: 1_000)
        configuration.revokeDrain = .seconds(6)
        var harness = oneSendInFlight(configuration, seed: 21)
        let first = eventJSON(id: "e0", user: "u-1", seq: 1, tokens: [token(1)])
        let stale = harness.pending.compactMap { if case .sent(let dispatch) = $0 { dispatch } else { nil } }
        #expect(stale.count == 1)
        harness.run(harness.engine.revokeRequested([events], id: 1, now: harness.now))
        harness.advance(by: 1_000)
        #expect(harness.acknowledgedRevokes.isEmpty, "the hand-over waits for the send in flight")

        // The consumer gave the partition up without the acknowledgement, and the group assigned it here again.
        harness.run(harness.engine.assigned([events]))
        #expect(harness.cancelled == [events], "the given-up assignment's sends are cancelled")
        harness.advance(by: 10_000)
        #expect(harness.acknowledgedRevokes == [1])
        // The new assignment reads from the committed offset (none): e0 again, then e1.
        harness.run(harness.engine.consumed(message(0, first), now: harness.now))
        harness.run(harness.engine.consumed(message(1, eventJSON(id: "e1", user: "u-2", seq: 1, tokens: [token(2)])), now: harness.now))
        harness.settle()
        #expect(harness.sent.map(\.eventID) == ["e0", "e1"], "e0's device waits for the cancelled send's answer")
        let outcome = answerAbandoned ? APNsOutcome.abandoned(apnsID: stale[0].notification.payload.notification.apnsID) : .delivered()
        for dispatch in stale { harness.answer(dispatch, outcome) }
        harness.apnsSilent = false
        harness.settle()
        #expect(harness.sent.map(\.eventID) == ["e0", "e1", "e0"], "the cancelled send is not sent again; the new assignment sends e0 once")
        #expect(harness.results.map(\.eventID).sorted() == ["e0", "e1"], "one result per (event, device), the new assignment's")
        #expect(harness.committed[events] == 2)
    }

    @Test("a result of an assignment given up, acknowledged after the partition was assigned here again, finishes nothing of the new assignment")
    func staleAcknowledgementAfterReassignment() {
        var harness = EngineHarness(seed: 22)
        harness.run(harness.engine.assigned([events]))
        harness.holdPublishes = true
        let first = eventJSON(id: "e0", user: "u-1", seq: 1, tokens: [token(1)])
        harness.run(harness.engine.consumed(message(0, first), now: harness.now))
        harness.settle()
        let stale = harness.pending.compactMap { if case .published(let reference) = $0 { reference } else { nil } }
        #expect(stale.count == 1, "e0's result waits for Kafka")
        harness.run(harness.engine.revokeRequested([events], id: 1, now: harness.now))
        // The consumer gave the partition up (its revoke timeout) and the group assigned it here again.
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true
        harness.run(harness.engine.consumed(message(0, first), now: harness.now))
        harness.settle()
        #expect(harness.sent.count == 2, "the new assignment sends e0 (the earlier one's result was never acknowledged)")
        // Kafka acknowledges the earlier assignment's result now.
        harness.pending.removeAll { if case .published = $0 { true } else { false } }
        for reference in stale { harness.run(harness.engine.published(reference, device: token(1), now: harness.now)) }
        harness.run(harness.engine.commitDue(now: harness.now))
        #expect((harness.committed[events] ?? 0) == 0, "e0 is not finished for the new assignment: its send is in flight")
        harness.apnsSilent = false
        harness.holdPublishes = false
        harness.settle()
        #expect(harness.committed[events] == 1)
    }

    @Test("a revoke that reaches the engine late (the relay was busy) hands over before the consumer stops waiting for it")
    func lateRevokeEndsBeforeTheConsumerDeadline() {
        var configuration = RelayEngine.Configuration(maxInFlight: 1_000)
        configuration.revokeDrain = .seconds(6)
        configuration.handOver = .seconds(3)
        var harness = oneSendInFlight(configuration, seed: 23)
        // Of the consumer's 10 s, 5 s are left when the engine hears of the revoke.
        harness.run(harness.engine.revokeRequested([events], id: 1, consumerDeadline: harness.now.monotonic + 5_000, now: harness.now))
        harness.advance(by: 2_900)
        #expect(harness.cancelled.isEmpty, "draining: two thirds of nine tenths of the 5 s")
        harness.advance(by: 100)
        #expect(harness.cancelled == [events])
        harness.advance(by: 1_500)
        #expect(harness.acknowledgedRevokes == [1], "over by 4.5 s, before the consumer's 5 s")
    }

    @Test("a record whose every device the previous owner finished (the registry lost the others since) is finished: nothing sent, its offset committed, nothing left pending")
    func recordFinishedByThePreviousOwnerForEveryDeviceLeft() {
        var harness = EngineHarness(seed: 24)
        _ = harness.engine.deviceRecord(key: Array(token(1).utf8)[...], value: registrationValue(user: "u-1")[...])
        // The previous owner published token 1's result of offset 0, not token 2's (unregistered since).
        let marker = ProgressMarker(through: 0, open: [0], devicesDone: [0: [DeviceDigest(token: token(1))]])
        let changelog: [(key: [UInt8], value: [UInt8]?)] = [
            (Array("u-1".utf8), BadgeStateRecord(badge: 1, seq: 1, offset: 0, updatedAt: 1).encoded()),
            (ProgressMarker.key, marker.encoded(at: 1)),
        ]
        for effect in harness.engine.assigned([events]) {
            guard case .restore(let partition, let generation) = effect else { continue }
            harness.run(harness.engine.restored(partition, generation: generation, records: changelog, now: harness.now))
        }
        harness.run(harness.engine.consumed(message(0, eventJSON(id: "e0", user: "u-1", seq: 1)), now: harness.now))
        harness.settle()
        #expect(harness.sent.isEmpty && harness.results.isEmpty, "token 1 was finished by the previous owner")
        #expect(harness.committed[events] == 1)
        #expect(harness.engine.pendingRecordCount == 0)
    }

    @Test("a revoke whose sends finish in time hands over at once, without cancelling")
    func revokeSettles() {
        var harness = EngineHarness(seed: 10)
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true
        harness.run(harness.engine.consumed(message(0, eventJSON(id: "a", user: "u-1", seq: 1, tokens: [token(1)])), now: harness.now))
        harness.settle()
        harness.run(harness.engine.revokeRequested([events], id: 3, now: harness.now))
        #expect(harness.acknowledgedRevokes.isEmpty)
        harness.apnsSilent = false
        harness.settle()
        #expect(harness.cancelled.isEmpty)
        #expect(harness.acknowledgedRevokes == [3])
    }

    @Test("a revoke while a result waits for its retry hands over at once: the retry is dropped, the next owner publishes it")
    func revokeDropsRetries() {
        var harness = EngineHarness(seed: 14)
        harness.failPublish = { effect in
            if case .publishResult = effect { return .other("Local: Message timed out") }
            return nil
        }
        harness.run(harness.engine.assigned([events]))
        harness.run(harness.engine.consumed(message(0, eventJSON(id: "a", user: "u-1", seq: 1, tokens: [token(1)])), now: harness.now))
        harness.settle()
        harness.run(harness.engine.revokeRequested([events], id: 4, now: harness.now))
        #expect(harness.acknowledgedRevokes == [4])
        #expect(harness.cancelled.isEmpty)
        harness.failPublish = { _ in nil }
        harness.advance(by: 10_000)
        #expect(harness.results.isEmpty, "nothing published for a partition that moved")
    }

    // MARK: 8. Stops, the consumer, the registry

    @Test("a stop finishes work in flight, ignores records fetched after it, then hands over; past 60% of the shutdown timeout it cancels what is left")
    func stop() {
        var configuration = RelayEngine.Configuration()
        configuration.shutdownTimeout = .seconds(3)
        var harness = oneSendInFlight(configuration, seed: 11)
        harness.run(harness.engine.stopRequested(now: harness.now))
        harness.run(harness.engine.consumed(message(1, eventJSON(id: "b", user: "u-2", seq: 1, tokens: [token(2)])), now: harness.now))
        harness.advance(by: 1_700)
        #expect(harness.stops.isEmpty)
        harness.advance(by: 200)
        #expect(harness.cancelled == [events])
        #expect(harness.stops == [true], "the in-flight send is handed back: markers stored, offsets committed")
        #expect(harness.sent.count == 1, "the record fetched after the stop was left for the next owner")
    }

    @Test("the partitions pause before one partition's open records could outgrow its progress marker, whatever relay.max_in_flight allows, and resume below half")
    func markerBoundPauses() {
        var configuration = RelayEngine.Configuration(reorderWindow: .seconds(2), maxInFlight: 1_000_000)
        // 200 bytes of runs: isolated open records at offsets below 100 (two digits, 6 bytes a run) make 33.
        configuration.markerRunsBudget = 200
        var harness = EngineHarness(configuration: configuration, seed: 14)
        harness.run(harness.engine.assigned([events]))
        #expect(ProgressMarker.openRecordLimit(through: 99, runsBudget: 200) == 33)
        var offset: Int64 = 0
        // Every other record waits for its user's missing seq 1 (held, open); the others finish.
        while !harness.engine.isPaused && offset < 98 {
            let held = offset % 2 == 0
            let event = eventJSON(id: "e\(offset)", user: held ? "held-\(offset)" : "done-\(offset)", seq: held ? 2 : nil, tokens: [token(Int(offset))])
            harness.run(harness.engine.consumed(message(offset, event), now: harness.now))
            harness.settle()
            offset += 1
        }
        #expect(harness.engine.isPaused, "paused at the marker's bound, far below max_in_flight")
        // Paused as the 33rd record was open (32 held and one on its way); that one finished since.
        #expect(harness.engine.pendingRecordCount == 32, "\(harness.engine.pendingRecordCount) open")
        // The reorder window passes: the held records are sent and finish, and consumption resumes.
        harness.advance(by: 3_000)
        #expect(!harness.engine.isPaused)
    }

    @Test("a periodic progress marker Kafka refused is written again with the next commit, and refusals count toward the failure bound")
    func refusedMarkerIsWrittenAgain() {
        var configuration = RelayEngine.Configuration()
        configuration.failureTimeout = .seconds(5)
        var harness = EngineHarness(configuration: configuration, seed: 13)
        harness.run(harness.engine.assigned([events]))
        harness.failPublish = { effect in if case .writeProgress = effect { .other("Local: Message timed out") } else { nil } }
        harness.run(harness.engine.consumed(message(0, eventJSON(id: "a", user: "u-1", seq: 1, tokens: [token(1)])), now: harness.now))
        harness.advance(by: 1_500)
        #expect(harness.results.count == 1)
        #expect(harness.progress[0] == nil, "refused")
        harness.failPublish = { _ in nil }
        harness.advance(by: 1_500)
        #expect(harness.progress[0]?.isFinished(0) == true, "the refused marker's successor is written though nothing changed since")
        // Refused for longer than relay.failure_timeout_s: crash-only.
        harness.failPublish = { effect in if case .writeProgress = effect { .other("Local: Message timed out") } else { nil } }
        harness.run(harness.engine.consumed(message(1, eventJSON(id: "b", user: "u-1", seq: 2, tokens: [token(1)])), now: harness.now))
        harness.advance(by: 8_000)
        #expect(harness.exits.map(\.code) == [1], "\(harness.exits)")
    }

    @Test("a stop that reaches a busy engine late counts its budget from the signal: in-flight work is cancelled at 60% after the signal, not after the engine took the stop")
    func stopTakenLate() {
        var configuration = RelayEngine.Configuration()
        configuration.shutdownTimeout = .seconds(3)
        var harness = oneSendInFlight(configuration, seed: 12)
        let signalled = harness.now
        // The loop was busy for 1.5 s: the stop reaches the engine then.
        harness.now += 1_500
        harness.run(harness.engine.stopRequested(now: harness.now, askedAt: signalled))
        harness.advance(by: 200)
        #expect(harness.cancelled.isEmpty, "1.7 s after the signal: still draining")
        harness.advance(by: 200)
        #expect(harness.cancelled == [events], "1.8 s (60% of 3 s) after the signal, what is in flight is cancelled")
        #expect(harness.stops == [true])
        #expect(harness.now.monotonic - signalled.monotonic <= 2_400, "the hand-over is over by 80% of the budget, counted from the signal")
    }

    /// Runs `harness` for `duration` ms in steps of 100 ms with APNs answering each send `latency` ms after it was
    /// handed out (delivered). Returns the sends on the wire (handed out, not answered) when the engine cancelled
    /// sends; no answer reaches the engine after that.
    func runWithSlowAPNs(_ harness: inout EngineHarness, latency: Int64, for duration: Int64) -> [DeviceDispatch<PendingNotification>] {
        harness.apnsSilent = true
        var onTheWire: [(dispatch: DeviceDispatch<PendingNotification>, since: Int64)] = []
        func noteNewSends(_ harness: EngineHarness) {
            for dispatch in harness.sendsOnTheWire where !onTheWire.contains(where: { $0.dispatch.ticket == dispatch.ticket }) {
                onTheWire.append((dispatch, harness.now.monotonic))
            }
        }
        let end = harness.now.monotonic + duration
        while harness.now.monotonic < end {
            if !harness.cancelled.isEmpty { return harness.sendsOnTheWire }
            noteNewSends(harness)
            for (dispatch, since) in onTheWire where since + latency <= harness.now.monotonic
                && harness.sendsOnTheWire.contains(where: { $0.ticket == dispatch.ticket }) {
                harness.answer(dispatch, .delivered())
                harness.settle()
                noteNewSends(harness)
            }
            harness.now += 100
            harness.run(harness.engine.tick(now: harness.now))
            harness.settle()
        }
        return harness.cancelled.isEmpty ? [] : harness.sendsOnTheWire
    }

    @Test("a stop whose work outlasts its drain starts no send in the drain's last third: what is on the wire is answered, nothing written is cancelled")
    func stopLeavesTheDrainTimeForAnswers() {
        var configuration = RelayEngine.Configuration()
        configuration.shutdownTimeout = .seconds(3)
        var harness = EngineHarness(configuration: configuration, seed: 21)
        harness.run(harness.engine.assigned([events]))
        harness.apnsSilent = true  // the sends below stay on the wire until runWithSlowAPNs answers them
        // Ten alerts to one device: its sends go one at a time, each answered 500 ms after it was written, so the
        // 1.8 s drain cannot finish them all.
        for seq in 1...10 {
            let event = #"{"id":"e\#(seq)","user":"u-1","seq":\#(seq),"badge":{"increment":1},"tokens":["\#(token(1))"],"apns":{"payload":{"aps":{"alert":"n\#(seq)"}}}}"#
            harness.run(harness.engine.consumed(message(Int64(seq - 1), Array(event.utf8)), now: harness.now))
        }
        harness.settle()
        harness.run(harness.engine.stopRequested(now: harness.now))
        let cancelledOnTheWire = runWithSlowAPNs(&harness, latency: 500, for: 3_000)
        #expect(harness.stops == [true], "handed over: markers stored, offsets committed")
        #expect(cancelledOnTheWire.isEmpty, "written, then cancelled (the next owner sends them again): \(cancelledOnTheWire.map(\.notification.payload.eventID))")
        #expect(harness.results.count == harness.sent.count, "every send written has its result")
        #expect(harness.sent.count > 1 && harness.sent.count < 10, "work went on in the drain, and some is left: \(harness.sent.count) sent")
        let marker = harness.progress[0]
        #expect(marker.map { marker in (0..<10).filter { !marker.isFinished($0) }.count } == 10 - harness.sent.count,
                "the marker leaves exactly the unsent records to the next owner: \(String(describing: marker))")
    }

    @Test("writes stop when a partition starts nothing new: at once for a revoke, after the stop's finishing step for a stop; unwritten sends come back abandoned, their records left open")
    func handOversStopWrites() throws {
        var configuration = RelayEngine.Configuration()
        configuration.shutdownTimeout = .seconds(3)
        let other = TopicPartition(events.topic, 1)
        var harness = EngineHarness(configuration: configuration, seed: 22)
        harness.run(harness.engine.assigned([events, other]))
        harness.apnsSilent = true
        for (offset, partition) in [(Int64(0), events), (0, other)] {
            let event = #"{"id":"e\#(partition.partition)","tokens":["\#(token(Int(partition.partition) + 1))"],"apns":{"payload":{"aps":{"alert":"hi"}}}}"#
            harness.run(harness.engine.consumed(KafkaMessage(topic: partition.topic, partition: partition.partition, offset: offset,
                                                             key: nil, value: Array(event.utf8)), now: harness.now))
        }
        harness.settle()
        #expect(harness.sendsOnTheWire.count == 2)

        harness.run(harness.engine.revokeRequested([other], id: 1, now: harness.now))
        #expect(harness.writesStopped == [other], "a revoke starts nothing new from its start")
        // The revoked partition's send was still queued in the sender: it comes back unwritten.
        let unwritten = try #require(harness.sendsOnTheWire.first { $0.notification.payload.record.partition == other })
        harness.answer(unwritten, .abandoned())
        harness.settle()
        #expect(harness.results.isEmpty, "an unwritten send has no result")
        #expect(harness.acknowledgedRevokes == [1], "nothing left in flight: the hand-over ran to its end")
        #expect(harness.progress[1].map { $0.isFinished(0) } == false, "the marker leaves the record to the next owner")

        harness.run(harness.engine.stopRequested(now: harness.now))
        #expect(harness.writesStopped == [other], "the stop's records go on starting sends for a while")
        harness.advance(by: 1_300)
        #expect(harness.writesStopped == [other, events], "then nothing new starts, and nothing more is written")
    }

    @Test("a dead consumer makes the relay exit 1")
    func consumerDies() {
        var engine = RelayEngine(configuration: RelayEngine.Configuration().withTestTopic)
        _ = engine.assigned([events])
        let effects = engine.consumerFailed("Broker: Fenced instance id")
        guard case .exit(1, let reason)? = effects.first else {
            Issue.record("no exit: \(effects)")
            return
        }
        #expect(reason.contains("consumer"))
        #expect(engine.lifecycle == .failed(reason))
    }

    @Test("events wait for the device registry; a failed read is read again after a backoff; past the bound the relay exits 1")
    func registry() {
        var configuration = RelayEngine.Configuration()
        configuration.waitsForDeviceRegistry = true
        var harness = EngineHarness(configuration: configuration, seed: 12)
        harness.run(harness.engine.start(now: harness.now))
        #expect(harness.registryLoads == 1)
        harness.run(harness.engine.assigned([events]))
        harness.run(harness.engine.consumed(message(0, eventJSON(id: "a", user: "u-1", seq: 1)), now: harness.now))
        harness.settle()
        #expect(harness.results.isEmpty, "waits for the registrations")
        harness.run(harness.engine.deviceRegistryFailed("Broker: Unknown topic or partition", now: harness.now))
        harness.advance(by: 1_000)
        #expect(harness.registryLoads == 2)
        _ = harness.engine.deviceRecord(key: slice(Array(token(1).utf8)), value: slice(registrationValue(user: "u-1")))
        harness.run(harness.engine.deviceRegistryLoaded(now: harness.now))
        harness.settle()
        #expect(harness.results.map(\.status) == [.delivered], "the registered device got it")

        var failing = EngineHarness(configuration: configuration, seed: 13)
        failing.run(failing.engine.start(now: failing.now))
        for _ in 0..<70 {
            failing.run(failing.engine.deviceRegistryFailed("Local: All broker connections are down", now: failing.now))
            failing.advance(by: 1_000)
        }
        #expect(failing.exits.map(\.code) == [1])
    }
}
