package import APNsCore

/// The seeded generator of the relay tests and the relay harness: the engine's own SplitMix64, so
/// every random case replays from its seed.
package typealias SeededGenerator = SplitMix64
