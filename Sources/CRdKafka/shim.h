// The C surface of librdkafka that the Swift `Kafka` module uses.
// Everything here is librdkafka's own API; no logic lives in this target.
#ifndef CRDKAFKA_SHIM_H
#define CRDKAFKA_SHIM_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#endif
