/// The field of a notification that a validation rule is about.
public enum APNsField: String, Sendable, Hashable, CaseIterable {
    case deviceToken = "device_token"
    case channelID = "apns-channel-id"
    case topic = "apns-topic"
    case pushType = "apns-push-type"
    case priority = "apns-priority"
    case expiration = "apns-expiration"
    case collapseID = "apns-collapse-id"
    case apnsID = "apns-id"
    case payload = "payload"
}

/// A violation of Apple's rules, found before anything is sent. Names the field it is about.
public struct APNsValidationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong with the field.
    public enum Problem: Sendable, Hashable {
        /// The value is empty.
        case empty
        /// The value has an odd number of hex digits.
        case oddLength
        /// The value contains characters that are not hex digits.
        case notHex
        /// The value is shorter than `minimum`.
        case tooShort(minimum: Int, actual: Int)
        /// The value is longer than `maximum` (characters or bytes, depending on the field).
        case tooLong(maximum: Int, actual: Int)
        /// The topic does not end with the suffix the push type requires.
        case missingSuffix(String)
        /// The value contains characters that are not allowed (whitespace, control characters).
        case invalidCharacters
        /// The value is not one of the allowed values.
        case notAllowed(String)
        /// The payload is not valid JSON or not a JSON object.
        case notJSONObject
        /// The payload has no `aps` member.
        case missingAps
        /// The payload's `aps` member is not a dictionary.
        case apsNotDictionary
    }

    /// The field the rule is about.
    public let field: APNsField
    /// What is wrong.
    public let problem: Problem

    /// Creates an error for `field`.
    public init(_ field: APNsField, _ problem: Problem) {
        self.field = field
        self.problem = problem
    }

    /// A sentence naming the field and the rule, e.g. `apns-topic must end with .voip for this push type`.
    public var description: String {
        let name = field.rawValue
        return switch problem {
        case .empty: "\(name) must not be empty"
        case .oddLength: "\(name) must have an even number of hex characters"
        case .notHex: "\(name) must contain only hex characters (0-9, a-f)"
        case .tooShort(let minimum, let actual): "\(name) is \(actual) long, the minimum is \(minimum)"
        case .tooLong(let maximum, let actual): "\(name) is \(actual) long, the limit is \(maximum)"
        case .missingSuffix(let suffix): "\(name) must end with \(suffix) for this push type"
        case .invalidCharacters: "\(name) contains characters that are not allowed (spaces or control characters)"
        case .notAllowed(let value): "\(name) does not allow \(value)"
        case .notJSONObject: "\(name) must be a JSON object"
        case .missingAps: "\(name) must have an aps member"
        case .apsNotDictionary: "\(name) aps must be an object"
        }
    }
}
