import CRdKafka
public import Logging
import Synchronization

/// librdkafka's in-process mock cluster: it speaks the real Kafka protocol on loopback, so any
/// client (in this process or another) can use it through `bootstrapServers`.
///
/// It supports consumer groups, commits, idempotent producers and fault injection, but keeps only
/// the newest few megabytes per partition and does not compact.
public final class EmbeddedKafka: Sendable {
    // The mock cluster is thread-safe by librdkafka's contract; its calls enqueue work on the
    // cluster's own thread. `stopped` guards against use after destruction.
    nonisolated(unsafe) private let cluster: OpaquePointer
    nonisolated(unsafe) private let owner: OpaquePointer
    private let stopped = Mutex(false)

    /// The bootstrap servers of the cluster, `127.0.0.1:port,...`.
    public let bootstrapServers: String
    /// Broker ids are 1...brokerCount.
    public let brokerCount: Int

    /// Starts a cluster of `brokers` brokers on loopback ports chosen by the system.
    public init(brokers: Int = 1, logger: Logger = Logger(label: "embedded-kafka")) throws {
        var conf = try RdKafkaConfig(KafkaConfiguration(bootstrapServers: ""), roleDefaults: ["log_level": "3"], enforced: [:])
        let configuration = conf.take()
        var errorText = [CChar](repeating: 0, count: 512)
        guard let owner = rd_kafka_new(RD_KAFKA_PRODUCER, configuration, &errorText, errorText.count) else {
            rd_kafka_conf_destroy(configuration)
            throw KafkaError.client("CLIENT_CREATE", String(cStringBuffer: errorText), operation: "start embedded cluster")
        }
        guard let cluster = rd_kafka_mock_cluster_new(owner, Int32(brokers)) else {
            rd_kafka_destroy(owner)
            throw KafkaError.client("MOCK_CLUSTER", "librdkafka could not start a mock cluster", operation: "start embedded cluster")
        }
        self.owner = owner
        self.cluster = cluster
        self.brokerCount = brokers
        self.bootstrapServers = String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
        logger.info("embedded Kafka started", metadata: ["bootstrap": "\(bootstrapServers)", "brokers": "\(brokers)"])
    }

    deinit {
        stop()
    }

    /// Creates a topic with this many partitions.
    public func createTopic(_ name: String, partitions: Int, replicationFactor: Int = 1) throws {
        try checkRunning("create topic \(name)")
        let error = rd_kafka_mock_topic_create(cluster, name, Int32(partitions), Int32(replicationFactor))
        if error != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(error, operation: "create topic \(name)") }
    }

    /// Takes a broker down: its connections close and new ones are refused until `setBrokerUp`.
    public func setBrokerDown(_ brokerID: Int32) throws {
        try checkRunning("take broker \(brokerID) down")
        let error = rd_kafka_mock_broker_set_down(cluster, brokerID)
        if error != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(error, operation: "take broker \(brokerID) down") }
    }

    /// Brings a broker taken down by `setBrokerDown` back.
    public func setBrokerUp(_ brokerID: Int32) throws {
        try checkRunning("bring broker \(brokerID) up")
        let error = rd_kafka_mock_broker_set_up(cluster, brokerID)
        if error != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(error, operation: "bring broker \(brokerID) up") }
    }

    /// Makes the next `count` requests of Kafka protocol type `apiKey` (0 Produce, 1 Fetch,
    /// 2 ListOffsets, ...) fail with the broker error `code` (19 NOT_ENOUGH_REPLICAS, say): a fault
    /// for tests. Requests from every client of the cluster take from the same count.
    public func failRequests(apiKey: Int16, count: Int, code: Int32) throws {
        try checkRunning("fail requests")
        let errors = [rd_kafka_resp_err_t](repeating: rd_kafka_resp_err_t(rawValue: code), count: count)
        rd_kafka_mock_push_request_errors_array(cluster, apiKey, count, errors)
    }

    /// Keeps `depth` errors `code` queued on every broker for requests of type `apiKey`: called
    /// every few milliseconds, the brokers refuse those requests until the calls stop (then at most
    /// `depth` more are refused per broker). A fault for tests ("refuse writes for 20 s").
    public func topUpRequestErrors(apiKey: Int16, code: Int32, depth: Int) throws {
        try checkRunning("queue request errors")
        for broker in 1...Int32(brokerCount) {
            var queued = 0
            _ = rd_kafka_mock_broker_error_stack_cnt(cluster, broker, apiKey, &queued)
            for _ in queued..<max(queued, depth) {
                _ = crdkafka_mock_broker_push_request_error(cluster, broker, apiKey, rd_kafka_resp_err_t(rawValue: code), 0)
            }
        }
    }

    /// Stops the cluster; clients connected to it see their brokers disappear. Idempotent.
    public func stop() {
        let alreadyStopped = stopped.withLock { stopped in
            defer { stopped = true }
            return stopped
        }
        guard !alreadyStopped else { return }
        rd_kafka_mock_cluster_destroy(cluster)
        rd_kafka_destroy(owner)
    }

    private func checkRunning(_ operation: String) throws {
        if stopped.withLock({ $0 }) { throw KafkaError.closed(operation: operation) }
    }
}
