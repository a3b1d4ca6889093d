import CRdKafka
#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Logging

/// Owns one `rd_kafka_t` and what its C callbacks need.
///
/// The handle is destroyed in `deinit`, so any operation that holds a reference to this object can
/// use the pointer safely; closing a client only stops its threads.
final class KafkaClientHandle: Sendable {
    // `rd_kafka_t` is thread-safe by librdkafka's contract; the pointer itself never changes.
    nonisolated(unsafe) let pointer: OpaquePointer
    let logger: Logger
    /// Runs librdkafka calls that block (commit, seek, flush, admin requests) off Swift's
    /// cooperative pool. Serial, so commits reach the broker in the order they were asked for.
    let blockingQueue: DispatchQueue
    /// Keeps the callback context alive for as long as librdkafka may call back into it.
    private let context: KafkaCallbackContext

    init(
        kind: rd_kafka_type_t,
        configuration: RdKafkaConfig,
        context: KafkaCallbackContext,
        logger: Logger
    ) throws {
        var configuration = configuration
        let conf = configuration.take()
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(context).toOpaque())
        rd_kafka_conf_set_log_cb(conf, kafkaLogCallback)
        rd_kafka_conf_set_error_cb(conf, kafkaErrorCallback)
        context.configure(conf)

        var errorText = [CChar](repeating: 0, count: 512)
        guard let handle = rd_kafka_new(kind, conf, &errorText, errorText.count) else {
            // rd_kafka_new leaves the configuration with us when it fails.
            rd_kafka_conf_destroy(conf)
            let detail = String(cStringBuffer: errorText)
            throw KafkaError.client("CLIENT_CREATE", detail, operation: "create client")
        }
        self.pointer = handle
        self.logger = logger
        self.context = context
        self.blockingQueue = DispatchQueue(label: "kafka.blocking.\(String(cString: rd_kafka_name(handle)))")
    }

    deinit {
        rd_kafka_destroy(pointer)
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

/// What a client's C callbacks reach through librdkafka's opaque pointer.
class KafkaCallbackContext: @unchecked Sendable {
    // @unchecked: subclasses guard their mutable state with their own locks; this base class
    // holds only immutable state.
    let logger: Logger

    init(logger: Logger) {
        self.logger = logger
    }

    /// Lets a client register its own callbacks on the configuration before the handle exists.
    func configure(_ conf: OpaquePointer?) {}

    static func from(_ opaque: UnsafeMutableRawPointer?) -> KafkaCallbackContext? {
        guard let opaque else { return nil }
        return Unmanaged<KafkaCallbackContext>.fromOpaque(opaque).takeUnretainedValue()
    }
}

private let kafkaLogCallback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Void = {
    handle, level, facility, text in
    guard let handle, let context = KafkaCallbackContext.from(rd_kafka_opaque(handle)) else { return }
    let facilityText = facility.map { String(cString: $0) } ?? "-"
    let message = text.map { String(cString: $0) } ?? ""
    context.logger.log(
        level: Logger.Level(syslogLevel: level),
        "\(message)",
        metadata: ["kafka.facility": "\(facilityText)", "kafka.client": "\(String(cString: rd_kafka_name(handle)))"]
    )
}

private let kafkaErrorCallback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?) -> Void = {
    _, code, reason, opaque in
    guard let context = KafkaCallbackContext.from(opaque) else { return }
    let error = rd_kafka_resp_err_t(rawValue: code)
    let name = String(cString: rd_kafka_err2name(error))
    let text = reason.map { String(cString: $0) } ?? ""
    // librdkafka reports transient conditions (all brokers down, connection refused) here and
    // keeps retrying on its own, so these are warnings unless the handle reports a fatal error.
    let fatal = error == RD_KAFKA_RESP_ERR__FATAL
    context.logger.log(
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

// MARK: - Topic-partition lists

extension Array where Element == TopicPartition {
    /// A new `rd_kafka_topic_partition_list_t`; the caller destroys it.
    func makeRdKafkaList(offsets: [TopicPartition: Int64] = [:], metadata: [TopicPartition: String] = [:]) -> UnsafeMutablePointer<rd_kafka_topic_partition_list_t> {
        let list = rd_kafka_topic_partition_list_new(Int32(count))!
        for tp in self {
            let element = rd_kafka_topic_partition_list_add(list, tp.topic, tp.partition)!
            if let offset = offsets[tp] { element.pointee.offset = offset }
            if let text = metadata[tp] {
                // The list owns it: rd_kafka_topic_partition_list_destroy frees it with free().
                element.pointee.metadata = UnsafeMutableRawPointer(strdup(text))
                element.pointee.metadata_size = text.utf8.count
            }
        }
        return list
    }
}

extension UnsafeMutablePointer where Pointee == rd_kafka_topic_partition_list_t {
    /// The metadata string stored with each partition's offset (committed offsets carry one).
    var metadataByPartition: [TopicPartition: String] {
        var result: [TopicPartition: String] = [:]
        for index in 0..<Int(pointee.cnt) {
            let element = pointee.elems[index]
            guard let metadata = element.metadata, element.metadata_size > 0 else { continue }
            let bytes = UnsafeRawBufferPointer(start: metadata, count: element.metadata_size)
            result[TopicPartition(String(cString: element.topic), element.partition)] = String(decoding: bytes, as: UTF8.self)
        }
        return result
    }

    var topicPartitions: [TopicPartition] {
        (0..<Int(pointee.cnt)).map { index in
            let element = pointee.elems[index]
            return TopicPartition(String(cString: element.topic), element.partition)
        }
    }

    /// The first per-partition error in the list, if any.
    func firstError(operation: String) -> KafkaError? {
        for index in 0..<Int(pointee.cnt) where pointee.elems[index].err != RD_KAFKA_RESP_ERR_NO_ERROR {
            let element = pointee.elems[index]
            return KafkaError.from(element.err, operation: "\(operation) \(String(cString: element.topic))[\(element.partition)]")
        }
        return nil
    }
}
