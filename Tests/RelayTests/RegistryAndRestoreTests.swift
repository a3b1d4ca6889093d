import Testing
@testable import Relay

private func registration(user: String, at: Int64, environment: String = "production") -> [UInt8] {
    Array("{\"user\":\"\(user)\",\"topic\":\"com.example.app\",\"environment\":\"\(environment)\",\"registered_at\":\(at)}".utf8)
}

@Suite struct DeviceRegistryTests {
    @Test func registersMovesAndRemoves() {
        var registry = DeviceRegistry()
        #expect(registry.apply(key: token(1).uppercased(), value: registration(user: "u-42", at: 100)) == nil)
        #expect(registry.apply(key: token(2), value: registration(user: "u-42", at: 100, environment: "sandbox")) == nil)
        #expect(registry.devices(of: "u-42").map(\.token) == [token(1), token(2)])
        #expect(registry.registration(for: token(2))?.environment == .sandbox)
        registry.apply(key: token(1), value: registration(user: "u-7", at: 200))  // the device changed hands
        #expect(registry.devices(of: "u-42").map(\.token) == [token(2)])
        #expect(registry.devices(of: "u-7").map(\.user) == ["u-7"])
        registry.apply(key: token(2), value: nil)
        #expect(registry.devices(of: "u-42").isEmpty)
        #expect(registry.count == 1)
    }

    @Test func unreadableRegistrationsAreRefusedByName() {
        var registry = DeviceRegistry()
        #expect(registry.apply(key: "xyz", value: registration(user: "u", at: 1))?.reason == "key must be 64 to 200 hex characters, got 3")
        #expect(registry.apply(key: token(1), value: registration(user: "u", at: 1, environment: "prod"))?.reason
            == "environment must be \"production\" or \"sandbox\"")
        #expect(registry.apply(key: token(1), value: Array(#"{"user":"u","topic":"t","environment":"sandbox","registered_at":"1"}"#.utf8))?.reason
            == "registered_at must be an integer >= 0 (epoch milliseconds)")
        #expect(registry.apply(key: token(1), value: Array(#"{"topic":"t","environment":"sandbox","registered_at":1}"#.utf8))?.reason
            == "user must be a non-empty string")
        #expect(registry.count == 0)
    }

    /// A dead-token report removes a registration only if it was made before the report's `since`.
    @Test func deadTokenRespectsSince() {
        var registry = DeviceRegistry()
        registry.apply(key: token(1), value: registration(user: "u", at: 1_000))
        #expect(registry.reportDead(token: token(1), since: 1_000) == nil)  // re-registered at that moment: stays
        #expect(registry.reportDead(token: token(1), since: 999) == nil)
        #expect(registry.devices(of: "u").count == 1)
        #expect(registry.reportDead(token: token(1), since: 1_001)?.user == "u")
        #expect(registry.devices(of: "u").isEmpty)
        #expect(registry.reportDead(token: token(3), since: 5) == nil)  // unknown token
    }
}

@Suite struct BadgePartitionTests {
    @Test func restoreLastValueWinsAndNullDeletes() {
        var partition = BadgePartition<String>(sequencer: BadgeSequencer())
        #expect(partition.phase == .restoring)
        partition.restore(user: "a", value: BadgeStateRecord(badge: 1, seq: 1, updatedAt: 1).encoded())
        partition.restore(user: "b", value: BadgeStateRecord(badge: 9, seq: 4, updatedAt: 1).encoded())
        partition.restore(user: "a", value: BadgeStateRecord(badge: 5, seq: 7, updatedAt: 2).encoded())
        partition.restore(user: "b", value: nil)
        do { let result = partition.restore(user: "c", value: Array("garbage".utf8)); #expect(!result) }
        #expect(partition.unreadableStateRecords == 1)
        _ = partition.finishRestore(now: 0)
        #expect(partition.sequencer.ledger.allStates == ["a": UserBadgeState(badge: 5, lastSeq: 7)])
    }

    @Test func eventsWaitUntilRestoredThenRun() {
        var partition = BadgePartition<String>(sequencer: BadgeSequencer())
        let early = BadgeUpdate(user: "a", seq: 7, operation: .increment(1), tag: "dup")
        let next = BadgeUpdate(user: "a", seq: 8, operation: .increment(1), tag: "new")
        guard case .waitingForRestore = partition.offer(early, now: 0) else { Issue.record("should wait"); return }
        guard case .waitingForRestore = partition.offer(next, now: 0) else { Issue.record("should wait"); return }
        #expect(partition.tick(now: 10_000).isEmpty)
        partition.restore(user: "a", value: BadgeStateRecord(badge: 5, seq: 7, updatedAt: 2).encoded())
        let outcomes = partition.finishRestore(now: 1)
        #expect(outcomes.map(\.isDuplicate) == [true, false])
        #expect(outcomes.last?.appliedState == UserBadgeState(badge: 6, lastSeq: 8))
        do { let result = partition.restore(user: "a", value: nil); #expect(!result) }  // restore is over
        guard case .processed(let more) = partition.offer(BadgeUpdate(user: "a", seq: 9, operation: .set(0), tag: "x"), now: 2) else {
            Issue.record("should process"); return
        }
        #expect(more.first?.appliedState?.badge == 0)
    }

    @Test func revokeDropsStateAndRefuses() {
        var partition = BadgePartition<String>(sequencer: BadgeSequencer())
        _ = partition.finishRestore(now: 0)
        _ = partition.offer(BadgeUpdate(user: "a", seq: 1, operation: .set(3), tag: ""), now: 0)
        _ = partition.offer(BadgeUpdate(user: "a", seq: 3, operation: .set(3), tag: ""), now: 0)
        partition.revoke()
        #expect(partition.phase == .revoked)
        #expect(partition.sequencer.ledger.userCount == 0)
        #expect(partition.sequencer.heldUpdateCount == 0)
        guard case .refused = partition.offer(BadgeUpdate(user: "a", seq: 2, operation: .set(3), tag: ""), now: 0) else {
            Issue.record("should refuse"); return
        }
    }
}
