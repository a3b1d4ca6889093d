@testable import RelayCore
@_exported import TestSupport


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
    /// ``enqueue(_:maySend:into:)`` with a fresh step.
    mutating func enqueue(_ notification: DeviceNotification<Payload>, maySend: Bool) -> Step {
        var step = Step()
        enqueue(notification, maySend: maySend, into: &step)
        return step
    }

    /// ``answered(_:maySend:into:)`` with a fresh step.
    mutating func answered(_ dispatch: DeviceDispatch<Payload>, maySend: Bool) -> Step {
        var step = Step()
        answered(dispatch, maySend: maySend, into: &step)
        return step
    }
}

/// Hex of `count` random bytes, lower case.
func randomHex(bytes count: Int, using random: inout SeededGenerator) -> String {
    (0..<count).map { _ in
        let byte = UInt8.random(in: 0...255, using: &random)
        return (byte < 16 ? "0" : "") + String(byte, radix: 16)
    }.joined()
}
