@testable import Relay
@_exported import TestSupport

func token(_ number: Int) -> String {
    let hex = String(number, radix: 16)
    return String(repeating: "0", count: 64 - hex.count) + hex
}

extension SequencerOutcome {
    var appliedState: UserBadgeState? {
        if case .applied(_, let state, _) = self { return state }
        return nil
    }

    var isDuplicate: Bool {
        if case .duplicate = self { return true }
        return false
    }
}

/// Tests write keys and values as arrays; the relay reads them as slices of a consumed batch's bytes.
func slice(_ bytes: [UInt8]) -> ArraySlice<UInt8> { bytes[...] }

extension DispatchStep {
    /// The step's send as a list (none or one), as the dispatcher tests compare it.
    var send: [DeviceDispatch<Payload>] { dispatch.map { [$0] } ?? [] }
}

extension SendWindow {
    /// ``enqueue(_:mayWrite:into:)`` with a fresh step.
    mutating func enqueue(_ notification: DeviceNotification<Payload>, mayWrite: Bool) -> Step {
        var step = Step()
        enqueue(notification, mayWrite: mayWrite, into: &step)
        return step
    }

    /// ``answered(_:mayWrite:into:)`` with a fresh step.
    mutating func answered(_ dispatch: DeviceDispatch<Payload>, mayWrite: Bool) -> Step {
        var step = Step()
        answered(dispatch, mayWrite: mayWrite, into: &step)
        return step
    }
}
