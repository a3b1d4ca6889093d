import Kafka

/// Asks librdkafka itself whether every pass-through property exists and takes its value.
enum KafkaPropertiesValidator {
    static func validate(_ properties: [String: String]) throws(ConfigurationError) {
        do {
            try KafkaConfiguration(bootstrapServers: "validate.invalid:9092", properties: properties).validate()
        } catch let error as KafkaError {
            let property = properties.keys.sorted().first { error.message.contains("'\($0)'") } ?? ""
            throw ConfigurationError(key: "kafka.properties.\(property)", problem: error.message)
        } catch {
            throw ConfigurationError(key: "kafka.properties", problem: "\(error)")
        }
    }
}
