import ArgumentParser
import Foundation
import Kafka
import Logging

/// `apns-relay demo`: runs on an embedded Kafka cluster, needs no configuration and no network.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Start an in-process Kafka, send sample push events through it and report what happened."
    )

    func run() async throws {
        var logger = Logger(label: "apns-relay.demo")
        logger.logLevel = .warning
        let cluster = try EmbeddedKafka(brokers: 1, logger: logger)
        defer { cluster.stop() }
        let topic = "push.events"
        try cluster.createTopic(topic, partitions: 3)
        print("embedded Kafka on \(cluster.bootstrapServers), topic \(topic) with 3 partitions")

        let samples: [(user: String, json: String)] = [
            ("u-1", #"{"id":"evt-1","user":"u-1","seq":1,"badge":{"increment":1}}"#),
            ("u-1", #"{"id":"evt-3","user":"u-1","seq":3,"badge":{"increment":1}}"#),
            ("u-1", #"{"id":"evt-2","user":"u-1","seq":2,"badge":{"increment":1}}"#),
            ("u-2", #"{"id":"evt-4","user":"u-2","seq":1,"badge":{"set":5},"apns":{"payload":{"aps":{"alert":"hi"}}}}"#),
            ("u-3", #"{"id":"evt-5","user":"u-3","badge":"#),
        ]
        let producer = try KafkaProducer(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
        for sample in samples {
            let report = try await producer.send(topic: topic, key: Array(sample.user.utf8), value: Array(sample.json.utf8))
            print("produced  \(sample.user) -> partition \(report.partition) offset \(report.offset)")
        }
        await producer.close()

        let consumer = try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                kafka: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers, properties: ["session.timeout.ms": "6000"]),
                groupID: "apns-relay-demo",
                topics: [topic]
            ),
            logger: logger
        )
        var received = 0
        for try await event in consumer.events {
            switch event {
            case .partitionsAssigned(let partitions):
                print("assigned  \(partitions.map(\.description).joined(separator: ", "))")
            case .partitionsRevoked(let partitions):
                print("revoked   \(partitions.map(\.description).joined(separator: ", "))")
            case .message(let message):
                received += 1
                let key = String(decoding: message.key ?? [], as: UTF8.self)
                let value = String(decoding: message.value ?? [], as: UTF8.self)
                print("consumed  \(message.topicPartition)@\(message.offset) key=\(key) \(value)")
                try await consumer.commit([message.topicPartition: message.offset + 1])
            }
            if received == samples.count { break }
        }
        await consumer.close()
        print("round trip complete: \(received) of \(samples.count) events back, offsets committed")
    }
}
