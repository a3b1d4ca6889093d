// The record values live in KafkaCore (no librdkafka); every user of Kafka sees them as its own.
@_exported public import KafkaCore
