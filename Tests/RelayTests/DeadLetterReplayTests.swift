import Kafka
import Testing

@testable import Relay

@Suite("Dead-letter replay decisions")
struct DeadLetterReplayTests {
    static let sequenced = #"{"id":"e1","user":"u-1","seq":4,"badge":{"increment":1},"apns":{"payload":{"aps":{}}}}"#
    static let unsequenced = #"{"id":"e2","user":"u-1","badge":{"increment":1}}"#

    func deadLetter(partition: Int32 = 0, offset: Int64 = 7, value: String = sequenced, error: String = "tokens: 2 tokens",
                    source: (topic: String, partition: String, offset: String)? = ("push.events", "3", "42"), reference: Bool = false) -> KafkaMessage {
        var headers = [KafkaHeader(key: "x-error", value: error)]
        if let source {
            headers += [KafkaHeader(key: "x-source-topic", value: source.topic), KafkaHeader(key: "x-source-partition", value: source.partition),
                        KafkaHeader(key: "x-source-offset", value: source.offset)]
        }
        if reference { headers.append(KafkaHeader(key: "x-dead-letter", value: "reference")) }
        return KafkaMessage(topic: "push.dlq", partition: partition, offset: offset, key: Array("u-1".utf8), value: Array(value.utf8), headers: headers)
    }

    @Test("a dead letter goes back to its source partition with its key and value unchanged")
    func plain() {
        #expect(DeadLetterReplay.step(for: deadLetter(), eventsTopic: "push.events", allowUnsequencedBadges: false)
            == .replay(KafkaRecord(topic: "push.events", partition: 3, key: Array("u-1".utf8), value: Array(Self.sequenced.utf8))))
    }

    @Test("a badge change without seq is left out unless allowed; bytes that are no event are replayed (the relay dead-letters them again)")
    func unsequencedBadges() {
        #expect(DeadLetterReplay.step(for: deadLetter(value: Self.unsequenced), eventsTopic: "push.events", allowUnsequencedBadges: false)
            == .skip("a badge change without seq: a second replay would apply it again (--allow-unsequenced-badges replays it)"))
        #expect(DeadLetterReplay.step(for: deadLetter(value: Self.unsequenced), eventsTopic: "push.events", allowUnsequencedBadges: true)
            == .replay(KafkaRecord(topic: "push.events", partition: 3, key: Array("u-1".utf8), value: Array(Self.unsequenced.utf8))))
        for value in ["{broken", #"{"id":"e","user":"u","seq":null,"badge":null}"#, #"{"id":"e","tokens":["ab"],"badge":{"set":1}}"#] {
            #expect(!DeadLetterReplay.isUnsequencedBadgeChange(Array(value.utf8)), "\(value)")
        }
        #expect(DeadLetterReplay.isUnsequencedBadgeChange(Array(#"{"id":"e","user":"u","seq":null,"badge":{"set":1}}"#.utf8)))
    }

    @Test("not the relay's dead letter, or another topic's: skipped, saying why")
    func foreign() {
        #expect(DeadLetterReplay.step(for: deadLetter(source: nil), eventsTopic: "push.events", allowUnsequencedBadges: false)
            == .skip("no x-source-topic, x-source-partition and x-source-offset headers: not a dead letter of the relay"))
        #expect(DeadLetterReplay.step(for: deadLetter(source: ("push.events", "x", "1")), eventsTopic: "push.events", allowUnsequencedBadges: false)
            == .skip("no x-source-topic, x-source-partition and x-source-offset headers: not a dead letter of the relay"))
        #expect(DeadLetterReplay.step(for: deadLetter(source: ("push.devices", "0", "1")), eventsTopic: "push.events", allowUnsequencedBadges: false)
            == .skip("its source is push.devices, not the events topic push.events"))
    }

    @Test("a reference reads its source: replayed while retained, else why not")
    func references() {
        let step = DeadLetterReplay.step(for: deadLetter(value: "{}", reference: true), eventsTopic: "push.events", allowUnsequencedBadges: false)
        let source = RecordReference(TopicPartition("push.events", 3), 42)
        #expect(step == .readSource(source))
        let record = KafkaMessage(topic: "push.events", partition: 3, offset: 42, key: Array("u-1".utf8), value: Array(Self.sequenced.utf8))
        #expect(DeadLetterReplay.step(forSource: source, low: 10, high: 50, record: record, allowUnsequencedBadges: false)
            == .replay(KafkaRecord(topic: "push.events", partition: 3, key: Array("u-1".utf8), value: Array(Self.sequenced.utf8))))
        #expect(DeadLetterReplay.step(forSource: source, low: 43, high: 50, record: nil, allowUnsequencedBadges: false)
            == .skip("push.events[3]@42 is no longer retained (push.events[3] now starts at offset 43)"))
        #expect(DeadLetterReplay.step(forSource: source, low: 0, high: 42, record: nil, allowUnsequencedBadges: false)
            == .skip("push.events[3]@42 is past the end of push.events[3] (offset 42): the topic was recreated or truncated"))
        let next = KafkaMessage(topic: "push.events", partition: 3, offset: 43, key: nil, value: nil)
        #expect(DeadLetterReplay.step(forSource: source, low: 0, high: 50, record: next, allowUnsequencedBadges: false)
            == .skip("push.events[3]@42 holds no record (compacted away, or a transaction marker)"))
    }

    @Test("the selection: partitions, an offset range (inclusive) and text in x-error, all of them")
    func selection() {
        let message = deadLetter(partition: 1, offset: 7, error: "tokens: 2 tokens, more than relay.max_tokens_per_event (1)")
        #expect(DeadLetterSelection().selects(message))
        #expect(DeadLetterSelection(partitions: [1], fromOffset: 7, toOffset: 7, errorContains: "max_tokens_per_event").selects(message))
        #expect(!DeadLetterSelection(partitions: [0, 2]).selects(message))
        #expect(!DeadLetterSelection(fromOffset: 8).selects(message) && !DeadLetterSelection(toOffset: 6).selects(message))
        #expect(!DeadLetterSelection(errorContains: "Max_tokens").selects(message), "case-sensitive")
    }

    @Test("a dead letter keeps its input's headers; a replay publishes them again without the relay's own")
    func deadLetterHeadersRoundTrip() {
        let input = [KafkaHeader(key: "traceparent", value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), KafkaHeader(key: "x-tenant", value: "acme"),
                     KafkaHeader(key: ForwardSource.header, value: "1:5"), KafkaHeader(key: "x-error", value: "forged")]
        let source = RecordReference(TopicPartition("push.events", 2), 9)
        let headers = DeadLetterHeaders.producerHeaders(of: input) + DeadLetterHeaders.headers(error: "apns: missing", source: source)
        let deadLetter = KafkaMessage(topic: "push.dlq", partition: 0, offset: 1, key: Array("k".utf8), value: Array("{}".utf8), headers: headers)
        #expect(DeadLetterReplay.error(of: deadLetter) == "apns: missing")
        #expect(DeadLetterReplay.step(for: deadLetter, eventsTopic: "push.events", allowUnsequencedBadges: false)
            == .replay(KafkaRecord(topic: "push.events", partition: 2, key: Array("k".utf8), value: Array("{}".utf8),
                                   headers: [KafkaHeader(key: "traceparent", value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), KafkaHeader(key: "x-tenant", value: "acme")])))
    }
}
