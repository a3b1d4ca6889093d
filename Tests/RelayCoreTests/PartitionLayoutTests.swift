import Kafka
import Testing

@testable import RelayCore

@Suite("Partition layout: a user's home partition")
struct PartitionLayoutTests {
    /// Kafka's Java client's own vectors for `Utils.murmur2` (its UtilsTest), as signed words.
    static let javaVectors: [(key: [UInt8], hash: Int32)] = [
        (Array("21".utf8), -973_932_308),
        (Array("foobar".utf8), -790_332_482),
        (Array("a-little-bit-long-string".utf8), -985_981_536),
        (Array("a-little-bit-longer-string".utf8), -1_486_304_829),
        (Array("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8".utf8), -58_897_971),
        ([0x61, 0x62, 0x63], 479_470_107),
    ]

    @Test("murmur2 is the Java client's: its reference vectors")
    func javaReferenceVectors() {
        for vector in Self.javaVectors {
            #expect(Int32(bitPattern: PartitionLayout.murmur2(vector.key)) == vector.hash, "\(String(decoding: vector.key, as: UTF8.self))")
        }
    }

    @Test("a user's home is where librdkafka's murmur2_random partitioner puts a record keyed by the user id, for any length and count")
    func agreesWithLibrdkafka() {
        var random = SeededGenerator(seed: 52)
        for length in 0..<40 {
            for _ in 0..<25 {
                let key = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
                for count: Int32 in [1, 2, 3, 4, 8, 12, 32, 100, Int32.max] {
                    #expect(PartitionLayout(partitionCount: count).home(ofKey: key) == KafkaPartitioner.murmur2(key: key, partitionCount: count),
                            "key \(key) over \(count)")
                }
            }
        }
        // A user id as written: its UTF-8 bytes (ids are compared as bytes everywhere).
        for user in ["u-42", "café", "cafe\u{301}", "用户-7", ""] {
            #expect(PartitionLayout(partitionCount: 8).home(of: user) == KafkaPartitioner.murmur2(key: Array(user.utf8), partitionCount: 8))
        }
    }

    @Test("librdkafka's default partitioner (crc32) puts most users elsewhere: what a forward corrects")
    func defaultPartitionerDisagrees() {
        let layout = PartitionLayout(partitionCount: 8)
        let users = (0..<1_000).map { "user-\($0)" }
        let atHome = users.filter { layout.home(of: $0) == KafkaPartitioner.crc32(key: Array($0.utf8), partitionCount: 8) }.count
        // About one in eight by chance.
        #expect(atHome < 250, "\(atHome) of 1,000 users land at home with crc32")
    }
}
