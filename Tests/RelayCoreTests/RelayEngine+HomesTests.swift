import KafkaCore
import Testing

@testable import RelayCore

/// One user, one count, whatever the producers' keys: an event read away from its user's home partition is forwarded
/// there and counted there once; a partition is served only under the layout its badge state was placed for.
@Suite("Users' home partitions: forwarding and the layout")
struct RelayEngineHomesTests {
    static let layout = PartitionLayout(partitionCount: 4)

    /// A user whose home is `home` under ``layout``.
    static func user(homedAt home: Int32, skipping: Int = 0) -> String {
        var found = 0
        for number in 0... {
            let user = "user-\(number)"
            guard layout.home(of: user) == home else { continue }
            if found == skipping { return user }
            found += 1
        }
        fatalError("unreachable: the numbers never end")
    }

    static func configuration() -> RelayEngine.Configuration {
        var configuration = RelayEngine.Configuration()
        configuration.layout = layout
        return configuration
    }

    static func partition(_ number: Int32) -> TopicPartition { TopicPartition("push.events", number) }

    static func message(_ partition: Int32, _ offset: Int64, _ value: [UInt8], headers: [KafkaHeader] = []) -> KafkaMessage {
        KafkaMessage(topic: "push.events", partition: partition, offset: offset, key: Array("evt".utf8), value: value, headers: headers)
    }

    /// A harness that owns every partition of ``layout``, restored empty (partition 0's layout recorded).
    static func harness(seed: UInt64 = 1) -> EngineHarness {
        var harness = EngineHarness(configuration: configuration(), seed: seed)
        harness.run(harness.engine.assigned((0..<layout.partitionCount).map(partition)))
        return harness
    }

    @Test("an event read away from its user's home goes there (keyed by the user, its value and headers kept, a forward header), and its record is finished once Kafka has it")
    func forwardsToTheHome() {
        var harness = Self.harness()
        let user = Self.user(homedAt: 2)
        let value = eventJSON(id: "e1", user: user, seq: 1, tokens: [token(1)])
        let trace = KafkaHeader(key: "traceparent", value: Array("00-abc-def-01".utf8))
        harness.run(harness.engine.consumed(Self.message(0, 7, value, headers: [trace]), now: harness.now))
        #expect(harness.forwarded.count == 1)
        #expect(harness.forwarded.first?.user == user && harness.forwarded.first?.home == 2)
        #expect(harness.sent.isEmpty, "nothing is sent where the event was read")
        #expect(harness.changelog.isEmpty, "nothing is counted where the event was read")
        harness.settle()
        #expect(harness.results.isEmpty, "the results come from the home")
        #expect(harness.committed[Self.partition(0)] == 8)
        #expect(harness.engine.counters.eventsForwarded == [0: 1])
    }

    @Test("an event's trace context travels with its forward: the copy read at home gives results that carry it")
    func traceContextThroughAForward() {
        var harness = Self.harness()
        let user = Self.user(homedAt: 2)
        let value = eventJSON(id: "e1", user: user, seq: 1, tokens: [token(1)])
        let trace = KafkaHeader(key: "traceparent", value: Array("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".utf8))
        harness.run(harness.engine.consumed(Self.message(0, 7, value, headers: [trace]), now: harness.now))
        #expect(harness.forwarded.first?.message.headers == [trace], "the forward carries the input's headers (the driver adds its hop)")
        let hop = KafkaHeader(key: ForwardSource.header, value: ForwardSource(partition: 0, offset: 7).headerValue)
        harness.run(harness.engine.consumed(Self.message(2, 0, value, headers: [trace, hop]), now: harness.now))
        harness.settle()
        #expect(harness.results.map(\.status) == [.delivered])
        #expect(harness.results.allSatisfy { $0.trace.headers == [trace] }, "\(harness.results.map(\.trace))")
    }

    @Test("an event without a user (explicit tokens only) has no home: it is sent where it is read, never forwarded")
    func eventsWithoutAUserStayWhereRead() {
        var harness = Self.harness()
        let device = token(7)
        let value = Array("{\"id\":\"t1\",\"tokens\":[\"\(device)\"],\"apns\":{\"payload\":{\"aps\":{\"alert\":\"hi\"}}}}".utf8)
        for partition in Int32(0)..<Self.layout.partitionCount {
            harness.run(harness.engine.consumed(Self.message(partition, 0, value), now: harness.now))
        }
        harness.settle()
        #expect(harness.forwarded.isEmpty)
        #expect(harness.sent.count == Int(Self.layout.partitionCount), "each copy sent where it was read")
        #expect(harness.engine.counters.eventsForwarded.isEmpty)
    }

    @Test("at home a forwarded event counts once; a repeat of it (its forwarder crashed before storing its progress) is finished silently, held or applied")
    func repeatsAreSilent() {
        var harness = Self.harness()
        let user = Self.user(homedAt: 1)
        let device = token(2)
        let source = ForwardSource(partition: 3, offset: 40)
        let header = [KafkaHeader(key: ForwardSource.header, value: source.headerValue)]
        // seq 2 first: held for the gap; its repeat arrives while it is held, and again after seq 1 fills the gap.
        harness.run(harness.engine.consumed(Self.message(1, 0, eventJSON(id: "e2", user: user, seq: 2, tokens: [device]), headers: header), now: harness.now))
        harness.run(harness.engine.consumed(Self.message(1, 1, eventJSON(id: "e2", user: user, seq: 2, tokens: [device]), headers: header), now: harness.now))
        harness.run(harness.engine.consumed(Self.message(1, 2, eventJSON(id: "e1", user: user, seq: 1, tokens: [device])), now: harness.now))
        harness.settle()
        harness.run(harness.engine.consumed(Self.message(1, 3, eventJSON(id: "e2", user: user, seq: 2, tokens: [device]), headers: header), now: harness.now))
        harness.settle()
        #expect(harness.received[device] == [1, 2])
        #expect(harness.results.map(\.eventID).sorted() == ["e1", "e2"], "no duplicate result for a repeated forward: \(harness.results.map(\.status))")
        #expect(harness.engine.counters.forwardsRepeated == 2)
        #expect(harness.committed[Self.partition(1)] == 4)
        // The changelog remembers the forward for the next owner.
        #expect(harness.changelog.last?.record.forwarded == [source])
    }

    @Test("a repeat of a forward a previous owner counted is sent again with the current count, never counted again")
    func repeatOfAPreviousOwnersForward() {
        let user = Self.user(homedAt: 1)
        let device = token(3)
        var changelog = RestoredChangelog()
        changelog.add(key: PartitionLayout.recordKey[...], value: Self.layout.encoded()[...])
        changelog.add(key: Array(user.utf8)[...], value: BadgeStateRecord(badge: 5, seq: 5, offset: 9, forwarded: [ForwardSource(partition: 0, offset: 70)],
                                                                           updatedAt: 1).encoded()[...])
        var harness = EngineHarness(configuration: Self.configuration(), seed: 2)
        let effects = harness.engine.assigned([Self.partition(1)])
        guard case .restore(_, let generation)? = effects.first(where: { if case .restore = $0 { true } else { false } }) else {
            Issue.record("no restore")
            return
        }
        harness.run(harness.engine.restored(Self.partition(1), generation: generation, changelog: changelog, now: harness.now))
        let header = [KafkaHeader(key: ForwardSource.header, value: ForwardSource(partition: 0, offset: 70).headerValue)]
        harness.run(harness.engine.consumed(Self.message(1, 12, eventJSON(id: "e5", user: user, seq: 5, tokens: [device]), headers: header), now: harness.now))
        harness.run(harness.engine.consumed(Self.message(1, 13, eventJSON(id: "e5", user: user, seq: 5, tokens: [device]), headers: header), now: harness.now))
        harness.settle()
        #expect(harness.received[device] == [5], "sent again once with the current count")
        #expect(harness.changelog.last?.record.badge == 5, "not counted again")
        #expect(harness.results.map(\.eventID) == ["e5"])
    }

    @Test("a repeat of a forward a previous owner applied here and finished (its marker covers where it was applied) is finished unsent, without a result; one it left open, or a mark without where (carried by a migration), is sent again", arguments: ["finished", "open", "moved"])
    func repeatOfAFinishedForward(previous: String) {
        let user = Self.user(homedAt: 1)
        let device = token(4)
        var changelog = RestoredChangelog()
        changelog.add(key: PartitionLayout.recordKey[...], value: Self.layout.encoded()[...])
        // The forward 0:70 was applied here at offset 9 (a migration's mark says nothing of where).
        let appliedAt: [Int32: Int64] = previous == "moved" ? [:] : [0: 9]
        changelog.add(key: Array(user.utf8)[...], value: BadgeStateRecord(badge: 5, seq: 5, offset: 9, forwarded: [ForwardSource(partition: 0, offset: 70)],
                                                                           forwardedAt: appliedAt, updatedAt: 1).encoded()[...])
        // The previous owner finished every record through 11, or left the forward's copy (9) open.
        let marker = ProgressMarker(through: 11, open: previous == "open" ? [9] : [])
        changelog.add(key: ProgressMarker.key[...], value: marker.encoded(at: 1)[...])
        var harness = Self.restored(1, from: changelog, seed: 3)
        let header = [KafkaHeader(key: ForwardSource.header, value: ForwardSource(partition: 0, offset: 70).headerValue)]
        harness.run(harness.engine.consumed(Self.message(1, 12, eventJSON(id: "e5", user: user, seq: 5, tokens: [device]), headers: header), now: harness.now))
        harness.settle()
        if previous == "finished" {
            #expect(harness.received[device] == nil, "finished: not sent again")
            #expect(harness.results.isEmpty, "no second result")
            #expect(harness.engine.counters.forwardsRepeated == 1)
            #expect(harness.committed[Self.partition(1)] == 13, "the repeat is finished")
        } else {
            #expect(harness.received[device] == [5], "maybe never sent: sent again with the current count")
        }
        #expect(harness.changelog.allSatisfy { $0.record.badge == 5 }, "never counted again")
    }

    /// A harness owning partition `partition` alone, restored from `changelog`.
    static func restored(_ partition: Int32, from changelog: RestoredChangelog, seed: UInt64) -> EngineHarness {
        var harness = EngineHarness(configuration: configuration(), seed: seed)
        let effects = harness.engine.assigned([Self.partition(partition)])
        guard case .restore(_, let generation)? = effects.first(where: { if case .restore = $0 { true } else { false } }) else {
            Issue.record("no restore")
            return harness
        }
        harness.run(harness.engine.restored(Self.partition(partition), generation: generation, changelog: changelog, now: harness.now))
        return harness
    }

    @Test("after a restart, a forward held for a gap below a later forward applied before it is still applied (its seq is not), once")
    func heldForwardBelowTheMarkAfterARestart() {
        let user = Self.user(homedAt: 1)
        let device = token(5)
        func header(_ offset: Int64) -> [KafkaHeader] { [KafkaHeader(key: ForwardSource.header, value: ForwardSource(partition: 3, offset: offset).headerValue)] }
        // Before the crash: seq 3 (forwarded from 3:5) held for seq 2; seq 1 (from 3:7) applied, so the mark says 3:7.
        var changelog = RestoredChangelog()
        changelog.add(key: PartitionLayout.recordKey[...], value: Self.layout.encoded()[...])
        changelog.add(key: Array(user.utf8)[...], value: BadgeStateRecord(badge: 1, seq: 1, offset: 11, forwarded: [ForwardSource(partition: 3, offset: 7)],
                                                                           updatedAt: 1).encoded()[...])
        var harness = Self.restored(1, from: changelog, seed: 3)
        // The next owner reads both again, then seq 2 (from 3:6) arrives.
        harness.run(harness.engine.consumed(Self.message(1, 10, eventJSON(id: "e3", user: user, seq: 3, tokens: [device]), headers: header(5)), now: harness.now))
        harness.run(harness.engine.consumed(Self.message(1, 11, eventJSON(id: "e1", user: user, seq: 1, tokens: [device]), headers: header(7)), now: harness.now))
        harness.run(harness.engine.consumed(Self.message(1, 12, eventJSON(id: "e2", user: user, seq: 2, tokens: [device]), headers: header(6)), now: harness.now))
        harness.settle()
        #expect(harness.received[device] == [1, 2, 3], "seq 1 sent again with its count, then 2 and 3 counted: \(harness.received[device] ?? [])")
        #expect(harness.changelog.last?.record.badge == 3 && harness.changelog.last?.record.seq == 3)
        #expect(Set(harness.results.map(\.eventID)) == ["e1", "e2", "e3"] && harness.results.count == 3)
    }

    @Test("after a growth, a forward made under the old layout is dropped where its source's owner forwards it again, and forwarded on where it does not")
    func copiesOfForwardsAfterAGrowth() {
        // Partition 1's owner reads again from offset 10, except 12 (its marker says finished): 10, 11 and 13 on.
        let readAgain = ReadAgain(partition: 1, committed: 10, progress: ProgressMarker(through: 12, open: [10, 11]))
        #expect(!readAgain.includes(9) && readAgain.includes(10) && readAgain.includes(11) && !readAgain.includes(12) && readAgain.includes(13))
        let value = Self.layout.encoded(readAgain: [readAgain], at: 5)
        #expect(PartitionLayout.decode(value) == Self.layout)
        #expect(PartitionLayout.readAgain(in: value) == [1: readAgain])

        var changelog = RestoredChangelog()
        changelog.add(key: PartitionLayout.recordKey[...], value: value[...])
        var harness = Self.restored(0, from: changelog, seed: 4)
        let user = Self.user(homedAt: 2)
        func forwarded(_ offset: Int64, id: String, from source: Int64) -> KafkaMessage {
            Self.message(0, offset, eventJSON(id: id, user: user, seq: nil, tokens: [token(6)]),
                         headers: [KafkaHeader(key: ForwardSource.header, value: ForwardSource(partition: 1, offset: source).headerValue)])
        }
        harness.run(harness.engine.consumed(forwarded(0, id: "read-again", from: 11), now: harness.now))
        harness.run(harness.engine.consumed(forwarded(1, id: "finished-there", from: 12), now: harness.now))
        harness.settle()
        #expect(harness.forwarded.map { String(decoding: $0.message.value ?? [], as: UTF8.self).contains("finished-there") } == [true],
                "only the copy whose source is not read again goes on")
        #expect(harness.engine.counters.forwardsRepeated == 1)
        #expect(harness.committed[Self.partition(0)] == 2)
    }

    @Test("a forward too large for Kafka is a dead letter where it was read; any other failed forward ends the relay")
    func failedForwards() {
        var harness = Self.harness()
        let user = Self.user(homedAt: 3)
        harness.failPublish = { effect in if case .forwardEvent = effect { .tooLarge } else { nil } }
        harness.run(harness.engine.consumed(Self.message(0, 0, eventJSON(id: "e1", user: user, seq: 1, tokens: [token(4)])), now: harness.now))
        harness.settle()
        #expect(harness.deadLetters.count == 1 && harness.deadLetters.first?.contains("too large to forward") == true)
        #expect(harness.committed[Self.partition(0)] == 1)
        harness.failPublish = { effect in if case .forwardEvent = effect { .other("Local: Message timed out") } else { nil } }
        harness.run(harness.engine.consumed(Self.message(0, 1, eventJSON(id: "e2", user: user, seq: 2, tokens: [token(4)])), now: harness.now))
        harness.settle()
        #expect(harness.exits.map(\.code) == [1])
        #expect(harness.exits.first?.reason.contains("forwarding an event from push.events[0] offset 1") == true, "\(harness.exits)")
    }

    // MARK: The layout

    private func verdict(_ records: [(key: [UInt8], value: [UInt8]?)], partition: Int32) -> LayoutVerdict {
        var changelog = RestoredChangelog()
        for record in records { changelog.add(key: record.key[...], value: record.value?[...]) }
        return LayoutVerdict.of(changelog, partition: partition, layout: Self.layout)
    }

    @Test("a partition is served under the layout it records; another count, users not at home or no layout record with state are refused; an empty one asks partition 0")
    func verdicts() {
        let home1 = Self.user(homedAt: 1)
        let state = BadgeStateRecord(badge: 1, seq: 1, updatedAt: 1).encoded()
        #expect(verdict([(PartitionLayout.recordKey, Self.layout.encoded()), (Array(home1.utf8), state)], partition: 1) == .serve)
        guard case .refuse(let grown) = verdict([(PartitionLayout.recordKey, PartitionLayout(partitionCount: 2).encoded())], partition: 1) else {
            Issue.record("a grown topic was served")
            return
        }
        #expect(grown == "its users were placed for 2 partitions, and the topic has 4 now")
        guard case .refuse(let misplaced) = verdict([(PartitionLayout.recordKey, Self.layout.encoded()), (Array(home1.utf8), state)], partition: 2) else {
            Issue.record("a user away from home was served")
            return
        }
        #expect(misplaced.contains("lives in partition 1"))
        guard case .refuse(let older) = verdict([(Array(home1.utf8), state)], partition: 1) else {
            Issue.record("state without a layout record was served")
            return
        }
        #expect(older.contains("did not record its layout"))
        #expect(verdict([], partition: 0) == .record)
        #expect(verdict([], partition: 3) == .askPartitionZero)
        var zero = RestoredChangelog()
        #expect(LayoutVerdict.fromPartitionZero(zero, layout: Self.layout) == .record, "a new deployment")
        zero.add(key: PartitionLayout.recordKey[...], value: PartitionLayout(partitionCount: 2).encoded()[...])
        #expect(LayoutVerdict.fromPartitionZero(zero, layout: Self.layout)
                == .refuse(problem: "partition 0 says users were placed for 2 partitions, and the topic has 4 now"))
        #expect(LayoutVerdict.refusal("x", badgeStatePartition: TopicPartition("push.badge-state", 3))
                .contains("run `apns-relay partitions migrate --config FILE`"))
    }

    @Test("the engine records the layout before a new partition's events run, and refuses a grown topic with exit 2 naming the command")
    func engineFollowsTheVerdict() {
        var harness = EngineHarness(configuration: Self.configuration(), seed: 4)
        let user = Self.user(homedAt: 0)
        harness.run(harness.engine.assigned([Self.partition(0)]))
        #expect(harness.layoutsWritten.map(\.partition) == [Self.partition(0)])
        harness.run(harness.engine.consumed(Self.message(0, 0, eventJSON(id: "e1", user: user, seq: 1, tokens: [token(5)])), now: harness.now))
        harness.settle()
        #expect(harness.results.map(\.status) == [.delivered])

        var grown = EngineHarness(configuration: Self.configuration(), seed: 4)
        grown.changelogOfPartitionZero.add(key: PartitionLayout.recordKey[...], value: PartitionLayout(partitionCount: 2).encoded()[...])
        grown.run(grown.engine.assigned([Self.partition(3)]))
        grown.run(grown.engine.consumed(Self.message(3, 0, eventJSON(id: "e1", user: Self.user(homedAt: 3), seq: 1, tokens: [token(5)])), now: grown.now))
        grown.settle()
        #expect(grown.exits.map(\.code) == [2])
        #expect(grown.exits.first?.reason.contains("apns-relay partitions migrate") == true)
        #expect(grown.sent.isEmpty && grown.changelog.isEmpty, "nothing counted or sent from nothing")
    }

    @Test("a growth while the relay runs stops it with exit 2 naming the command: a partition past the layout's count assigned, or the topic's count observed; the same count goes on")
    func growthWhileRunningStops() {
        // The rebalance after a growth hands out a partition the layout does not have: refused before it is restored.
        var assigned = Self.harness(seed: 5)
        assigned.run(assigned.engine.assigned([Self.partition(4), Self.partition(6)]))
        #expect(assigned.exits.map(\.code) == [2])
        #expect(assigned.exits.first?.reason.contains("placed for 4 partitions") == true)
        #expect(assigned.exits.first?.reason.contains("apns-relay partitions migrate") == true)
        #expect(assigned.engine.standing(of: Self.partition(4)) != .serving)

        // A relay whose partitions did not change learns it from the topic's count.
        var observed = Self.harness(seed: 6)
        observed.run(observed.engine.partitionCountObserved(4))
        #expect(observed.exits.isEmpty, "the layout's own count")
        let user = Self.user(homedAt: 1)
        observed.run(observed.engine.consumed(Self.message(1, 0, eventJSON(id: "e1", user: user, seq: 1, tokens: [token(5)])), now: observed.now))
        observed.settle()
        #expect(observed.results.map(\.status) == [.delivered])
        observed.run(observed.engine.partitionCountObserved(8))
        #expect(observed.exits.map(\.code) == [2])
        #expect(observed.exits.first?.reason.contains("it has 8 now") == true)
        observed.run(observed.engine.consumed(Self.message(1, 1, eventJSON(id: "e2", user: user, seq: 2, tokens: [token(5)])), now: observed.now))
        observed.settle()
        #expect(observed.results.count == 1, "nothing served after the growth was seen")
    }
}
