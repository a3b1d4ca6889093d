import CRdKafka

/// An error from librdkafka or from the Swift face around it.
///
/// `name` is librdkafka's own error name (`MSG_SIZE_TOO_LARGE`, `_TRANSPORT`, `CONF_UNKNOWN`, ...)
/// so operators can look it up in librdkafka's documentation; `message` is its human text.
public struct KafkaError: Error, Sendable, CustomStringConvertible, Equatable {
    /// librdkafka's numeric error code (`rd_kafka_resp_err_t`), or 0 for errors of the Swift face.
    public let code: Int32
    /// librdkafka's error name, e.g. `MSG_SIZE_TOO_LARGE`.
    public let name: String
    /// What went wrong, for a person.
    public let message: String
    /// What the client was doing when it failed, e.g. `produce to push.results`.
    public let operation: String
    /// librdkafka marked the error fatal for its client (``isFatal``).
    private let markedFatal: Bool
    /// librdkafka marked the error as one that fails the current transaction (``transactionRequiresAbort``).
    private let markedRequiresAbort: Bool
    /// librdkafka marked the operation as safe to call again (``isRetriable``).
    private let markedRetriable: Bool

    public init(
        code: Int32, name: String, message: String, operation: String,
        fatal: Bool = false, transactionRequiresAbort: Bool = false, retriable: Bool = false
    ) {
        self.code = code
        self.name = name
        self.message = message
        self.operation = operation
        self.markedFatal = fatal
        self.markedRequiresAbort = transactionRequiresAbort
        self.markedRetriable = retriable
    }

    public var description: String {
        "Kafka \(operation) failed: \(message) (\(name))"
    }

    /// The error librdkafka reports as "message is larger than message.max.bytes".
    public var isMessageTooLarge: Bool { code == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE.rawValue }

    /// A fatal error of the client (an idempotent producer's lost sequence, say): librdkafka
    /// fails everything the client does from then on, so retrying it is pointless.
    public var isFatal: Bool { markedFatal || code == RD_KAFKA_RESP_ERR__FATAL.rawValue }

    /// A newer producer with the same `transactional.id` took over (it initialised transactions and so bumped
    /// the producer epoch): this producer's open transaction is aborted and it can do nothing more. Its owner
    /// must stop and leave the work to the new one. librdkafka reports it as fatal too.
    public var isFenced: Bool {
        code == RD_KAFKA_RESP_ERR__FENCED.rawValue || code == RD_KAFKA_RESP_ERR_PRODUCER_FENCED.rawValue
            || code == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH.rawValue
    }

    /// The consumer group's members speak an assignment protocol this consumer does not (its
    /// `partition.assignment.strategy`: eager against cooperative): it cannot join until they leave.
    public var isGroupProtocolMismatch: Bool {
        code == RD_KAFKA_RESP_ERR__UNKNOWN_PROTOCOL.rawValue || code == RD_KAFKA_RESP_ERR_INCONSISTENT_GROUP_PROTOCOL.rawValue
    }

    /// The current transaction failed but the producer did not: abort it
    /// (``KafkaTransactionalProducer/abortTransaction(timeout:)``), then redo its work in a new one.
    public var transactionRequiresAbort: Bool { markedRequiresAbort }

    /// The operation did not finish (a timeout, a coordinator moving) and may be called again as it was; a
    /// transaction's commit or abort then goes on where it stopped.
    public var isRetriable: Bool { markedRetriable }

    static func from(_ code: rd_kafka_resp_err_t, operation: String) -> KafkaError {
        KafkaError(
            code: code.rawValue,
            name: String(cString: rd_kafka_err2name(code)),
            message: String(cString: rd_kafka_err2str(code)),
            operation: operation
        )
    }

    /// Takes ownership of an `rd_kafka_error_t` and destroys it.
    static func consuming(_ error: OpaquePointer, operation: String) -> KafkaError {
        defer { rd_kafka_error_destroy(error) }
        return KafkaError(
            code: rd_kafka_error_code(error).rawValue,
            name: String(cString: rd_kafka_error_name(error)),
            message: String(cString: rd_kafka_error_string(error)),
            operation: operation,
            fatal: rd_kafka_error_is_fatal(error) != 0,
            transactionRequiresAbort: rd_kafka_error_txn_requires_abort(error) != 0,
            retriable: rd_kafka_error_is_retriable(error) != 0
        )
    }

    static func client(_ name: String, _ message: String, operation: String) -> KafkaError {
        KafkaError(code: 0, name: name, message: message, operation: operation)
    }

    /// The client was closed before the operation could run.
    static func closed(operation: String) -> KafkaError {
        .client("CLOSED", "the client is closed", operation: operation)
    }
}

extension String {
    /// Text from a NUL-terminated C buffer that librdkafka filled in.
    init(cStringBuffer buffer: [CChar]) {
        self.init(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
