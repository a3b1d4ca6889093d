import CRdKafka
public import Logging

/// A producer whose records, and the consumer-group offsets sent with them, become visible together or not at
/// all: a transaction.
///
/// Its `transactional.id` names one writer. ``initTransactions(timeout:)`` bumps the id's producer epoch at the
/// broker, which aborts the open transaction of any earlier producer with that id and fences it: whatever that one
/// does next fails with ``KafkaError/isFenced``, and its records never reach a `read_committed` reader (the
/// relay's consumers and ``KafkaPartitionReader``). That makes a new owner of a piece of work safe from a stale one.
///
/// Each cycle: ``beginTransaction()``, produce (``produce(_:tag:)``, ``send(_:)``), optionally
/// ``sendOffsetsToTransaction(_:groupMetadata:timeout:)``, then ``commitTransaction(timeout:)`` (or
/// ``abortTransaction(timeout:)``). What an error asks of the caller: ``KafkaError/isRetriable``: call the same
/// operation again; ``KafkaError/transactionRequiresAbort``: abort, then redo the work in a new transaction (which
/// may ask for one more abort: after a refused record librdkafka reuses its sequence number, which the broker refuses
/// as out of order, and bumps the producer epoch only at that abort);
/// ``KafkaError/isFenced`` or ``KafkaError/isFatal`` (or none of the three): close the producer, the work is
/// someone else's now. Idempotence and `acks=all` hold as for ``KafkaProducer``. The transactional calls run off
/// Swift's cooperative pool, one at a time; call them from one task.
public final class KafkaTransactionalProducer: Sendable {
    private let producer: KafkaProducer
    /// The writer this producer is: the producer that initialised it last owns its transactions.
    public let transactionalID: String

    /// The outcomes of the records produced under a tag (``produce(_:tag:)``); see
    /// ``KafkaProducer/deliveryReports``. A record's report says the broker stored it, not that it is committed:
    /// it becomes visible only with its transaction's commit.
    public var deliveryReports: AsyncStream<[KafkaTaggedDeliveryReport]> { producer.deliveryReports }

    /// Creates the producer; call ``initTransactions(timeout:)`` before anything else.
    ///
    /// - Parameters:
    ///   - transactionalID: the writer's stable name, the same for every producer that may take over its work
    ///     (e.g. derived from the consumer group and the input partition).
    ///   - transactionTimeout: how long the broker lets a transaction stay open without hearing from its producer
    ///     before aborting it (`transaction.timeout.ms`, at most the broker's `transaction.max.timeout.ms`). It
    ///     also bounds a record's delivery (`message.timeout.ms`), which must not outlast its transaction.
    ///   - lingerMilliseconds: librdkafka's `linger.ms` unless the configuration's properties set it.
    /// - Throws: `KafkaError` naming a bad pass-through property.
    public init(
        configuration: KafkaConfiguration, logger: Logger, transactionalID: String,
        transactionTimeout: Duration = .seconds(60), lingerMilliseconds: Int = 5
    ) throws {
        let milliseconds = max(1_000, Int(transactionTimeout.milliseconds))
        var configuration = configuration
        // A failed record fails its transaction, whose abort hides the records after it too: the gapless
        // guarantee (a fatal error instead) has nothing to add, and librdkafka ignores it for transactions.
        configuration.properties["enable.gapless.guarantee"] = nil
        // A record's delivery must not outlast its transaction (librdkafka refuses the producer otherwise): a longer
        // `message.timeout.ms` in the properties is cut to the transaction timeout.
        let messageTimeout = min(milliseconds, configuration.properties["message.timeout.ms"].flatMap(Int.init) ?? milliseconds)
        producer = try KafkaProducer(
            configuration: configuration, logger: logger, lingerMilliseconds: lingerMilliseconds, roleDefaults: [:],
            enforced: ["transactional.id": transactionalID, "transaction.timeout.ms": "\(milliseconds)", "message.timeout.ms": "\(messageTimeout)"]
        )
        self.transactionalID = transactionalID
    }

    /// Registers the producer as its `transactional.id`'s current writer: completes or aborts the transaction an
    /// earlier producer with this id left open and fences that producer. Once, before the first transaction.
    ///
    /// - Parameter timeout: how long to wait; `nil`: twice the transaction timeout. A retriable timeout may be
    ///   retried: the call resumes where it stopped.
    public func initTransactions(timeout: Duration? = nil) async throws {
        try await run("init transactions", timeout: timeout) { rd_kafka_init_transactions($0, $1) }
    }

    /// Starts a transaction: what is produced from now on, and offsets sent, are committed or aborted together.
    ///
    /// Runs on the caller's thread, not the blocking queue: it sends no request, librdkafka's main thread only
    /// moves the transaction's state, and a hop per transaction costs more than that wait. Not while another
    /// transactional call of this producer runs.
    public func beginTransaction() async throws {
        if let error = rd_kafka_begin_transaction(producer.handle.pointer) {
            throw KafkaError.consuming(error, operation: "begin transaction")
        }
    }

    /// Makes committing `offsets` for the group part of the current transaction: the group's committed offsets
    /// move only if the transaction commits.
    ///
    /// - Parameters:
    ///   - offsets: per partition, the offset of the next record to read (the last finished one + 1).
    ///   - groupMetadata: the group, ideally from its member (``KafkaConsumer/groupMetadata()``) so that a
    ///     broker that checks the generation refuses a stale member's offsets.
    ///   - timeout: how long to wait; `nil`: the transaction's remaining time. On a retriable error, call again
    ///     with the same offsets and metadata.
    public func sendOffsetsToTransaction(
        _ offsets: [TopicPartition: Int64], groupMetadata: KafkaConsumerGroupMetadata, timeout: Duration? = nil
    ) async throws {
        guard !offsets.isEmpty else { return }
        try await run("send offsets of group \(groupMetadata.groupID) to transaction", timeout: timeout) { client, milliseconds in
            KafkaPartitionList(Array(offsets.keys), offsets: offsets).withPointer { list in
                rd_kafka_send_offsets_to_transaction(client, list, groupMetadata.pointer, milliseconds)
            }
        }
    }

    /// Delivers what is still queued, then commits the transaction: its records become visible and its offsets
    /// committed, at once.
    ///
    /// - Parameter timeout: how long to wait; `nil` (librdkafka's advice): the transaction's remaining time. A
    ///   retriable timeout may be retried: the commit goes on where it stopped.
    /// - Throws: `KafkaError`: ``KafkaError/transactionRequiresAbort`` when a record failed (abort, then redo),
    ///   ``KafkaError/isFenced`` when a newer producer took over.
    public func commitTransaction(timeout: Duration? = nil) async throws {
        try await run("commit transaction", timeout: timeout) { rd_kafka_commit_transaction($0, $1) }
    }

    /// Waits until every record produced so far has its delivery report (stored by the broker, not committed), at
    /// most `timeout`. Within a transaction: what is flushed is on the broker before what follows is sent.
    ///
    /// - Throws: a retriable `KafkaError` when records are still in flight after `timeout` (call again to wait on).
    public func flush(timeout: Duration) async throws {
        do {
            try await producer.flush(timeout: timeout)
        } catch let error as KafkaError where error.code == RD_KAFKA_RESP_ERR__TIMED_OUT.rawValue {
            throw KafkaError(code: error.code, name: error.name, message: "records still in flight after \(timeout)", operation: error.operation,
                             retriable: true)
        }
    }

    /// Aborts the transaction: its records are never visible to `read_committed` readers and its offsets never
    /// committed. Records still queued fail (their delivery reports say `_PURGE_QUEUE` or `_PURGE_INFLIGHT`).
    ///
    /// - Parameter timeout: how long to wait; `nil` (librdkafka's advice): the transaction's remaining time.
    public func abortTransaction(timeout: Duration? = nil) async throws {
        try await run("abort transaction", timeout: timeout) { rd_kafka_abort_transaction($0, $1) }
    }

    /// Hands a record to the current transaction; its outcome comes in ``deliveryReports`` under `tag`. See
    /// ``KafkaProducer/produce(_:tag:)``. Fails at once outside a transaction.
    public func produce(_ record: KafkaRecord, tag: UInt64) async throws {
        try await producer.produce(record, tag: tag)
    }

    /// Produces a record in the current transaction and waits for the broker to store it (not to commit it). See
    /// ``KafkaProducer/send(_:)``.
    public func send(_ record: KafkaRecord) async throws -> KafkaDeliveryReport {
        try await producer.send(record)
    }

    /// Hands a record to the current transaction without waiting for the broker. See ``KafkaProducer/enqueue(_:)``.
    public func enqueue(_ record: KafkaRecord) async throws -> KafkaPendingDelivery {
        try await producer.enqueue(record)
    }

    /// Delivers what is queued (up to `timeout`) and stops the delivery-report thread. A transaction still open
    /// is not committed: the broker aborts it after the transaction timeout, or when the id's next producer
    /// initialises.
    public func close(timeout: Duration = .seconds(30)) async {
        await producer.close(timeout: timeout)
    }

    /// The librdkafka handle, for tests that call librdkafka's own test hooks.
    var handleForTesting: KafkaClientHandle { producer.handle }

    /// Runs one transactional call of librdkafka on the blocking queue (with `timeout` in milliseconds, -1 for
    /// librdkafka's own bound), then hands on the delivery reports it served (a commit's flush, an abort's purge),
    /// and throws its error as a `KafkaError`.
    private func run(
        _ operation: String, timeout: Duration?,
        _ call: @escaping @Sendable (_ client: OpaquePointer, _ milliseconds: Int32) -> OpaquePointer?
    ) async throws {
        let milliseconds = timeout?.milliseconds ?? -1
        try await producer.handle.runBlocking { [taggedReports = producer.taggedReports] client in
            let error = call(client, milliseconds)
            taggedReports.deliver()
            if let error { throw KafkaError.consuming(error, operation: operation) }
        }
    }
}
