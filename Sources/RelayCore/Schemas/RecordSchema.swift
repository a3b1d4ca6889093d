// The JSON Schemas (2020-12) of the records on the relay's topics, as `apns-relay schema TOPIC` prints them.

/// A topic of the relay and the JSON Schema (draft 2020-12) of its record values.
///
/// `push.events` and `push.devices` are what producers write: their schemas accept what the relay's decoders accept
/// (unknown keys are ignored, a `null` optional key counts as absent); the few rules no JSON Schema can state are in
/// the schema's `description`. The topics the relay writes have closed schemas (`additionalProperties: false`): every
/// key the relay writes, each key a later version adds is added to the schema in the same release.
public enum RecordSchema: String, CaseIterable, Sendable {
    /// Push events, the relay's input.
    case events = "push.events"
    /// Device registrations (compacted), which the relay follows.
    case devices = "push.devices"
    /// One result per (event, device).
    case results = "push.results"
    /// Tokens APNs says are dead.
    case failedTokens = "push.failed-tokens"
    /// Tokens alive in the other APNs environment than the one named for them.
    case wrongEnvironment = "push.wrong-environment"
    /// Dead letters: the schema is the reference record that stands in for an input too large to publish again.
    case deadLetter = "push.dlq"
    /// The badge changelog (compacted): users' states, progress markers, layouts.
    case badgeState = "push.badge-state"

    /// The topic's default name, which the schema is named after.
    public var topic: String { rawValue }

    /// The configuration key that names the topic (`kafka.topics.<key>`).
    public var configurationKey: String {
        switch self {
        case .events: "events"
        case .devices: "devices"
        case .results: "results"
        case .failedTokens: "failed_tokens"
        case .wrongEnvironment: "wrong_environment"
        case .deadLetter: "dead_letter"
        case .badgeState: "badge_state"
        }
    }

    /// The schema for a topic named by its default name or its configuration key; `nil` for any other name.
    public init?(naming name: String) {
        guard let schema = Self.allCases.first(where: { $0.topic == name || $0.configurationKey == name }) else { return nil }
        self = schema
    }

    /// The schema as JSON text (two-space indented, a line feed at the end).
    public var text: String {
        switch self {
        case .events: RecordSchemaText.events
        case .devices: RecordSchemaText.devices
        case .results: RecordSchemaText.results
        case .failedTokens: RecordSchemaText.failedTokens
        case .wrongEnvironment: RecordSchemaText.wrongEnvironment
        case .deadLetter: RecordSchemaText.deadLetter
        case .badgeState: RecordSchemaText.badgeState
        }
    }
}

/// The schemas' text, written as an operator reads them.
private enum RecordSchemaText {
    static let events = #"""
    {
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "$id": "urn:apns-relay:schema:push.events",
      "title": "apns-relay event (push.events)",
      "description": "One push event. Record key: the user id (or the event id when there is no user). Unknown keys are ignored and a null optional key counts as absent. The relay also refuses, as a dead letter, what no JSON Schema can state: a payload over Apple's limit once the badge is written into it (4096 bytes, 5120 for voip; 256 or 2048 on the binary transport), an apns.collapse_id over 64 bytes or a live_activity name over 256 bytes of UTF-8 (the schema bounds their characters), JSON nested deeper than 64 levels, apns.channel_id when the relay uses the binary transport, and more tokens than relay.max_tokens_per_event.",
      "type": "object",
      "required": ["id"],
      "properties": {
        "id": {"description": "Unique: the idempotency key and the key of the event's results.", "type": "string", "minLength": 1, "maxLength": 128},
        "user": {"description": "The user whose badge and devices the event is for.", "type": ["string", "null"], "minLength": 1},
        "seq": {"description": "The user's sequence number: events of a user are applied in seq order, once.", "type": ["integer", "null"], "minimum": 1, "maximum": 9223372036854775807},
        "tokens": {"description": "Device tokens; absent: the user's registered devices.", "type": ["array", "null"], "minItems": 1, "items": {"$ref": "#/$defs/deviceToken"}},
        "badge": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/badge"}]},
        "live_activity": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/liveActivity"}]},
        "apns": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/apns"}]}
      },
      "allOf": [
        {"description": "An event has badge, apns or both.", "anyOf": [{"$ref": "#/$defs/withBadge"}, {"$ref": "#/$defs/withApns"}]},
        {"description": "user is required when badge is present.", "if": {"$ref": "#/$defs/withBadge"}, "then": {"$ref": "#/$defs/withUser"}},
        {
          "description": "user is required when the event names no tokens, no live_activity and no apns.channel_id.",
          "if": {"not": {"anyOf": [{"$ref": "#/$defs/withTokens"}, {"$ref": "#/$defs/withLiveActivity"}, {"$ref": "#/$defs/broadcast"}]}},
          "then": {"$ref": "#/$defs/withUser"}
        },
        {
          "description": "A broadcast (apns.channel_id) names no tokens, user, badge or live_activity; it is a liveactivity push without a collapse id, and starts nothing.",
          "if": {"$ref": "#/$defs/broadcast"},
          "then": {
            "properties": {
              "tokens": {"type": "null"},
              "user": {"type": "null"},
              "badge": {"type": "null"},
              "live_activity": {"type": "null"},
              "apns": {
                "required": ["push_type"],
                "properties": {
                  "push_type": {"const": "liveactivity"},
                  "collapse_id": {"type": "null"},
                  "payload": {"properties": {"aps": {"not": {"$ref": "#/$defs/startEvent"}}}}
                }
              }
            }
          }
        },
        {
          "description": "live_activity addresses registered Live Activity tokens: no tokens beside it, push_type liveactivity; push_to_start needs user and a start, activity_id anything but a start.",
          "if": {"$ref": "#/$defs/withLiveActivity"},
          "then": {
            "required": ["apns"],
            "properties": {
              "tokens": {"type": "null"},
              "apns": {"type": "object", "required": ["push_type"], "properties": {"push_type": {"const": "liveactivity"}}}
            },
            "if": {"properties": {"live_activity": {"required": ["push_to_start"]}}},
            "then": {"allOf": [{"$ref": "#/$defs/withUser"}, {"$ref": "#/$defs/starting"}]},
            "else": {"not": {"$ref": "#/$defs/starting"}}
          }
        },
        {
          "description": "A Live Activity start carries what the device needs to show it.",
          "if": {"$ref": "#/$defs/starting"},
          "then": {"properties": {"apns": {"properties": {"payload": {"properties": {"aps": {"$ref": "#/$defs/liveActivityStart"}}}}}}}
        }
      ],
      "$defs": {
        "deviceToken": {"description": "An APNs device token: 64 to 200 hex digits, either case.", "type": "string", "pattern": "^(?:[0-9A-Fa-f]{2}){32,100}$"},
        "channelID": {"description": "A broadcast channel id as APNs issues it: base64.", "type": "string", "maxLength": 256, "pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)$"},
        "count": {"type": "integer", "minimum": 0, "maximum": 9223372036854775807},
        "badge": {
          "description": "Exactly one operation; the count never goes below 0.",
          "type": "object",
          "properties": {"set": {"$ref": "#/$defs/count"}, "increment": {"$ref": "#/$defs/count"}, "decrement": {"$ref": "#/$defs/count"}},
          "oneOf": [{"required": ["set"]}, {"required": ["increment"]}, {"required": ["decrement"]}]
        },
        "liveActivityName": {"type": "string", "minLength": 1, "maxLength": 256},
        "liveActivity": {
          "description": "The user's push-to-start tokens of an ActivityAttributes type, or an activity's update tokens.",
          "type": "object",
          "properties": {"push_to_start": {"$ref": "#/$defs/liveActivityName"}, "activity_id": {"$ref": "#/$defs/liveActivityName"}},
          "additionalProperties": false,
          "minProperties": 1,
          "maxProperties": 1
        },
        "apns": {
          "type": "object",
          "required": ["payload"],
          "properties": {
            "topic": {"description": "The apns-topic (bundle id); absent: the configured app's.", "type": ["string", "null"], "minLength": 1},
            "push_type": {"enum": ["alert", "background", "voip", "complication", "fileprovider", "mdm", "location", "liveactivity", "pushtotalk", "widgets", "controls", null]},
            "priority": {"enum": [10, 5, 1, null]},
            "expiration": {"description": "Epoch seconds.", "type": ["integer", "null"], "minimum": 0, "maximum": 9223372036854775807},
            "collapse_id": {"type": ["string", "null"], "minLength": 1, "maxLength": 64, "pattern": "^(?:[^\\x00-\\x20\\x7F](?:[^\\x00-\\x08\\x0A-\\x1F\\x7F]*[^\\x00-\\x20\\x7F])?)?$"},
            "channel_id": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/channelID"}]},
            "environment": {"enum": ["production", "sandbox", null]},
            "payload": {"description": "The notification's JSON; the relay writes the user's count into aps.badge.", "type": "object", "required": ["aps"], "properties": {"aps": {"type": "object"}}}
          },
          "if": {"required": ["push_type"], "properties": {"push_type": {"const": "background"}}},
          "then": {"properties": {"priority": {"not": {"const": 10}}}}
        },
        "withBadge": {"required": ["badge"], "properties": {"badge": {"type": "object"}}},
        "withApns": {"required": ["apns"], "properties": {"apns": {"type": "object"}}},
        "withUser": {"required": ["user"], "properties": {"user": {"type": "string"}}},
        "withTokens": {"required": ["tokens"], "properties": {"tokens": {"type": "array"}}},
        "withLiveActivity": {"required": ["live_activity"], "properties": {"live_activity": {"type": "object"}}},
        "broadcast": {"required": ["apns"], "properties": {"apns": {"type": "object", "required": ["channel_id"], "properties": {"channel_id": {"type": "string"}}}}},
        "startEvent": {"type": "object", "required": ["event"], "properties": {"event": {"const": "start"}}},
        "starting": {
          "required": ["apns"],
          "properties": {
            "apns": {
              "type": "object",
              "required": ["push_type", "payload"],
              "properties": {
                "push_type": {"const": "liveactivity"},
                "payload": {"type": "object", "required": ["aps"], "properties": {"aps": {"$ref": "#/$defs/startEvent"}}}
              }
            }
          }
        },
        "liveActivityStart": {
          "required": ["attributes-type", "attributes", "content-state"],
          "properties": {
            "attributes-type": {"type": "string", "minLength": 1},
            "attributes": {"type": "object"},
            "content-state": {"type": "object"},
            "input-push-token": {"const": 1},
            "input-push-channel": {"$ref": "#/$defs/channelID"}
          }
        }
      }
    }

    """#

    static let devices = #"""
    {
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "$id": "urn:apns-relay:schema:push.devices",
      "title": "apns-relay device registration (push.devices, compacted)",
      "description": "A device token's registration. Record key: the token (64 to 200 hex digits; stored lower-case). A null value removes the registration. push_to_start or activity_id (at most one) makes it a Live Activity token. Unknown keys are ignored; a name over 256 bytes of UTF-8 is refused beyond the schema's character bound.",
      "type": "object",
      "required": ["user", "topic", "environment", "registered_at"],
      "properties": {
        "user": {"type": "string", "minLength": 1},
        "topic": {"type": "string", "minLength": 1},
        "environment": {"enum": ["production", "sandbox"]},
        "registered_at": {"description": "Epoch milliseconds.", "type": "integer", "minimum": 0, "maximum": 9223372036854775807},
        "push_to_start": {"description": "The ActivityAttributes type of a push-to-start token.", "type": ["string", "null"], "minLength": 1, "maxLength": 256},
        "activity_id": {"description": "The activity of an update token.", "type": ["string", "null"], "minLength": 1, "maxLength": 256}
      },
      "not": {"required": ["push_to_start", "activity_id"], "properties": {"push_to_start": {"type": "string"}, "activity_id": {"type": "string"}}}
    }

    """#

    static let results = #"""
    {
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "$id": "urn:apns-relay:schema:push.results",
      "title": "apns-relay result (push.results)",
      "description": "One outcome per (event, device), or one per event when no device is concerned (invalid, duplicate, no_devices) or the event is a broadcast (token: the channel id). Record key: the event id. The first twelve keys are always written, in this order; the others only when they apply.",
      "type": "object",
      "required": ["event_id", "user", "token", "seq", "badge", "status", "apns_id", "http_status", "reason", "attempts", "latency_ms", "at"],
      "additionalProperties": false,
      "properties": {
        "event_id": {"type": "string", "minLength": 1, "maxLength": 128},
        "user": {"type": ["string", "null"]},
        "token": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": "^(?:[0-9a-f]{2}){32,100}$"}, {"type": "string", "description": "A broadcast's channel id.", "minLength": 1, "maxLength": 256}]},
        "seq": {"type": ["integer", "null"], "minimum": 1},
        "badge": {"description": "The user's count sent with (or computed for) the event.", "type": ["integer", "null"], "minimum": 0},
        "status": {"enum": ["delivered", "rejected", "unregistered", "expired", "failed", "superseded", "duplicate", "invalid", "no_devices"]},
        "apns_id": {"type": ["string", "null"], "pattern": "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"},
        "http_status": {"type": ["integer", "null"], "minimum": 100, "maximum": 599},
        "reason": {"description": "APNs' reason or the relay's, for a person.", "type": ["string", "null"]},
        "attempts": {"type": "integer", "minimum": 0},
        "latency_ms": {"type": ["integer", "null"], "minimum": 0},
        "at": {"description": "When the result was decided, epoch milliseconds.", "type": "integer", "minimum": 0},
        "late": {"description": "The event's seq had been skipped before it arrived; it was applied at arrival.", "const": true},
        "environment": {"description": "The APNs environment that answered, when not the one the notification was sent to.", "enum": ["production", "sandbox"]},
        "apns_unique_id": {"type": "string", "minLength": 1},
        "unregistered_since": {"description": "APNs' 410 timestamp, epoch milliseconds.", "type": "integer"},
        "registered_again": {"description": "The token's registration is newer than unregistered_since: it stays.", "const": true}
      }
    }

    """#

    static let failedTokens = #"""
    {
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "$id": "urn:apns-relay:schema:push.failed-tokens",
      "title": "apns-relay failed token (push.failed-tokens)",
      "description": "A token APNs says is dead. Record key: the token.",
      "type": "object",
      "required": ["token", "user", "topic", "environment", "reason", "since", "event_id"],
      "additionalProperties": false,
      "properties": {
        "token": {"type": "string", "pattern": "^(?:[0-9a-f]{2}){32,100}$"},
        "user": {"type": ["string", "null"]},
        "topic": {"type": ["string", "null"]},
        "environment": {"enum": ["production", "sandbox", null]},
        "reason": {"description": "APNs' own reason (Unregistered, BadDeviceToken, DeviceTokenNotForTopic, a legacy status name) or Feedback.", "type": "string", "minLength": 1},
        "since": {"description": "Epoch milliseconds: APNs' 410 timestamp or the feedback tuple's time.", "type": "integer"},
        "event_id": {"description": "The event whose delivery revealed it; null for feedback.", "type": ["string", "null"]}
      }
    }

    """#

    static let wrongEnvironment = #"""
    {
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "$id": "urn:apns-relay:schema:push.wrong-environment",
      "title": "apns-relay token in the wrong environment (push.wrong-environment)",
      "description": "A token APNs refused with BadDeviceToken where it was sent and delivered in the other environment: it is alive in environment, and source named wrong_environment for it. Record key: the token.",
      "type": "object",
      "required": ["token", "user", "topic", "environment", "wrong_environment", "source", "event_id", "at"],
      "additionalProperties": false,
      "properties": {
        "token": {"type": "string", "pattern": "^(?:[0-9a-f]{2}){32,100}$"},
        "user": {"type": ["string", "null"]},
        "topic": {"type": ["string", "null"]},
        "environment": {"enum": ["production", "sandbox"]},
        "wrong_environment": {"enum": ["production", "sandbox"]},
        "source": {"description": "registration: correct push.devices; event: the producer's apns.environment.", "enum": ["registration", "event"]},
        "event_id": {"type": "string", "minLength": 1},
        "at": {"description": "Epoch milliseconds.", "type": "integer", "minimum": 0}
      }
    }

    """#

    static let deadLetter = #"""
    {
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "$id": "urn:apns-relay:schema:push.dlq",
      "title": "apns-relay dead-letter reference (push.dlq)",
      "description": "A dead letter is the input's value byte for byte, with headers x-error, x-source-topic, x-source-partition and x-source-offset: it has the input's shape, not this one. An input too large to publish again with its headers gets this reference instead, with the header x-dead-letter: reference. Record key: the input's key.",
      "type": "object",
      "required": ["source_topic", "source_partition", "source_offset", "size", "error"],
      "additionalProperties": false,
      "properties": {
        "source_topic": {"type": "string", "minLength": 1},
        "source_partition": {"type": "integer", "minimum": 0},
        "source_offset": {"type": "integer", "minimum": 0},
        "size": {"description": "The input value's bytes.", "type": "integer", "minimum": 0},
        "error": {"description": "What is wrong, for a person.", "type": "string"}
      }
    }

    """#

    static let badgeState = #"""
    {
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "$id": "urn:apns-relay:schema:push.badge-state",
      "title": "apns-relay badge state (push.badge-state, compacted)",
      "description": "Record key: the user, for a user's state. Two keys per partition start with the byte 0xFF (never UTF-8, so never a user id): 0xFF apns-relay/progress holds the relay's progress marker, 0xFF apns-relay/layout the layout its users are placed for. A null value (a tombstone) removes a user moved away by apns-relay partitions migrate.",
      "anyOf": [{"$ref": "#/$defs/userState"}, {"$ref": "#/$defs/progressMarker"}, {"$ref": "#/$defs/layout"}],
      "$defs": {
        "userState": {
          "type": "object",
          "required": ["badge", "seq", "updated_at"],
          "additionalProperties": false,
          "properties": {
            "badge": {"description": "The user's count.", "type": "integer", "minimum": 0},
            "seq": {"description": "The last applied seq, 0 before any.", "type": "integer", "minimum": 0},
            "offset": {"description": "The push.events offset of the newest event applied to the user.", "type": "integer", "minimum": 0},
            "skipped": {
              "description": "Seqs skipped and still remembered: [from, to, skipped at (epoch ms)].",
              "type": "array",
              "items": {"type": "array", "prefixItems": [{"type": "integer", "minimum": 1}, {"type": "integer", "minimum": 1}, {"type": "integer"}], "minItems": 3, "maxItems": 3}
            },
            "forwarded": {
              "description": "Per events partition that forwarded the user's events here: [partition, highest offset handled, and where in this partition that forward was applied when it was applied here].",
              "type": "array",
              "items": {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0}, {"type": "integer", "minimum": 0}, {"type": "integer", "minimum": 0}], "minItems": 2, "maxItems": 3}
            },
            "updated_at": {"description": "Epoch milliseconds.", "type": "integer"}
          }
        },
        "progressMarker": {
          "description": "Every record of the events partition at or below exact.through that is not in an open run is finished; done lists, per open record, the digests of the devices whose result is published. through and open are the shape older relays read.",
          "type": "object",
          "required": ["through", "open", "exact", "updated_at"],
          "additionalProperties": false,
          "properties": {
            "through": {"type": "integer"},
            "open": {"type": "array", "items": {"type": "integer"}, "maxItems": 1000},
            "exact": {
              "type": "object",
              "required": ["through", "runs"],
              "additionalProperties": false,
              "properties": {
                "through": {"type": "integer"},
                "runs": {"description": "Open offsets: the first run's start, then each run's length and the finished offsets before the next.", "type": "array", "items": {"type": "integer", "minimum": 0}},
                "done": {
                  "type": "array",
                  "items": {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0}], "items": {"type": "string", "pattern": "^[0-9a-f]{16}$"}, "minItems": 1}
                }
              }
            },
            "updated_at": {"type": "integer"}
          }
        },
        "layout": {
          "description": "How users are placed on the partitions; after a growth, what each events partition's owner reads again.",
          "type": "object",
          "required": ["partitions", "hash"],
          "additionalProperties": false,
          "properties": {
            "partitions": {"type": "integer", "minimum": 1, "maximum": 2147483647},
            "hash": {"const": "murmur2"},
            "read_again": {
              "type": "array",
              "items": {
                "type": "object",
                "required": ["partition", "from"],
                "additionalProperties": false,
                "properties": {
                  "partition": {"type": "integer", "minimum": 0},
                  "from": {"description": "The group's committed offset when the layout changed.", "type": "integer"},
                  "progress": {"$ref": "#/$defs/progressMarker"}
                }
              }
            }
          }
        }
      }
    }

    """#
}
