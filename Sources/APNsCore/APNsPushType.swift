/// The `apns-push-type` values Apple defines.
public enum APNsPushType: String, Sendable, Hashable, CaseIterable {
    case alert, background, voip, complication, fileprovider, mdm, location, liveactivity, pushtotalk, widgets
    /// A control's push token (iOS 18 control widgets, `ControlPushHandler`): the system reloads that control.
    case controls

    /// The suffixes the `apns-topic` must end with for this push type (any one of them), or empty when
    /// the topic is the plain bundle id.
    ///
    /// `pushtotalk` accepts Apple's documented `.voip-ptt` and the `.push-type.pushtotalk` spelling.
    public var requiredTopicSuffixes: [String] {
        switch self {
        case .voip: return [".voip"]
        case .complication: return [".complication"]
        case .fileprovider: return [".pushkit.fileprovider"]
        case .liveactivity: return [".push-type.liveactivity"]
        case .pushtotalk: return [".voip-ptt", ".push-type.pushtotalk"]
        case .widgets: return [".push-type.widgets"]
        case .controls: return [".push-type.controls"]
        case .location: return [".location-query"]
        case .alert, .background, .mdm: return []
        }
    }

    /// The largest payload Apple accepts for this push type, in bytes.
    public var maximumPayloadSize: Int { self == .voip ? 5120 : 4096 }
}

/// The `apns-priority` values.
public enum APNsPriority: Int, Sendable, Hashable, CaseIterable {
    /// Deliver immediately (not allowed for background pushes).
    case immediate = 10
    /// Deliver taking the device's power into account.
    case conservePower = 5
    /// Lowest priority: prioritise the device's power over all else.
    case low = 1
}
