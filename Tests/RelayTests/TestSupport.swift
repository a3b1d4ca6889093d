@testable import Relay

/// SplitMix64: a tiny seeded generator so every random case can be replayed from its seed.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

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
