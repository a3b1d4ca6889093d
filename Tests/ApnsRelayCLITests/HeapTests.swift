import Glibc
import Testing

@testable import apns_relay

@Suite struct HeapTests {
    /// Bytes this thread has had from jemalloc so far.
    private func allocatedByThisThread() -> UInt64? { Heap.read(UInt64.self, "thread.allocated") }

    @Test("malloc is jemalloc's: a megabyte from malloc shows in jemalloc's count of this thread's allocations")
    func mallocIsJemalloc() throws {
        let before = try #require(allocatedByThisThread(), "jemalloc is not linked")
        let block = try #require(malloc(1 << 20))
        let after = try #require(allocatedByThisThread())
        free(block)
        #expect(after - before >= 1 << 20)
    }

    @Test("jemalloc runs with the relay's options: two arenas, a background thread returning dirty pages after 1 s")
    func compiledOptionsApplied() throws {
        let settings = try #require(Heap.settings)
        #expect(Heap.compiledOptions == "narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0,background_thread:true")
        #expect(settings.arenas == 2)
        #expect(settings.backgroundThread)
        #expect(settings.dirtyDecayMilliseconds == 1000)
        #expect(settings.description.hasPrefix("jemalloc 5."))
    }
}
