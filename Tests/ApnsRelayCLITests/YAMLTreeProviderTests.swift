import Configuration
import Testing

@testable import apns_relay

/// The configuration file's leaves as swift-configuration reads them: a value converts when it is read, to the type the
/// key is read as; one that does not convert is a mismatch naming the key (the loader turns it into exit 2).
@Suite("The configuration file's values for swift-configuration")
struct YAMLTreeProviderTests {
    let provider = YAMLTreeProvider(leaves: [
        "relay.max_in_flight": .scalar("4096"),
        "relay.rate": .scalar("-1.5"),
        "kafka.transactions": .scalar("true"),
        "apns.topic": .scalar("com.example.app"),
        "apns.connections": .scalar("two"),
        "kafka.brokers": .list(["a:9092", "b:9092"]),
        "relay.ports": .list(["1", "2", "3"]),
        "relay.mixed": .list(["1", nil]),
    ])

    func read(_ key: String, as type: ConfigType) throws -> ConfigContent? {
        try provider.value(forKey: AbsoluteConfigKey(key.split(separator: ".").map(String.init)), type: type).value?.content
    }

    func mismatch(_ key: String, as type: ConfigType) -> String? {
        do {
            _ = try read(key, as: type)
            return nil
        } catch let mismatch as YAMLTreeProvider.Mismatch {
            return "\(mismatch.key) as \(mismatch.type)"
        } catch {
            return "\(error)"
        }
    }

    @Test("a scalar reads as the type asked for: an integer, a number, a boolean, or any scalar as text")
    func scalars() throws {
        #expect(try read("relay.max_in_flight", as: .int) == .int(4096))
        #expect(try read("relay.max_in_flight", as: .string) == .string("4096"), "any scalar is text too")
        #expect(try read("relay.max_in_flight", as: .double) == .double(4096))
        #expect(try read("relay.rate", as: .double) == .double(-1.5))
        #expect(try read("kafka.transactions", as: .bool) == .bool(true))
        #expect(try read("apns.topic", as: .string) == .string("com.example.app"))
    }

    @Test("a list of scalars reads as a list of the type asked for")
    func lists() throws {
        #expect(try read("kafka.brokers", as: .stringArray) == .stringArray(["a:9092", "b:9092"]))
        #expect(try read("relay.ports", as: .intArray) == .intArray([1, 2, 3]))
        #expect(try read("relay.ports", as: .doubleArray) == .doubleArray([1, 2, 3]))
    }

    @Test("a value that does not convert, a list read as a scalar or a scalar as a list, a list with an item that is not a scalar, and bytes are mismatches naming the key")
    func mismatches() {
        #expect(mismatch("apns.connections", as: .int) == "apns.connections as int")
        #expect(mismatch("apns.topic", as: .bool) == "apns.topic as bool")
        #expect(mismatch("relay.rate", as: .int) == "relay.rate as int")
        #expect(mismatch("kafka.brokers", as: .string) == "kafka.brokers as string")
        #expect(mismatch("apns.topic", as: .stringArray) == "apns.topic as stringArray")
        #expect(mismatch("kafka.brokers", as: .intArray) == "kafka.brokers as intArray")
        #expect(mismatch("relay.mixed", as: .stringArray) == "relay.mixed as stringArray")
        #expect(mismatch("apns.topic", as: .bytes) == "apns.topic as bytes")
    }

    @Test("a key the file does not have is no value, under its dotted name")
    func missing() throws {
        let result = try provider.value(forKey: AbsoluteConfigKey(["relay", "absent"]), type: .int)
        #expect(result.encodedKey == "relay.absent" && result.value == nil)
        #expect(try provider.snapshot().value(forKey: AbsoluteConfigKey(["apns", "topic"]), type: .string).value?.content == .string("com.example.app"))
    }
}
