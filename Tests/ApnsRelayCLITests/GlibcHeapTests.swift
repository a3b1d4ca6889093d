#if canImport(Glibc)
import Glibc
#endif
import Testing

@testable import apns_relay

@Suite struct GlibcHeapTests {
    #if canImport(Glibc)
    /// glibc marks a block it served with pages of its own in the block's chunk header: bit 1
    /// (`IS_MMAPPED`) of the size word just before the block.
    static func hasOwnPages(_ block: UnsafeMutableRawPointer) -> Bool {
        (block - MemoryLayout<Int>.size).load(as: Int.self) & 2 != 0
    }

    /// With glibc's dynamic threshold, freeing a mapped 8 MiB block (a table outgrown, a fetch buffer)
    /// raises the threshold to 8 MiB, and the next 2 MiB table comes from an arena, among short-lived
    /// records whose holes stay resident. The fixed threshold keeps it on pages of its own.
    @Test func largeBlocksKeepPagesOfTheirOwnAfterLargerOnesAreFreed() throws {
        #expect(GlibcHeap.fixMmapThreshold(environment: [:]) == .fixed)
        let outgrown = try #require(malloc(8 << 20))
        free(outgrown)
        let table = try #require(malloc(2 << 20))
        defer { free(table) }
        #expect(Self.hasOwnPages(table))
        let record = try #require(malloc(4096))
        defer { free(record) }
        #expect(!Self.hasOwnPages(record))
    }
    #endif

    @Test func operatorsOwnSettingWins() {
        #expect(GlibcHeap.fixMmapThreshold(environment: ["MALLOC_MMAP_THRESHOLD_": "65536"]) == .leftToEnvironment)
    }
}
