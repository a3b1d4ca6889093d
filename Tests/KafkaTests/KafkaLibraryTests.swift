import Kafka
import Testing

/// The librdkafka release the process loaded, and which ones the relay refuses.
@Suite("KafkaLibrary: the loaded librdkafka's release")
struct KafkaLibraryTests {
    @Test("the versions' order and the refusal's text, from rd_kafka_version()'s encoding")
    func versions() {
        #expect(KafkaLibrary.Version(encoded: 0x0200_02FF) == .init(major: 2, minor: 0, patch: 2))
        #expect(KafkaLibrary.Version(encoded: 0x0208_00FF) == KafkaLibrary.minimumVersion)
        #expect(KafkaLibrary.Version(encoded: 0x020A_0100) > KafkaLibrary.minimumVersion)
        #expect(KafkaLibrary.refusal(of: .init(major: 2, minor: 8, patch: 0), named: "2.8.0") == nil)
        #expect(KafkaLibrary.refusal(of: .init(major: 3, minor: 0, patch: 0), named: "3.0.0") == nil)
        let refusal = KafkaLibrary.refusal(of: .init(major: 2, minor: 7, patch: 9), named: "2.7.9")
        #expect(refusal?.contains("librdkafka 2.7.9 is older than 2.8.0") == true, "\(refusal ?? "none")")
        #expect(KafkaLibrary.version >= KafkaLibrary.minimumVersion, "these tests run with librdkafka \(KafkaLibrary.versionString)")
    }
}
