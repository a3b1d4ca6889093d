import CRdKafka
#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Logging

/// Owns one `rd_kafka_t` and the callbacks librdkafka calls for it.
///
/// The handle is destroyed once the last reference goes (off the releasing thread), so any operation that holds a
/// reference to this object can use the pointer safely; closing a client only stops its threads.
final class KafkaClientHandle: Sendable {
    // `rd_kafka_t` is thread-safe by librdkafka's contract; the pointer itself never changes.
    nonisolated(unsafe) let pointer: OpaquePointer
    let logger: Logger
    /// Runs librdkafka calls that block (commit, seek, flush, admin requests) off Swift's
    /// cooperative pool. Serial, so commits reach the broker in the order they were asked for.
    let blockingQueue: DispatchQueue
    /// Keeps the callbacks alive for as long as librdkafka may call them (its opaque pointer).
    private let callbacks: KafkaCallbackBox
    /// librdkafka's background queue, whose events (commit results) its own background thread
    /// hands to ``KafkaClientHandle`` (see ``CommitCompletion``); set for clients that commit.
    nonisolated(unsafe) let backgroundQueue: OpaquePointer?

    init(kind: rd_kafka_type_t, configuration: RdKafkaConfig, callbacks: KafkaClientCallbacks) throws {
        var configuration = configuration
        let conf = configuration.take()
        let box = KafkaCallbackBox(callbacks)
        box.register(on: conf)

        var errorText = [CChar](repeating: 0, count: 512)
        guard let handle = rd_kafka_new(kind, conf, &errorText, errorText.count) else {
            // rd_kafka_new leaves the configuration with us when it fails.
            rd_kafka_conf_destroy(conf)
            let detail = String(cStringBuffer: errorText)
            throw KafkaError.client("CLIENT_CREATE", detail, operation: "create client")
        }
        self.pointer = handle
        self.logger = callbacks.logger
        self.callbacks = box
        self.backgroundQueue = callbacks.servesBackgroundEvents ? rd_kafka_queue_get_background(handle) : nil
        self.blockingQueue = DispatchQueue(label: "kafka.blocking.\(String(cString: rd_kafka_name(handle)))")
    }

    deinit {
        // rd_kafka_destroy joins librdkafka's threads, which with brokers down can take a second: not on the thread
        // that let go of the handle (often one of Swift's cooperative pool, or a stop's last step with its budget
        // running out). The callbacks stay alive until librdkafka is done with them.
        nonisolated(unsafe) let pointer = pointer
        nonisolated(unsafe) let backgroundQueue = backgroundQueue
        let callbacks = callbacks
        DispatchQueue.global().async {
            // librdkafka's rule: the background queue's reference goes before the client.
            if let backgroundQueue { rd_kafka_queue_destroy(backgroundQueue) }
            rd_kafka_destroy(pointer)
            withExtendedLifetime(callbacks) {}
        }
    }

    /// Runs a blocking librdkafka call on `blockingQueue` and awaits its result.
    func runBlocking<T: Sendable>(_ body: @escaping @Sendable (OpaquePointer) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            blockingQueue.async {
                continuation.resume(with: Result { try body(self.pointer) })
            }
        }
    }

    var name: String { String(cString: rd_kafka_name(pointer)) }
}

/// What a client does when librdkafka calls back: every client logs librdkafka's logs and errors;
/// a client fills in the others it needs (composition: a value, no subclass per client).
struct KafkaClientCallbacks: Sendable {
    typealias PartitionListPointer = UnsafeMutablePointer<rd_kafka_topic_partition_list_t>
    /// librdkafka's delivery-report callback; it finds its waiter through the message's own opaque.
    typealias DeliveryReport = @convention(c) (OpaquePointer?, UnsafePointer<rd_kafka_message_t>?, UnsafeMutableRawPointer?) -> Void

    var logger: Logger
    /// A consumer group rebalance (`reason` says assign, revoke or an error), on the thread that
    /// polls the consumer; the list is librdkafka's, lent for the call.
    var rebalance: (@Sendable (_ consumer: OpaquePointer, _ reason: rd_kafka_resp_err_t, _ partitions: PartitionListPointer) -> Void)?
    /// A commit's outcome; the list, when there is one, is librdkafka's, lent for the call.
    var offsetCommit: (@Sendable (_ error: rd_kafka_resp_err_t, _ partitions: PartitionListPointer?) -> Void)?
    /// Producers: registered as librdkafka's delivery-report callback.
    var deliveryReport: DeliveryReport?
    /// Producers: where the delivery-report callback puts the reports of records produced under a tag.
    var taggedReports: KafkaTaggedReports?
    /// Serve the background queue's events (commit results of ``KafkaConsumer/commit(_:metadata:completion:)``)
    /// on librdkafka's background thread.
    var servesBackgroundEvents = false

    init(logger: Logger) {
        self.logger = logger
    }
}

/// The callbacks at a stable address, for librdkafka's opaque pointer.
private final class KafkaCallbackBox: Sendable {
    let callbacks: KafkaClientCallbacks

    init(_ callbacks: KafkaClientCallbacks) {
        self.callbacks = callbacks
    }

    /// Sets the opaque pointer (unretained: the handle keeps the box) and the C trampolines.
    func register(on conf: OpaquePointer?) {
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(self).toOpaque())
        rd_kafka_conf_set_log_cb(conf, kafkaLogCallback)
        rd_kafka_conf_set_error_cb(conf, kafkaErrorCallback)
        if callbacks.rebalance != nil { rd_kafka_conf_set_rebalance_cb(conf, kafkaRebalanceCallback) }
        if callbacks.offsetCommit != nil { rd_kafka_conf_set_offset_commit_cb(conf, kafkaCommitCallback) }
        if let deliveryReport = callbacks.deliveryReport { rd_kafka_conf_set_dr_msg_cb(conf, deliveryReport) }
        if callbacks.servesBackgroundEvents { rd_kafka_conf_set_background_event_cb(conf, kafkaBackgroundEventCallback) }
    }

    static func from(_ opaque: UnsafeMutableRawPointer?) -> KafkaClientCallbacks? {
        guard let opaque else { return nil }
        return Unmanaged<KafkaCallbackBox>.fromOpaque(opaque).takeUnretainedValue().callbacks
    }
}

extension KafkaClientCallbacks {
    /// The tagged reports' buffer of the client whose opaque pointer is `opaque` (a callback's last argument),
    /// without copying its other callbacks.
    static func taggedReports(ofClient opaque: UnsafeMutableRawPointer?) -> KafkaTaggedReports? {
        guard let opaque else { return nil }
        return Unmanaged<KafkaCallbackBox>.fromOpaque(opaque).takeUnretainedValue().callbacks.taggedReports
    }
}

private let kafkaRebalanceCallback: @convention(c) (
    OpaquePointer?, rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, UnsafeMutableRawPointer?
) -> Void = { consumer, reason, list, opaque in
    guard let consumer, let list, let rebalance = KafkaCallbackBox.from(opaque)?.rebalance else { return }
    rebalance(consumer, reason, list)
}

private let kafkaCommitCallback: @convention(c) (
    OpaquePointer?, rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, UnsafeMutableRawPointer?
) -> Void = { _, error, list, opaque in
    KafkaCallbackBox.from(opaque)?.offsetCommit?(error, list)
}

/// A commit's answer, carried through librdkafka's commit opaque to the background thread.
final class CommitCompletion: Sendable {
    let completion: @Sendable (Result<Void, KafkaError>) -> Void

    init(_ completion: @escaping @Sendable (Result<Void, KafkaError>) -> Void) {
        self.completion = completion
    }
}

/// Events of the background queue, on librdkafka's background thread: commit results.
private let kafkaBackgroundEventCallback: @convention(c) (OpaquePointer?, OpaquePointer?, UnsafeMutableRawPointer?) -> Void = {
    _, event, _ in
    guard let event else { return }
    defer { rd_kafka_event_destroy(event) }
    guard rd_kafka_event_type(event) == RD_KAFKA_EVENT_OFFSET_COMMIT, let opaque = rd_kafka_event_opaque(event) else { return }
    let commit = Unmanaged<CommitCompletion>.fromOpaque(opaque).takeRetainedValue()
    let error = rd_kafka_event_error(event)
    if error != RD_KAFKA_RESP_ERR_NO_ERROR {
        commit.completion(.failure(KafkaError.from(error, operation: "commit")))
    } else if let list = rd_kafka_event_topic_partition_list(event), let partitionError = list.firstError(operation: "commit") {
        commit.completion(.failure(partitionError))
    } else {
        commit.completion(.success(()))
    }
}

private let kafkaLogCallback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Void = {
    handle, level, facility, text in
    guard let handle, let callbacks = KafkaCallbackBox.from(rd_kafka_opaque(handle)) else { return }
    let facilityText = facility.map { String(cString: $0) } ?? "-"
    let message = text.map { String(cString: $0) } ?? ""
    callbacks.logger.log(
        level: Logger.Level(syslogLevel: level),
        "\(message)",
        metadata: ["kafka.facility": "\(facilityText)", "kafka.client": "\(String(cString: rd_kafka_name(handle)))"]
    )
}

private let kafkaErrorCallback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?) -> Void = {
    _, code, reason, opaque in
    guard let callbacks = KafkaCallbackBox.from(opaque) else { return }
    let error = rd_kafka_resp_err_t(rawValue: code)
    let name = String(cString: rd_kafka_err2name(error))
    let text = reason.map { String(cString: $0) } ?? ""
    // librdkafka reports transient conditions (all brokers down, connection refused) here and
    // keeps retrying on its own, so these are warnings unless the handle reports a fatal error.
    let fatal = error == RD_KAFKA_RESP_ERR__FATAL
    callbacks.logger.log(
        level: fatal ? .error : .warning,
        "librdkafka: \(text)",
        metadata: ["kafka.error": "\(name)"]
    )
}

extension Logger.Level {
    /// Maps syslog severities, which librdkafka uses, onto swift-log levels.
    init(syslogLevel: Int32) {
        switch syslogLevel {
        case ...3: self = .error
        case 4: self = .warning
        case 5: self = .notice
        case 6: self = .info
        default: self = .debug
        }
    }
}
