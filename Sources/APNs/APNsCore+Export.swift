// The transport-free model (notifications, push types, tokens, environments, endpoints, outcomes and their
// reasons, the retry table) lives in APNsCore, which links no NIO; whatever speaks APNs sees it through here.
@_exported public import APNsCore
