import Foundation
import Kafka
import Logging
import Synchronization
import TestSupport
import Testing

import Relay

/// `apns-relay run` processes with transactions on, against noida-db behind a ``KafkaBrokerFront`` (which expires a
/// member that dies without leaving and refuses a stale generation's offsets, as Kafka does): what a relay that dies
/// or is cut off mid-transaction costs the others.
@Suite("apns-relay run: transactions on a broker with markers", .serialized)
struct TransactionProcessTests {
    /// The events partitions a relay restored, from its log ("badge state restored ... partition=push.events[N]").
    static func restoredPartitions(in log: String) -> Set<Int32> {
        var partitions = Set<Int32>()
        for line in log.split(separator: "\n") where line.contains("badge state restored") {
            guard let range = line.range(of: "partition=push.events[") else { continue }
            let digits = line[range.upperBound...].prefix { $0.isNumber }
            if let partition = Int32(digits) { partitions.insert(partition) }
        }
        return partitions
    }

    @Test("a relay killed while it forwards events holds back the home partitions it forwarded into for at most relay.transaction_timeout_ms: the other relay answers their next events within it (the group's session timeout is longer)")
    func killedRelayHoldsHomesBriefly() async throws {
        let users = 60
        let fixture = try await BrokerRelayFixture.start(users: users, devicesPerUser: 1, throughFront: true)
        try await fixture.createTopicsThenRegisterDevices()
        // A coordinator that takes half a second to end a transaction (as under load): the relay that is killed has a
        // transaction open, its records on the broker, whenever it is killed.
        fixture.front?.delayRequests(ofAPIKey: 26, by: .seconds(1))
        // A session timeout three times the transaction timeout: the killed relay's partitions move only after it.
        let environment = ["APNS_RELAY_KAFKA_PROPERTIES_SESSION_TIMEOUT_MS": "30000"]
        let killed = try fixture.startRelay("killed", environment: environment)
        #expect(await killed.waitFor("badge state restored"), "\(killed.output.suffix(2_000))")
        let survivor = try fixture.startRelay("survivor", environment: environment)
        #expect(await waitUntil(timeout: .seconds(60)) { !Self.restoredPartitions(in: survivor.output).isEmpty }, "\(survivor.output.suffix(2_000))")
        try await Task.sleep(for: .seconds(2))

        // Every 2 ms one event of the next user, keyed by its event id: about five of six are read away from their
        // user's home and forwarded there, in the reading relay's transaction.
        let layout = PartitionLayout(partitionCount: Int32(BrokerRelayFixture.partitions))
        let produced = Mutex<[String: Int64]>([:])  // "user/seq" → when produced (epoch ms)
        let producer = try KafkaProducer(configuration: fixture.kafka, logger: fixture.logger)
        let traffic = Task {
            var seqs = [Int](repeating: 0, count: users)
            var next = 0
            while !Task.isCancelled {
                let user = next % users
                next += 1
                seqs[user] += 1
                let id = "u\(user)-e\(seqs[user])"
                let value = Array("{\"id\":\"\(id)\",\"user\":\"u-\(user)\",\"seq\":\(seqs[user]),\"badge\":{\"increment\":1},\"apns\":{\"payload\":{\"aps\":{\"alert\":\"\(id)\"}}}}".utf8)
                produced.withLock { $0["\(user)/\(seqs[user])"] = Int64((Date().timeIntervalSince1970 * 1_000).rounded()) }
                _ = try? await producer.enqueue(KafkaRecord(topic: "push.events", key: Array(id.utf8), value: value))
                try? await Task.sleep(for: .milliseconds(2))
            }
        }
        try await Task.sleep(for: .seconds(5))
        let survivorPartitions = Self.restoredPartitions(in: survivor.output)
        kill(killed.process.processIdentifier, SIGKILL)
        let killedAt = Int64((Date().timeIntervalSince1970 * 1_000).rounded())
        try await Task.sleep(for: .seconds(25))
        traffic.cancel()
        _ = await traffic.value
        try await producer.flush()
        await producer.close()

        // Per partition the survivor held, how long after the kill its users' first event produced after the kill
        // (half a second on, so it was read after the kill) reached APNs.
        let producedAt = produced.withLock { $0 }
        var held: [Int32: Int64] = [:]
        for partition in survivorPartitions {
            let partitionUsers = (0..<users).filter { layout.home(of: "u-\($0)") == partition }
            var first: Int64?
            for user in partitionUsers {
                for delivery in fixture.simulator.deliveries(for: fixture.token(user: user, device: 0)) {
                    guard let seq = delivery.badge, let at = producedAt["\(user)/\(seq)"], at >= killedAt + 500 else { continue }
                    first = min(first ?? .max, delivery.receivedAt)
                }
            }
            held[partition] = (first ?? .max) - killedAt
        }
        // The transaction timeout (10 s, counted from before the kill), then the survivor's own commit (1 s at least
        // with the slowed coordinator) of the first event it reads: well under the session timeout (30 s).
        #expect(!held.isEmpty && held.values.allSatisfy { $0 <= 18_000 },
                "milliseconds from the kill until each of the survivor's partitions answered an event produced after it: \(held.sorted { $0.key < $1.key })")
        print("front events: \(fixture.front?.events ?? [])")
        print("killed relay: the survivor's partitions answered again after \(held.sorted { $0.key < $1.key }) ms (partition: ms)")
        #expect(await survivor.stopGracefully(), "\(survivor.output.suffix(3_000))")
        try await fixture.stop()
    }
}
