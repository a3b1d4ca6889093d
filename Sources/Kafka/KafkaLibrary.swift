import CRdKafka

/// The librdkafka the process runs with (linked dynamically: the one the loader found, which may differ from the
/// headers it was built against).
public enum KafkaLibrary {
    /// The oldest librdkafka the Kafka module works with: earlier releases have the batch-consume, cooperative
    /// rebalance, idempotent and transactional producer faults fixed in 2.1.0-2.6.1, and a main thread that spins
    /// while a producer is busy (fixed in 2.4.0).
    public static let minimumVersion = Version(major: 2, minor: 8, patch: 0)

    /// A librdkafka release, as `rd_kafka_version()` encodes it (`0xMMmmrrpp`: major, minor, revision, pre-release).
    public struct Version: Comparable, Sendable, CustomStringConvertible {
        public var major: Int
        public var minor: Int
        public var patch: Int

        public init(major: Int, minor: Int, patch: Int) {
            (self.major, self.minor, self.patch) = (major, minor, patch)
        }

        /// Reads `rd_kafka_version()`'s encoding; its pre-release byte is left out.
        public init(encoded: Int32) {
            let bits = UInt32(bitPattern: encoded)
            self.init(major: Int(bits >> 24 & 0xFF), minor: Int(bits >> 16 & 0xFF), patch: Int(bits >> 8 & 0xFF))
        }

        public static func < (lhs: Version, rhs: Version) -> Bool {
            (lhs.major, lhs.minor, lhs.patch) < (rhs.major, rhs.minor, rhs.patch)
        }

        public var description: String { "\(major).\(minor).\(patch)" }
    }

    /// The loaded library's release.
    public static var version: Version { Version(encoded: rd_kafka_version()) }

    /// The loaded library's own version string (`rd_kafka_version_str()`, e.g. `2.8.0`).
    public static var versionString: String { String(cString: rd_kafka_version_str()) }

    /// Why `version` cannot be used, naming it and what is needed; `nil` when it is recent enough.
    public static func refusal(of version: Version = version, named name: String = versionString) -> String? {
        guard version < minimumVersion else { return nil }
        return "librdkafka \(name) is older than \(minimumVersion), the oldest apns-relay runs with: install librdkafka1 \(minimumVersion) or later "
            + "(scripts/install-librdkafka.sh builds it on Debian bookworm, whose own is 2.0.2)"
    }
}
