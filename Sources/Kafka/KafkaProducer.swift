import CRdKafka
import Foundation
public import Logging
import Synchronization

/// A Kafka producer with idempotence on and `acks=all`.
///
/// `send` returns once the broker has acknowledged the record (its delivery report), and throws
/// when delivery fails. A dedicated thread serves delivery reports, so nothing here blocks Swift's
/// cooperative pool.
public final class KafkaProducer: Sendable {
    let handle: KafkaClientHandle
    private let poller: KafkaPollThread
    let taggedReports: KafkaTaggedReports

    /// The outcomes of the records produced under a tag (``produce(_:tag:)``), a batch at a time: the reports
    /// one poll of librdkafka served, in the order it served them (a partition's in the order its records were
    /// produced). Ends once the producer is closed. One reader.
    public let deliveryReports: AsyncStream<[KafkaTaggedDeliveryReport]>

    /// Settings the producer's guarantees rest on; user properties cannot override them.
    static let enforcedProperties = [
        "enable.idempotence": "true",
        "acks": "all",
    ]

    /// A producer whose records to one partition are stored in the order produced with no gap: a record that fails
    /// (after `timeout`, librdkafka's `message.timeout.ms`) is never followed by a later one of the same partition
    /// from this producer, provided the caller produces nothing more after a failure (librdkafka's
    /// `enable.gapless.guarantee` turns the other errors that could leave a gap into a fatal error).
    public static func gapless(configuration: KafkaConfiguration, logger: Logger, lingerMilliseconds: Int, timeout: Duration) throws -> KafkaProducer {
        try KafkaProducer(configuration: configuration, logger: logger, lingerMilliseconds: lingerMilliseconds,
                          roleDefaults: ["message.timeout.ms": "\(max(1, timeout.milliseconds))"],
                          enforced: ["enable.gapless.guarantee": "true"])
    }

    /// Creates the producer and starts its delivery-report thread.
    ///
    /// - Parameter lingerMilliseconds: librdkafka's `linger.ms` unless the configuration's properties set it:
    ///   how long a record may wait for others to share its request (batching against latency).
    /// - Throws: `KafkaError` naming a bad pass-through property.
    public convenience init(configuration: KafkaConfiguration, logger: Logger, lingerMilliseconds: Int = 5) throws {
        try self.init(configuration: configuration, logger: logger, lingerMilliseconds: lingerMilliseconds, roleDefaults: [:], enforced: [:])
    }

    /// `roleDefaults` and `enforced` add to (and win over) the producer's own defaults and enforced settings.
    init(configuration: KafkaConfiguration, logger: Logger, lingerMilliseconds: Int, roleDefaults: [String: String],
                 enforced: [String: String]) throws {
        let conf = try RdKafkaConfig(
            configuration,
            roleDefaults: ["linger.ms": "\(lingerMilliseconds)", "message.timeout.ms": "30000", "partitioner": "murmur2_random"]
                .merging(roleDefaults) { $1 },
            enforced: Self.enforcedProperties.merging(enforced) { $1 }
        )
        let (deliveries, continuation) = AsyncStream.makeStream(of: [KafkaTaggedDeliveryReport].self)
        let taggedReports = KafkaTaggedReports(continuation)
        var callbacks = KafkaClientCallbacks(logger: logger)
        callbacks.deliveryReport = producerDeliveryCallback
        callbacks.taggedReports = taggedReports
        handle = try KafkaClientHandle(kind: RD_KAFKA_PRODUCER, configuration: conf, callbacks: callbacks)
        self.deliveryReports = deliveries
        self.taggedReports = taggedReports
        poller = KafkaPollThread(name: "kafka-producer") { [handle] in
            rd_kafka_poll(handle.pointer, 100)
            taggedReports.deliver()
        }
    }

    /// Produces one record and waits for its delivery report.
    ///
    /// When librdkafka's local queue is full the call waits for room instead of failing.
    /// - Returns: the partition and offset the broker assigned.
    /// - Throws: `KafkaError`, e.g. `MSG_SIZE_TOO_LARGE` before anything is sent, or the broker's
    ///   error after librdkafka's retries are exhausted.
    public func send(_ record: KafkaRecord) async throws -> KafkaDeliveryReport {
        try await enqueue(record).report()
    }

    /// Hands a record to librdkafka and returns without waiting for the broker.
    ///
    /// Records enqueued one after another by the same task keep that order within their partition
    /// (idempotence guarantees it across retries). Await `report()` on the result for the outcome.
    /// Waits only while librdkafka's local queue is full.
    public func enqueue(_ record: KafkaRecord) async throws -> KafkaPendingDelivery {
        KafkaPendingDelivery(box: try await enqueue(record, box: DeliveryBox(topic: record.topic)))
    }

    /// Hands a record to librdkafka and returns; its outcome comes in ``deliveryReports`` under `tag` (any value
    /// below 2^63, the caller's to choose: nothing is allocated per record). For producers with thousands of
    /// records in flight. Waits only while librdkafka's local queue is full.
    public func produce(_ record: KafkaRecord, tag: UInt64) async throws {
        precondition(tag < 1 << 63, "a delivery tag is below 2^63")
        // An odd opaque pointer: an object's address is never odd, so the report callback tells a tag from a box.
        let opaque = UnsafeMutableRawPointer(bitPattern: UInt(tag) << 1 | 1)!
        while true {
            switch enqueue(record, opaque: opaque) {
            case .enqueued: return
            case .queueFull: try await Task.sleep(for: .milliseconds(1))
            case .failed(let error): throw error
            }
        }
    }

    private func enqueue(_ record: KafkaRecord, box: DeliveryBox) async throws -> DeliveryBox {
        while true {
            let opaque = Unmanaged.passRetained(box).toOpaque()
            switch enqueue(record, opaque: opaque) {
            case .enqueued:
                return box
            case .queueFull:
                Unmanaged<DeliveryBox>.fromOpaque(opaque).release()
                // Back-pressure from librdkafka: wait for delivery reports to free room.
                try await Task.sleep(for: .milliseconds(1))
            case .failed(let error):
                Unmanaged<DeliveryBox>.fromOpaque(opaque).release()
                throw error
            }
        }
    }

    /// Produces a record built from its parts. See ``send(_:)``.
    @discardableResult
    public func send(
        topic: String, partition: Int32? = nil, key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader] = []
    ) async throws -> KafkaDeliveryReport {
        try await send(KafkaRecord(topic: topic, partition: partition, key: key, value: value, headers: headers))
    }

    /// Waits until every record produced so far has its delivery report, or the timeout passes.
    public func flush(timeout: Duration = .seconds(30)) async throws {
        let milliseconds = timeout.milliseconds
        try await handle.runBlocking { [taggedReports] pointer in
            let error = rd_kafka_flush(pointer, milliseconds)
            // The reports the flush served, on this thread.
            taggedReports.deliver()
            if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                throw KafkaError.from(error, operation: "flush")
            }
        }
    }

    /// Flushes outstanding records (up to `timeout`) and stops the delivery-report thread.
    public func close(timeout: Duration = .seconds(30)) async {
        do {
            try await flush(timeout: timeout)
        } catch {
            handle.logger.warning("producer closed with undelivered records", metadata: ["error": "\(error)"])
            // Whatever is still queued fails its senders rather than leaving them waiting forever.
            rd_kafka_purge(handle.pointer, Int32(RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT))
            rd_kafka_poll(handle.pointer, 0)
        }
        await poller.stop()
        taggedReports.deliver()
        taggedReports.finish()
    }

    deinit {
        poller.requestStop()
        taggedReports.finish()
    }

    /// The librdkafka handle, for tests that call librdkafka's own test hooks.
    var handleForTesting: KafkaClientHandle { handle }

    private enum EnqueueOutcome {
        case enqueued
        case queueFull
        case failed(KafkaError)
    }

    /// Hands one record to librdkafka (copying its bytes). Synchronous and non-blocking.
    private func enqueue(_ record: KafkaRecord, opaque: UnsafeMutableRawPointer) -> EnqueueOutcome {
        var headers: OpaquePointer? = nil
        if !record.headers.isEmpty {
            headers = rd_kafka_headers_new(record.headers.count)
            for header in record.headers {
                if let value = header.value {
                    value.withUnsafeBytes { bytes in
                        _ = rd_kafka_header_add(headers, header.key, -1, bytes.baseAddress, bytes.count)
                    }
                } else {
                    _ = rd_kafka_header_add(headers, header.key, -1, nil, 0)
                }
            }
        }
        let error: OpaquePointer? = record.topic.withCString { topic in
            withOptionalBytes(record.key) { keyPointer, keyCount in
                withOptionalBytes(record.value) { valuePointer, valueCount in
                    // On the stack: this runs for every record produced.
                    withUnsafeTemporaryAllocation(of: rd_kafka_vu_t.self, capacity: 7) { args in
                        args[0].vtype = RD_KAFKA_VTYPE_TOPIC
                        args[0].u.cstr = topic
                        args[1].vtype = RD_KAFKA_VTYPE_PARTITION
                        args[1].u.i32 = record.partition ?? RD_KAFKA_PARTITION_UA
                        args[2].vtype = RD_KAFKA_VTYPE_KEY
                        args[2].u.mem.ptr = keyPointer
                        args[2].u.mem.size = keyCount
                        args[3].vtype = RD_KAFKA_VTYPE_VALUE
                        args[3].u.mem.ptr = valuePointer
                        args[3].u.mem.size = valueCount
                        args[4].vtype = RD_KAFKA_VTYPE_MSGFLAGS
                        args[4].u.i = RD_KAFKA_MSG_F_COPY
                        args[5].vtype = RD_KAFKA_VTYPE_OPAQUE
                        args[5].u.ptr = opaque
                        var count = 6
                        if let headers {
                            args[6].vtype = RD_KAFKA_VTYPE_HEADERS
                            args[6].u.headers = headers
                            count = 7
                        }
                        return rd_kafka_produceva(handle.pointer, args.baseAddress, count)
                    }
                }
            }
        }
        guard let error else { return .enqueued }
        // On failure the headers stay ours to free.
        if let headers { rd_kafka_headers_destroy(headers) }
        if rd_kafka_error_code(error) == RD_KAFKA_RESP_ERR__QUEUE_FULL {
            rd_kafka_error_destroy(error)
            return .queueFull
        }
        return .failed(KafkaError.consuming(error, operation: "produce to \(record.topic)"))
    }
}

private func withOptionalBytes<R>(
    _ bytes: [UInt8]?, _ body: (UnsafeMutableRawPointer?, Int) -> R
) -> R {
    guard let bytes else { return body(nil, 0) }
    return bytes.withUnsafeBytes { buffer in
        // librdkafka copies the bytes (RD_KAFKA_MSG_F_COPY); it never writes through this pointer.
        body(UnsafeMutableRawPointer(mutating: buffer.baseAddress), buffer.count)
    }
}

/// A record handed to librdkafka whose delivery report is still to come.
public struct KafkaPendingDelivery: Sendable {
    let box: DeliveryBox

    /// Waits for the broker's acknowledgement.
    /// - Throws: `KafkaError` when delivery failed.
    public func report() async throws -> KafkaDeliveryReport {
        try await box.wait()
    }

    /// Calls `body` with the outcome once the broker answered (at once if it already has), on
    /// librdkafka's delivery-report thread: keep it short and non-blocking. Use instead of
    /// ``report()`` when a task per record would cost more than the record (many in flight).
    /// Either this or `report()`, once.
    public func onReport(_ body: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void) {
        box.onCompletion(body)
    }
}

/// Carries one record's delivery report from librdkafka's callback to the awaiting sender.
final class DeliveryBox: Sendable {
    private let state = Mutex<State>(.pending)
    /// The record's topic, for its report: shared with the record instead of read back from librdkafka's C string
    /// (a new heap string per report for names over 15 bytes).
    let topic: String

    init(topic: String) {
        self.topic = topic
    }

    private enum State {
        case pending
        case waiting(CheckedContinuation<KafkaDeliveryReport, any Error>)
        case callback(@Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void)
        case done(Result<KafkaDeliveryReport, KafkaError>)
    }

    func complete(_ result: Result<KafkaDeliveryReport, KafkaError>) {
        enum Waiter {
            case continuation(CheckedContinuation<KafkaDeliveryReport, any Error>)
            case callback(@Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void)
        }
        let waiter: Waiter? = state.withLock { state in
            switch state {
            case .waiting(let continuation):
                state = .done(result)
                return .continuation(continuation)
            case .callback(let body):
                state = .done(result)
                return .callback(body)
            case .pending:
                state = .done(result)
                return nil
            case .done:
                return nil
            }
        }
        switch waiter {
        case .continuation(let continuation): continuation.resume(with: result.mapError { $0 as any Error })
        case .callback(let body): body(result)
        case nil: break
        }
    }

    func onCompletion(_ body: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void) {
        let ready: Result<KafkaDeliveryReport, KafkaError>? = state.withLock { state in
            switch state {
            case .done(let result):
                return result
            case .pending:
                state = .callback(body)
                return nil
            case .waiting, .callback:
                return .failure(KafkaError.client("INVALID_STATE", "a delivery report can be awaited only once", operation: "await delivery"))
            }
        }
        if let ready { body(ready) }
    }

    func wait() async throws -> KafkaDeliveryReport {
        try await withCheckedThrowingContinuation { continuation in
            let ready: Result<KafkaDeliveryReport, KafkaError>? = state.withLock { state in
                switch state {
                case .done(let result):
                    return result
                case .pending:
                    state = .waiting(continuation)
                    return nil
                case .waiting, .callback:
                    return .failure(KafkaError.client("INVALID_STATE", "a delivery report can be awaited only once", operation: "await delivery"))
                }
            }
            if let ready { continuation.resume(with: ready.mapError { $0 as any Error }) }
        }
    }
}

private let producerDeliveryCallback: @convention(c) (OpaquePointer?, UnsafePointer<rd_kafka_message_t>?, UnsafeMutableRawPointer?) -> Void = {
    _, message, client in
    guard let message, let opaque = message.pointee._private else { return }
    let bits = UInt(bitPattern: opaque)
    if bits & 1 == 1 {
        // Produced under a tag: the report waits in the client's buffer until the poll that serves it returns.
        let error = message.pointee.err
        KafkaClientCallbacks.taggedReports(ofClient: client)?.append(KafkaTaggedDeliveryReport(
            tag: UInt64(bits >> 1), partition: message.pointee.partition, offset: message.pointee.offset,
            error: error == RD_KAFKA_RESP_ERR_NO_ERROR
                ? nil : KafkaError.from(error, operation: "produce to \(String(cString: rd_kafka_topic_name(message.pointee.rkt)))")))
        return
    }
    let box = Unmanaged<DeliveryBox>.fromOpaque(opaque).takeRetainedValue()
    let topic = box.topic
    if message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR {
        box.complete(.success(KafkaDeliveryReport(topic: topic, partition: message.pointee.partition, offset: message.pointee.offset)))
    } else {
        box.complete(.failure(KafkaError.from(message.pointee.err, operation: "produce to \(topic)")))
    }
}

/// The outcome of a record produced under a tag (``KafkaProducer/produce(_:tag:)``).
public struct KafkaTaggedDeliveryReport: Sendable, Equatable {
    /// The tag the record was produced under.
    public var tag: UInt64
    /// The partition it went to (or was meant for).
    public var partition: Int32
    /// Its offset there; -1 when it was not delivered.
    public var offset: Int64
    /// Why it was not delivered (after librdkafka's retries); `nil` once the broker acknowledged it.
    public var error: KafkaError?

    /// Creates the value.
    public init(tag: UInt64, partition: Int32, offset: Int64, error: KafkaError?) {
        self.tag = tag
        self.partition = partition
        self.offset = offset
        self.error = error
    }
}

/// Tagged reports from librdkafka's callback, held until the poll (or flush) that served them returns, then
/// handed on together: one hand-over per poll, not per record.
final class KafkaTaggedReports: Sendable {
    private let held = Mutex<[KafkaTaggedDeliveryReport]>([])
    private let continuation: AsyncStream<[KafkaTaggedDeliveryReport]>.Continuation

    init(_ continuation: AsyncStream<[KafkaTaggedDeliveryReport]>.Continuation) {
        self.continuation = continuation
    }

    func append(_ report: KafkaTaggedDeliveryReport) {
        held.withLock { $0.append(report) }
    }

    /// Hands on what is held, if anything. Under the lock, so that batches taken by two threads (the poll
    /// thread and a flush) go on in the order they were taken.
    func deliver() {
        held.withLock { held in
            guard !held.isEmpty else { return }
            continuation.yield(held)
            held.removeAll()
        }
    }

    func finish() {
        continuation.finish()
    }
}
