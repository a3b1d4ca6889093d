// The reference point for the Kafka consumer benchmark: the fastest plain C loop over librdkafka.
#ifndef CRDKAFKA_BASELINE_H
#define CRDKAFKA_BASELINE_H

/// Joins `group`, consumes `count` messages of `topic` with rd_kafka_consume_batch_queue and
/// touches each message's key and value. Returns the number consumed (or -1 on setup failure);
/// `seconds` gets the time from the first message to the last, `checksum` the summed value sizes.
long long crdk_baseline_consume(const char *bootstrap, const char *topic, const char *group,
                                long long count, int batch_size, double *seconds,
                                unsigned long long *checksum);

#endif
