#include "CRdKafkaBaseline.h"

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

long long crdk_baseline_consume(const char *bootstrap, const char *topic, const char *group,
                                long long count, int batch_size, double *seconds,
                                unsigned long long *checksum) {
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr)) {
        fprintf(stderr, "baseline: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (!rk) {
        fprintf(stderr, "baseline: %s\n", errstr);
        return -1;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);

    rd_kafka_queue_t *queue = rd_kafka_queue_get_consumer(rk);
    rd_kafka_message_t **messages = malloc(sizeof(*messages) * (size_t)batch_size);
    long long consumed = 0;
    unsigned long long sum = 0;
    double started = 0;
    while (consumed < count) {
        ssize_t n = rd_kafka_consume_batch_queue(queue, 100, messages, (size_t)batch_size);
        for (ssize_t i = 0; i < n; i++) {
            rd_kafka_message_t *message = messages[i];
            if (!message->err) {
                if (consumed == 0) started = now_seconds();
                consumed++;
                sum += message->len + message->key_len;
                if (message->len) sum += ((const unsigned char *)message->payload)[0];
            }
            rd_kafka_message_destroy(message);
        }
    }
    *seconds = now_seconds() - started;
    *checksum = sum;
    free(messages);
    rd_kafka_queue_destroy(queue);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return consumed;
}
