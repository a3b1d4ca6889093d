import CJemalloc

/// The relay's heap allocator: jemalloc, linked into `apns-relay` (the CJemalloc target) with the options in
/// `malloc_conf`, in place of glibc's malloc for the whole process.
///
/// The relay allocates and frees many short-lived records from several threads: glibc's arenas keep their holes
/// resident (containing that takes a fixed mmap threshold and a periodic `malloc_trim`), jemalloc returns them on
/// its own and costs less CPU per notification (docs/BENCHMARKS.md has the comparison).
enum Heap {
    /// What jemalloc runs with, read back through `mallctl` (so a wrong link, or an operator's `MALLOC_CONF`, shows
    /// in the start-up log); `nil` when jemalloc is not the allocator.
    struct Settings: Equatable, CustomStringConvertible {
        var version: String
        var arenas: UInt32
        var backgroundThread: Bool
        var dirtyDecayMilliseconds: Int

        var description: String {
            "jemalloc \(version), \(arenas) arenas, background thread \(backgroundThread ? "on" : "off"), dirty pages returned after \(dirtyDecayMilliseconds) ms"
        }
    }

    /// The options compiled into the binary (`MALLOC_CONF` is applied after them).
    static var compiledOptions: String { String(cString: malloc_conf) }

    static var settings: Settings? {
        guard let version = read(UnsafePointer<CChar>?.self, "version").flatMap({ $0 }).map({ String(cString: $0) }),
              let arenas = read(UInt32.self, "opt.narenas"),
              let backgroundThread = read(Bool.self, "background_thread"),
              let dirtyDecay = read(Int.self, "opt.dirty_decay_ms")
        else { return nil }
        return Settings(version: version, arenas: arenas, backgroundThread: backgroundThread, dirtyDecayMilliseconds: dirtyDecay)
    }

    /// A `mallctl` value of `type` (an option, a statistic), `nil` when jemalloc does not answer with one.
    static func read<Value>(_ type: Value.Type, _ name: String) -> Value? {
        withUnsafeTemporaryAllocation(of: Value.self, capacity: 1) { value in
            var size = MemoryLayout<Value>.size
            guard mallctl(name, value.baseAddress, &size, nil, 0) == 0, size == MemoryLayout<Value>.size else { return nil }
            return value[0]
        }
    }
}
