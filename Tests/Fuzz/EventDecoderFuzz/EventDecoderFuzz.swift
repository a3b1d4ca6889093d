import APNs
import FuzzSupport
import Relay

/// Fuzzes `PushEventDecoder` (the `push.events` value → `PushEvent`) and the payload rendering
/// that follows it. Corpus: `Tests/Fuzz/Corpus/EventDecoderFuzz/`.
enum EventDecoderFuzz: FuzzTarget {
    static let transports: [APNsTransport] = [.http2, .binary(.simple), .binary(.framed)]

    /// Every input is either a valid event that keeps the contract's rules, or a refusal whose
    /// sentence starts with the field it is about; nothing crashes.
    static func check(_ bytes: [UInt8]) {
        var acceptedByStricterTransport = false
        for transport in transports.reversed() {
            do {
                let event = try PushEventDecoder(transport: transport).decode(bytes)
                checkAccepted(event, transport: transport)
                acceptedByStricterTransport = true
            } catch {
                let root = error.field.split(separator: "[").first.map(String.init) ?? error.field
                Fuzz.require(!error.field.isEmpty && error.reason.hasPrefix(root), "refusal names its field: \(error.field): \(error.reason)")
                // The binary formats only allow smaller payloads: what they accept, HTTP/2 accepts.
                Fuzz.require(!(acceptedByStricterTransport && transport == .http2), "HTTP/2 refuses what a binary format accepted: \(error.reason)")
            }
        }
    }

    static func checkAccepted(_ event: PushEvent, transport: APNsTransport) {
        Fuzz.require((1...128).contains(event.id.count), "id length \(event.id.count)")
        Fuzz.require(event.badge != nil || event.apns != nil, "an event with neither badge nor apns was accepted")
        if let channel = event.apns?.channelID {
            // A broadcast names no devices, no user and no badge, and is a Live Activity.
            Fuzz.require(event.user == nil && event.tokens == nil && event.badge == nil, "a broadcast with a user, tokens or a badge")
            Fuzz.require(event.pushType == .liveactivity && event.apns?.collapseID == nil, "a broadcast of \(event.pushType) or with a collapse id")
            Fuzz.require(event.targets == .channel(channel), "a broadcast targets its channel")
            do throws(EventRejection) {
                let notification = try event.renderBroadcast(to: channel, defaultTopic: "com.example.app")
                Fuzz.require(notification.channelID == channel && notification.token == nil, "rendered for another recipient")
            } catch {
                Fuzz.require(namesItsField(error), "broadcast refusal names its field: \(error.reason)")
            }
        } else if event.badge != nil || event.tokens == nil {
            Fuzz.require(!(event.user ?? "").isEmpty, "user required with a badge or without tokens")
        }
        if let seq = event.seq { Fuzz.require(seq >= 1, "seq \(seq)") }
        for token in event.tokens ?? [] {
            Fuzz.require((64...200).contains(token.utf8.count) && token.utf8.count % 2 == 0, "token length \(token.utf8.count)")
            Fuzz.require(token == token.lowercased() && token.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }, "token not lower-case hex")
        }
        if let collapseID = event.apns?.collapseID { Fuzz.require(collapseID.utf8.count <= 64, "collapse id of \(collapseID.utf8.count) bytes") }
        // The collapse id sent (the event's own, or derived from its id) can always be an HTTP/2 header value.
        let sentCollapseID = DeliveryIdentity.collapseID(eventID: event.id, eventCollapseID: event.apns?.collapseID)
        Fuzz.require(sentCollapseID.utf8.count <= 64 && APNsNotification.isValidHeaderValue(sentCollapseID), "collapse id sent: \(sentCollapseID.debugDescription)")
        if let priority = event.apns?.priority { Fuzz.require([1, 5, 10].contains(priority.rawValue), "priority \(priority)") }

        // Rendering with a badge writes it into aps.badge, keeps a JSON object, or refuses by size.
        for badge in [Int64(0), 7, Int64.max] {
            do {
                let payload = try event.renderPayload(badge: badge, transport: transport)
                let rendered = try JSON.parse(payload)
                Fuzz.require(rendered["aps"]?["badge"]?.integerValue == badge, "aps.badge is not \(badge) after injection")
                Fuzz.require(payload.count <= transport.maximumPayloadSize(for: event.pushType), "payload of \(payload.count) bytes over the limit")
            } catch let error as EventRejection {
                Fuzz.require(error.reason.hasPrefix(error.field), "render refusal names its field: \(error.reason)")
            } catch {
                Fuzz.require(false, "rendered payload is not JSON: \(error)")
            }
            // The whole notification: Apple's rules hold for what is sent, or the refusal names the field.
            do throws(EventRejection) {
                let token = event.tokens?.first ?? String(repeating: "ab", count: 32)
                let notification = try event.render(for: token, badge: badge, defaultTopic: "com.example.app", transport: transport)
                Fuzz.require(notification.token?.hex == token, "rendered for another token")
            } catch {
                Fuzz.require(namesItsField(error), "render refusal names its field: \(error.reason)")
            }
        }
    }

    /// A refusal names its field: at the start, or by its last component (Apple's rules name their header).
    static func namesItsField(_ error: EventRejection) -> Bool {
        !error.reason.isEmpty && error.reason.contains(error.field.split(separator: ".").last.map(String.init) ?? error.field)
            || error.reason.hasPrefix(error.field)
    }
}

#if FUZZING
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt { EventDecoderFuzz.fuzzOne(data, size) }
#else
@main extension EventDecoderFuzz {}
#endif
