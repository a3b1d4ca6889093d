import Kafka
import Testing

@testable import Relay

/// The headers of a dead letter alone. (TraceHeadersTests checks that a replay publishes the input's trace headers
/// again, without the relay's.)
@Suite("The headers of a dead letter: the input's own, then the relay's")
struct DeadLetterHeadersTests {
    @Test("the relay's header names are the ones dead-letter readers and the replay look for")
    func names() {
        // The wire contract: operators' consumers of push.dlq and older relays' replays read these names.
        #expect(DeadLetterHeaders.relayNames == ["x-error", "x-source-topic", "x-source-partition", "x-source-offset", "x-dead-letter",
                                                 "x-apns-relay-forwarded-from"])
    }

    @Test("the relay's headers: the error, then the source's topic, partition and offset as decimal text, in that order")
    func relayHeaders() {
        let source = RecordReference(TopicPartition("push.events", 17), 9_007_199_254_740_993, generation: 4)
        #expect(DeadLetterHeaders.headers(error: "payload: not JSON", source: source) == [
            KafkaHeader(key: "x-error", value: "payload: not JSON"),
            KafkaHeader(key: "x-source-topic", value: "push.events"),
            KafkaHeader(key: "x-source-partition", value: "17"),
            KafkaHeader(key: "x-source-offset", value: "9007199254740993"),
        ])
        let empty = DeadLetterHeaders.headers(error: "", source: RecordReference(TopicPartition("t", 0), 0))
        #expect(empty == [KafkaHeader(key: "x-error", value: ""), KafkaHeader(key: "x-source-topic", value: "t"),
                          KafkaHeader(key: "x-source-partition", value: "0"), KafkaHeader(key: "x-source-offset", value: "0")],
                "an empty error is still written")
    }

    @Test("an input keeps every header but the relay's names, in order, with repeats and null values")
    func producerHeadersKept() {
        let input = [
            KafkaHeader(key: "x-tenant", value: "acme"),
            KafkaHeader(key: "x-source-topic", value: "elsewhere"),
            KafkaHeader(key: "traceparent", value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            KafkaHeader(key: "x-source-partition", value: "3"),
            KafkaHeader(key: "x-tenant", value: "again"),
            KafkaHeader(key: "x-source-offset", value: "12"),
            KafkaHeader(key: "x-null", value: nil),
            KafkaHeader(key: "x-dead-letter", value: "reference"),
            KafkaHeader(key: "x-error", value: "forged"),
            KafkaHeader(key: "x-apns-relay-forwarded-from", value: "1:5"),
        ]
        #expect(DeadLetterHeaders.producerHeaders(of: input) == [
            KafkaHeader(key: "x-tenant", value: "acme"),
            KafkaHeader(key: "traceparent", value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            KafkaHeader(key: "x-tenant", value: "again"),
            KafkaHeader(key: "x-null", value: nil),
        ])
        #expect(DeadLetterHeaders.producerHeaders(of: []).isEmpty)
    }

    @Test("names are matched exactly, as a reader looks them up: a header differing in case is the producer's, and the relay's is read")
    func exactNames() {
        let input = [KafkaHeader(key: "X-Error", value: "theirs"), KafkaHeader(key: "x-error ", value: "theirs too")]
        #expect(DeadLetterHeaders.producerHeaders(of: input) == input)
        let source = RecordReference(TopicPartition("push.events", 0), 1)
        let deadLetter = KafkaMessage(topic: "push.dlq", partition: 0, offset: 0, key: nil, value: Array("{}".utf8),
                                      headers: DeadLetterHeaders.producerHeaders(of: input) + DeadLetterHeaders.headers(error: "ours", source: source))
        #expect(DeadLetterReplay.error(of: deadLetter) == "ours")
    }

    @Test("a dead letter of an input that was itself a dead letter carries one set of the relay's headers: the newest")
    func deadLetterOfDeadLetter() {
        let older = RecordReference(TopicPartition("push.events", 1), 40)
        let newer = RecordReference(TopicPartition("push.events", 2), 7)
        let firstHeaders = [KafkaHeader(key: "x-tenant", value: "acme")] + DeadLetterHeaders.headers(error: "old", source: older)
            + [KafkaHeader(key: DeadLetterHeaders.kind, value: "reference")]
        let headers = DeadLetterHeaders.producerHeaders(of: firstHeaders) + DeadLetterHeaders.headers(error: "new", source: newer)
        for name in DeadLetterHeaders.relayNames where name != DeadLetterHeaders.kind && name != "x-apns-relay-forwarded-from" {
            #expect(headers.filter { $0.key == name }.count == 1, "\(name)")
        }
        #expect(!headers.contains { $0.key == DeadLetterHeaders.kind }, "not a reference any more")
        let message = KafkaMessage(topic: "push.dlq", partition: 0, offset: 0, key: nil, value: Array("{}".utf8), headers: headers)
        #expect(DeadLetterReplay.step(for: message, eventsTopic: "push.events", allowUnsequencedBadges: false)
            == .replay(KafkaRecord(topic: "push.events", partition: 2, key: nil, value: Array("{}".utf8),
                                   headers: [KafkaHeader(key: "x-tenant", value: "acme")])))
    }
}
