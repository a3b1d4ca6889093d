#if canImport(Glibc)
import Glibc
#endif

/// The relay's use of glibc's heap: a fixed mmap threshold, and trimming what was freed.
///
/// glibc serves an allocation at or above its mmap threshold with pages of its own, returned to the
/// kernel at `free`. The threshold starts at 128 KiB but is dynamic: freeing such a block raises it to the
/// block's size (up to 32 MiB). The relay's large blocks are its tables (badge state, device registry, growing
/// by half at a time) and librdkafka's fetch buffers, so after the first few frees every table landed in the
/// arenas among short-lived records, whose holes the arenas keep. With 1,000,000 users and 1,000,000 devices
/// that held 365-387 MiB once settled where the data needs ~205 (`relay-harness restore`, docs/BENCHMARKS.md).
/// A fixed threshold keeps large blocks out of the arenas. The functions are looked up at run time because
/// Swift's Glibc module does not declare them (other C libraries lack them: then nothing is done).
enum GlibcHeap {
    /// Blocks at least this large get pages of their own: the relay's tables and fetch buffers, never its
    /// per-notification allocations (those are at most a few KiB).
    static let mmapThreshold: Int32 = 1 << 20

    /// glibc's own environment variable for the threshold: when an operator set it, glibc applied it.
    static let thresholdVariable = "MALLOC_MMAP_THRESHOLD_"

    /// What ``fixMmapThreshold(environment:)`` did.
    enum ThresholdOutcome: Equatable {
        case fixed
        case leftToEnvironment
        case unavailable
    }

    /// Fixes the mmap threshold at ``mmapThreshold`` (which also ends its dynamic growth), unless the
    /// environment sets glibc's own variable. Call before the heap grows.
    @discardableResult
    static func fixMmapThreshold(environment: [String: String]) -> ThresholdOutcome {
        if environment[thresholdVariable] != nil { return .leftToEnvironment }
        guard let mallopt = function("mallopt", as: Mallopt.self) else { return .unavailable }
        // M_MMAP_THRESHOLD in <malloc.h>.
        return mallopt(-3, mmapThreshold) == 1 ? .fixed : .unavailable
    }

    /// Hands the free memory of every arena back to the kernel (`malloc_trim(0)`); false without glibc.
    @discardableResult
    static func trim() -> Bool {
        guard let trim = function("malloc_trim", as: MallocTrim.self) else { return false }
        _ = trim(0)
        return true
    }

    private typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
    private typealias MallocTrim = @convention(c) (Int) -> Int32

    private static func function<Function>(_ name: String, as type: Function.Type) -> Function? {
        #if canImport(Glibc)
        // RTLD_DEFAULT is the null handle in glibc: search every loaded object.
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }
        return unsafeBitCast(symbol, to: type)
        #else
        return nil
        #endif
    }
}
