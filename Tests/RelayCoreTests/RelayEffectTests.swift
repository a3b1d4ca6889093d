import Testing
@testable import RelayCore

/// The engine's effects are values in arrays on every input's path: their width is a cost of every input.
@Suite("Relay effects")
struct RelayEffectTests {
    /// An effect is as wide as its widest case, and every input's effects are arrays of them: the rare, wide cases
    /// (dead letters, failed tokens, wrong environments) are boxed, so a changelog append is the widest.
    @Test func anEffectIsNoWiderThanAChangelogAppend() {
        #expect(MemoryLayout<RelayEffect>.size <= 72)
    }
}
