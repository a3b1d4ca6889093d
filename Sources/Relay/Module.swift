// The relay domain (pure state machines) and the service that wires Kafka and APNs.
