import CRdKafka

/// Connection settings shared by every Kafka client.
public struct KafkaConfiguration: Sendable, Equatable {
    /// Bootstrap servers, `host:port[,host:port...]`.
    public var bootstrapServers: String
    /// librdkafka properties passed through unchanged (`security.protocol`, `sasl.*`, `ssl.*`, ...).
    /// A property librdkafka does not know, or a value it rejects, fails client creation with
    /// an error naming the property.
    public var properties: [String: String]

    public init(bootstrapServers: String, properties: [String: String] = [:]) {
        self.bootstrapServers = bootstrapServers
        self.properties = properties
    }

    /// Checks every pass-through property against librdkafka without connecting anywhere.
    ///
    /// - Throws: `KafkaError` with name `CONF_UNKNOWN` or `CONF_INVALID` naming the property.
    public func validate() throws {
        let conf = try RdKafkaConfig(self, roleDefaults: [:], enforced: [:])
        conf.destroy()
    }
}

/// An owned `rd_kafka_conf_t` under construction. Passed to `rd_kafka_new`, which takes ownership.
struct RdKafkaConfig {
    private(set) var pointer: OpaquePointer?

    /// Builds a configuration: role defaults first, then the user's properties, then the settings
    /// the Swift face depends on (which the user cannot override).
    init(
        _ configuration: KafkaConfiguration,
        roleDefaults: [String: String],
        enforced: [String: String]
    ) throws {
        pointer = rd_kafka_conf_new()
        do {
            try set("bootstrap.servers", configuration.bootstrapServers)
            for (name, value) in Self.sharedDefaults.merging(roleDefaults, uniquingKeysWith: { $1 }).sorted(by: { $0.key < $1.key }) {
                try set(name, value)
            }
            for (name, value) in configuration.properties.sorted(by: { $0.key < $1.key }) {
                try set(name, value)
            }
            for (name, value) in enforced.sorted(by: { $0.key < $1.key }) {
                try set(name, value)
            }
        } catch {
            destroy()
            throw error
        }
    }

    /// Every client's defaults, before its role's and the user's: requests go out as soon as they are written (TCP's
    /// Nagle algorithm would hold a small one, a transaction's commit or a lingered batch, until the previous one's
    /// acknowledgement, up to a delayed ACK's 40 ms on Linux).
    static let sharedDefaults = ["socket.nagle.disable": "true"]

    mutating func set(_ name: String, _ value: String) throws {
        var errorText = [CChar](repeating: 0, count: 512)
        let result = rd_kafka_conf_set(pointer, name, value, &errorText, errorText.count)
        guard result != RD_KAFKA_CONF_OK else { return }
        let detail = String(cStringBuffer: errorText)
        let errorName = result == RD_KAFKA_CONF_UNKNOWN ? "CONF_UNKNOWN" : "CONF_INVALID"
        // Secrets must not leak into errors: name the property, never echo its value.
        throw KafkaError.client(
            errorName,
            "kafka property '\(name)': \(detail)",
            operation: "configure"
        )
    }

    /// The value librdkafka holds for `name` (`nil` for an unknown property), as the client will see it.
    func value(of name: String) -> String? {
        var size = 0
        guard rd_kafka_conf_get(pointer, name, nil, &size) == RD_KAFKA_CONF_OK else { return nil }
        var buffer = [CChar](repeating: 0, count: size + 1)
        guard rd_kafka_conf_get(pointer, name, &buffer, &size) == RD_KAFKA_CONF_OK else { return nil }
        return String(cStringBuffer: buffer)
    }

    func destroy() {
        if let pointer { rd_kafka_conf_destroy(pointer) }
    }

    /// Hands ownership to `rd_kafka_new`.
    mutating func take() -> OpaquePointer? {
        defer { pointer = nil }
        return pointer
    }
}
