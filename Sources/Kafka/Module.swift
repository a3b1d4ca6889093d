// The Swift face of librdkafka.
