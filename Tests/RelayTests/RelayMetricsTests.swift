import Kafka
import MetricsTestKit
import Testing

@testable import Relay

@Suite("Relay metrics")
struct RelayMetricsTests {
    @Test("consumer lag per assigned partition; a partition given up reads 0 (its new owner reports it); how many are assigned")
    func lagOfPartitionsGivenUp() throws {
        let metrics = TestMetrics()
        let relay = RelayMetrics(factory: metrics)
        func lag(_ partition: Int32) throws -> Double? {
            try metrics.expectGauge("apns_relay_consumer_lag", [("topic", "lag-test"), ("partition", "\(partition)")]).lastValue
        }
        relay.recordLag([TopicPartition("lag-test", 0): 40, TopicPartition("lag-test", 1): 7])
        #expect(try lag(0) == 40 && lag(1) == 7)
        #expect(try metrics.expectGauge("apns_relay_partitions_assigned").lastValue == 2)
        // A rebalance: partition 1 went to another replica.
        relay.recordLag([TopicPartition("lag-test", 0): 12])
        #expect(try lag(0) == 12 && lag(1) == 0)
        #expect(try metrics.expectGauge("apns_relay_partitions_assigned").lastValue == 1)
        relay.recordLag([:])
        #expect(try lag(0) == 0)
        #expect(try metrics.expectGauge("apns_relay_partitions_assigned").lastValue == 0)
    }

    @Test("each partition commit counts by outcome and records its time")
    func transactionsCounted() throws {
        let metrics = TestMetrics()
        let relay = RelayMetrics(factory: metrics)
        relay.recordTransaction(succeeded: true, duration: .milliseconds(12))
        relay.recordTransaction(succeeded: true, duration: .milliseconds(30))
        relay.recordTransaction(succeeded: false, duration: .milliseconds(250))
        #expect(try metrics.expectCounter("apns_relay_kafka_transactions_total", [("outcome", "committed")]).totalValue == 2)
        #expect(try metrics.expectCounter("apns_relay_kafka_transactions_total", [("outcome", "failed")]).totalValue == 1)
        #expect(try metrics.expectTimer("apns_relay_kafka_transaction_commit_seconds").values == [12_000_000, 30_000_000, 250_000_000])
    }
}
