#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// A fuzz target: one `check` that stops the process (``Fuzz/require(_:_:file:line:)``) when an input
/// breaks a rule. Built without the fuzzer, `@main extension Target {}` makes it a corpus replayer.
public protocol FuzzTarget {
    /// Runs one input through the code under test and checks its rules.
    static func check(_ bytes: [UInt8])
}

extension FuzzTarget {
    /// The corpus replayer (see ``Fuzz/replay(_:check:)``).
    public static func main() { Fuzz.replay(check: check) }

    /// libFuzzer's callback body: `LLVMFuzzerTestOneInput` returns this.
    public static func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
        check(Fuzz.bytes(data, size))
        return 0
    }
}

/// What every fuzz target shares: turning libFuzzer's buffer into bytes, stopping on a broken
/// invariant, and replaying a corpus when the target is built without `-sanitize=fuzzer`.
///
/// A fuzz target is an executable in `Tests/Fuzz/<Name>/` with one `check(_ bytes: [UInt8])`:
/// built by `make fuzz` (`--sanitize=fuzzer -DFUZZING`) its `LLVMFuzzerTestOneInput` calls `check`;
/// built normally its `main` replays the files it is given through the same `check`.
public enum Fuzz {
    /// libFuzzer's input as bytes.
    public static func bytes(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
        guard let data, size > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: data, count: size))
    }

    /// Stops the process when an invariant does not hold: libFuzzer records the input as a crash,
    /// the replayer exits non-zero.
    public static func require(_ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) {
        if !condition { fatalError("invariant broken: \(message())", file: file, line: line) }
    }

    /// The corpus replayer: runs `check` over every file named in `arguments` (a directory stands for
    /// the files in it, in name order), prints how many inputs it replayed, exits 0, or 2 when there
    /// was nothing to replay. A broken invariant stops it earlier (see ``require(_:_:file:line:)``).
    public static func replay(_ arguments: [String] = Array(CommandLine.arguments.dropFirst()), check: ([UInt8]) -> Void) -> Never {
        let files = corpusFiles(arguments)
        guard !files.isEmpty else {
            FileHandle.standardError.write(Data("usage: \(CommandLine.arguments.first ?? "fuzz-target") FILE_OR_DIRECTORY...\n".utf8))
            exit(2)
        }
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else {
                FileHandle.standardError.write(Data("cannot read \(file)\n".utf8))
                exit(2)
            }
            FileHandle.standardError.write(Data("replaying \(file)\n".utf8))
            check(Array(data))
        }
        print("replayed \(files.count) inputs")
        exit(0)
    }

    /// The files named by `paths`, directories expanded to their regular files in name order.
    public static func corpusFiles(_ paths: [String]) -> [String] {
        var files: [String] = []
        for path in paths {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { continue }
            if isDirectory.boolValue {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
                files += names.filter { !$0.hasPrefix(".") }.sorted().map { "\(path)/\($0)" }
            } else {
                files.append(path)
            }
        }
        return files
    }
}
