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
}
