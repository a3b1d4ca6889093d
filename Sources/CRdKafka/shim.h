// The C surface of librdkafka that the Swift `Kafka` module uses.
// Everything here is librdkafka's own API; no logic lives in this target.
#ifndef CRDKAFKA_SHIM_H
#define CRDKAFKA_SHIM_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

// Swift cannot call C variadic functions: this fixes the arity of
// rd_kafka_mock_broker_push_request_error_rtts to one (error, rtt) pair.
static inline rd_kafka_resp_err_t crdkafka_mock_broker_push_request_error(
    rd_kafka_mock_cluster_t *mcluster, int32_t broker_id, int16_t api_key, rd_kafka_resp_err_t err, int rtt_ms) {
    return rd_kafka_mock_broker_push_request_error_rtts(mcluster, broker_id, api_key, 1, err, rtt_ms);
}

#endif
