public import KafkaCore
import RelayCore

/// The headers of a `push.dlq` record: the input's own headers (its producer's, trace context included) followed by
/// the relay's, which say why and where from. A replay takes the relay's off again.
public enum DeadLetterHeaders {
    /// What is wrong with the input.
    public static let error = "x-error"
    /// Where the input was read: topic, partition, offset.
    public static let sourceTopic = "x-source-topic"
    public static let sourcePartition = "x-source-partition"
    public static let sourceOffset = "x-source-offset"
    /// `reference` on a dead letter that stands for an input too large to publish again.
    public static let kind = "x-dead-letter"

    /// The names the relay writes; an input's headers of these names are not kept (they would be read as the relay's).
    public static let relayNames: Set<String> = [error, sourceTopic, sourcePartition, sourceOffset, kind, ForwardSource.header]

    /// The relay's headers of a dead letter of the input at `source`.
    public static func headers(error: String, source: RecordReference) -> [KafkaHeader] {
        [
            KafkaHeader(key: Self.error, value: error),
            KafkaHeader(key: sourceTopic, value: source.partition.topic),
            KafkaHeader(key: sourcePartition, value: "\(source.partition.partition)"),
            KafkaHeader(key: sourceOffset, value: "\(source.offset)"),
        ]
    }

    /// The input's headers a dead letter keeps (and a replay publishes again): all but the relay's own, including a
    /// forward's hop header (a replay is a new record, not a forward).
    public static func producerHeaders(of headers: [KafkaHeader]) -> [KafkaHeader] {
        headers.isEmpty ? [] : headers.filter { !relayNames.contains($0.key) }
    }
}
