import Configuration
import Yams

/// The configuration file's values for swift-configuration, from the loader's one parse of the file
/// (the same tree gives the unknown-key check and `kafka.properties`). A value converts when it is
/// read, as swift-configuration's own YAML snapshot does: any scalar as text, a scalar that spells
/// one as an integer, a number or a boolean, a list of scalars as a list.
struct YAMLTreeProvider: ConfigProvider, ConfigSnapshot {
    /// A value that cannot be read as the type asked for; the loader names the key.
    struct Mismatch: Error {
        var key: String
        var type: ConfigType
    }

    /// A leaf of the file's tree: a scalar's text, or a list (of scalars' texts; `nil` for an item
    /// that is not a scalar).
    enum Leaf: Sendable {
        case scalar(String)
        case list([String?])

        init(_ node: Node) {
            if let sequence = node.sequence {
                self = .list(sequence.map { $0.scalar?.string })
            } else {
                self = .scalar(node.scalar?.string ?? "")
            }
        }
    }

    let providerName = "YAML file"
    /// The leaves of the file's tree by dotted key.
    let leaves: [String: Leaf]

    func value(forKey key: AbsoluteConfigKey, type: ConfigType) throws -> LookupResult {
        let encodedKey = key.components.joined(separator: ".")
        guard let leaf = leaves[encodedKey] else { return LookupResult(encodedKey: encodedKey, value: nil) }
        func scalars<Value>(_ convert: (Node.Scalar) -> Value?) throws -> [Value] {
            guard case .list(let items) = leaf else { throw Mismatch(key: encodedKey, type: type) }
            return try items.map { item in
                guard let item, let value = convert(Node.Scalar(item)) else { throw Mismatch(key: encodedKey, type: type) }
                return value
            }
        }
        func scalar<Value>(_ convert: (Node.Scalar) -> Value?) throws -> Value {
            guard case .scalar(let text) = leaf, let value = convert(Node.Scalar(text)) else { throw Mismatch(key: encodedKey, type: type) }
            return value
        }
        let content: ConfigContent
        switch type {
        case .string: content = .string(try scalar { $0.string })
        case .int: content = .int(try scalar(Int.construct))
        case .double: content = .double(try scalar(Double.construct))
        case .bool: content = .bool(try scalar(Bool.construct))
        case .stringArray: content = .stringArray(try scalars { $0.string })
        case .intArray: content = .intArray(try scalars(Int.construct))
        case .doubleArray: content = .doubleArray(try scalars(Double.construct))
        case .boolArray: content = .boolArray(try scalars(Bool.construct))
        case .bytes, .byteChunkArray: throw Mismatch(key: encodedKey, type: type)
        }
        return LookupResult(encodedKey: encodedKey, value: ConfigValue(content, isSecret: false))
    }

    nonisolated(nonsending) func fetchValue(forKey key: AbsoluteConfigKey, type: ConfigType) async throws -> LookupResult {
        try value(forKey: key, type: type)
    }

    nonisolated(nonsending) func watchValue<Return: ~Copyable>(
        forKey key: AbsoluteConfigKey, type: ConfigType,
        updatesHandler: nonisolated(nonsending) (ConfigUpdatesAsyncSequence<Result<LookupResult, any Error>, Never>) async throws -> Return
    ) async throws -> Return {
        try await watchValueFromValue(forKey: key, type: type, updatesHandler: updatesHandler)
    }

    func snapshot() -> any ConfigSnapshot { self }

    nonisolated(nonsending) func watchSnapshot<Return: ~Copyable>(
        updatesHandler: nonisolated(nonsending) (ConfigUpdatesAsyncSequence<any ConfigSnapshot, Never>) async throws -> Return
    ) async throws -> Return {
        try await watchSnapshotFromSnapshot(updatesHandler: updatesHandler)
    }
}
