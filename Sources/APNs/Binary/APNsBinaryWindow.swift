import DequeModule
package import NIOCore

/// Window settings.
public struct APNsBinaryWindowConfiguration: Sendable, Hashable {
    /// The most notifications kept unconfirmed; the connection reports it as its stream limit.
    public var capacity: Int
    /// A notification counts as delivered this long after it was sent without an error.
    public var quietPeriod: Duration
    /// A notification counts as delivered once this many later notifications were sent without an error.
    public var confirmAfterWrites: Int

    /// Creates settings.
    public init(capacity: Int = 2_000, quietPeriod: Duration = .milliseconds(500), confirmAfterWrites: Int = 500) {
        self.capacity = max(1, capacity)
        self.quietPeriod = quietPeriod
        self.confirmAfterWrites = max(1, confirmAfterWrites)
    }
}

/// The sent-but-unconfirmed notifications of one binary connection, as a pure state machine.
///
/// The legacy interface answers only failures, and after a failure APNs drops everything that followed on the
/// connection. So every notification stays in the window until it counts as delivered: once `quietPeriod` has
/// passed since it was sent with no error, or once `confirmAfterWrites` later notifications were sent with no
/// error. The window decides, for each event, what happened to which notification:
///
/// - an error response names identifier *i*: the ones before *i* were processed (delivered), *i* gets the status,
///   the ones after were dropped unprocessed (resend them);
/// - status 10 (shutdown) names the last one processed: it and the ones before are delivered, the rest dropped;
/// - the connection closes without an error response: whatever is left is in doubt (resend).
///
/// Identifiers are assigned per connection and unique within the window; a caller may suggest one (derived from
/// the notification's apns-id, so a resend keeps its identifier when it can) and the window probes upward on a
/// collision. Time is an input; nothing here reads a clock.
package struct APNsBinaryWindow: Sendable {
    package typealias Configuration = APNsBinaryWindowConfiguration

    /// Names a waiting send; chosen by the caller.
    package typealias Ticket = UInt64

    /// What became of a notification.
    package enum Resolution: Sendable, Hashable {
        /// It left the window without an error: delivered.
        case delivered
        /// The error response named it with this status.
        case answered(APNsBinaryStatus)
        /// APNs dropped it unprocessed after an earlier error or shutdown: certainly not delivered; resend.
        case dropped
        /// The connection closed with it unconfirmed: maybe delivered, maybe not; resend.
        case inDoubt
    }

    /// One resolved notification.
    package struct Resolved: Sendable, Hashable {
        /// The caller's ticket.
        package var ticket: Ticket
        /// Its identifier on this connection.
        package var identifier: UInt32
        /// What became of it.
        package var resolution: Resolution

        /// Creates the value.
        package init(ticket: Ticket, identifier: UInt32, resolution: Resolution) {
            self.ticket = ticket
            self.identifier = identifier
            self.resolution = resolution
        }
    }

    private struct Entry: Sendable {
        var ticket: Ticket
        var identifier: UInt32
        var sequence: UInt64
        var sentAt: NIODeadline
    }

    /// The settings.
    package let configuration: Configuration
    private var entries: Deque<Entry> = []
    private var nextSequence: UInt64 = 0
    private var sequenceByIdentifier: [UInt32: UInt64] = [:]
    /// Whether the window accepts no more notifications (after an error response or a close).
    package private(set) var isClosed = false

    /// Creates an empty window.
    package init(configuration: Configuration = .init()) {
        self.configuration = configuration
    }

    /// Notifications in the window.
    package var count: Int { entries.count }

    /// Whether another notification fits.
    package var hasRoom: Bool { !isClosed && count < configuration.capacity }

    /// Records a notification as sent and returns its identifier; `nil` when the window is closed or full
    /// (nothing may be written then).
    package mutating func send(ticket: Ticket, preferredIdentifier: UInt32, now: NIODeadline) -> UInt32? {
        guard hasRoom else { return nil }
        var identifier = preferredIdentifier
        while sequenceByIdentifier[identifier] != nil { identifier &+= 1 }
        let sequence = nextSequence
        nextSequence += 1
        sequenceByIdentifier[identifier] = sequence
        entries.append(Entry(ticket: ticket, identifier: identifier, sequence: sequence, sentAt: now))
        return identifier
    }

    /// The notifications that now count as delivered (quiet period passed, or enough later writes), oldest first.
    package mutating func confirm(now: NIODeadline) -> [Resolved] {
        var resolved: [Resolved] = []
        while let entry = entries.first {
            let laterWrites = nextSequence - entry.sequence - 1
            guard entry.sentAt + TimeAmount(configuration.quietPeriod) <= now || laterWrites >= UInt64(configuration.confirmAfterWrites) else { break }
            resolved.append(popFirst(.delivered))
        }
        return resolved
    }

    /// When the oldest notification's quiet period ends (`nil` when the window is empty).
    package var nextConfirmation: NIODeadline? {
        entries.first.map { $0.sentAt + TimeAmount(configuration.quietPeriod) }
    }

    /// An error response arrived: resolves every notification in the window and closes it (APNs closes the
    /// connection after an error response).
    package mutating func received(_ response: APNsBinaryErrorResponse) -> [Resolved] {
        isClosed = true
        var resolved: [Resolved] = []
        guard let sequence = sequenceByIdentifier[response.identifier] else {
            // The named notification already left the window (or the identifier is not ours): everything still
            // in the window came after it, and APNs dropped it.
            while !entries.isEmpty { resolved.append(popFirst(.dropped)) }
            return resolved
        }
        while let first = entries.first, first.sequence < sequence { resolved.append(popFirst(.delivered)) }
        if !entries.isEmpty { resolved.append(popFirst(.answered(response.status))) }
        while !entries.isEmpty { resolved.append(popFirst(.dropped)) }
        return resolved
    }

    /// The connection closed: whatever is left is in doubt. Closes the window.
    package mutating func closed() -> [Resolved] {
        isClosed = true
        var resolved: [Resolved] = []
        while !entries.isEmpty { resolved.append(popFirst(.inDoubt)) }
        return resolved
    }

    private mutating func popFirst(_ resolution: Resolution) -> Resolved {
        let entry = entries.removeFirst()
        sequenceByIdentifier[entry.identifier] = nil
        return Resolved(ticket: entry.ticket, identifier: entry.identifier, resolution: resolution)
    }
}
