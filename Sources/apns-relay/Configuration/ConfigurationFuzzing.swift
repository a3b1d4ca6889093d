import Foundation
import Synchronization

/// The configuration loader's fuzz entry: YAML text → `RelayConfiguration` through the same path as
/// `--config FILE` (one Yams parse, the key walk, swift-configuration's typed reads, every validation).
///
/// `make fuzz` builds this executable with `--sanitize=fuzzer -DFUZZING`; libFuzzer then provides
/// `main` and calls `LLVMFuzzerTestOneInput` below. The corpus in `Tests/Fuzz/Corpus/ConfigurationFuzz/`
/// is replayed through ``check(_:)`` by the CLI tests. (The loader lives in this executable target,
/// which other executables cannot link, so its fuzz entry lives here too.)
enum ConfigurationFuzzing {
    /// The loader reads a file: each input is written to this one, private to the process.
    static let scratchFile = NSTemporaryDirectory() + "apns-relay-config-fuzz-\(ProcessInfo.processInfo.processIdentifier).yaml"

    /// Every input loads or is refused with an error naming a key; a loaded configuration never
    /// shows a secret in its effective values. A broken rule stops the process.
    static func check(_ yaml: [UInt8]) {
        require(FileManager.default.createFile(atPath: scratchFile, contents: Data(yaml)), "cannot write \(scratchFile)")
        switch load(file: scratchFile) {
        case .success(let (configuration, knownKeys)):
            for (key, value) in configuration.effectiveValues {
                // An app's keys are read for the apps the file lists, so an empty load does not know them.
                let known = knownKeys.contains(key) || key == "apns.auth" || key.hasPrefix(ConfigurationLoader.propertiesPrefix)
                    || key.hasPrefix("apns.apps.")
                require(known, "effective value for an unknown key \(key)")
                let secret = ConfigurationLoader.isSecretKey(key)
                    || (key.hasPrefix(ConfigurationLoader.propertiesPrefix)
                        && RelayConfiguration.isSecretKafkaProperty(String(key.dropFirst(ConfigurationLoader.propertiesPrefix.count))))
                if secret { require(value == RelayConfiguration.redacted, "\(key) is shown") }
            }
        case .failure(let error):
            require(!error.key.isEmpty && !error.problem.isEmpty, "an error without key or problem: \(error)")
        }
    }

    /// Runs the async loader to completion from synchronous code (libFuzzer's callback).
    private static func load(file: String) -> Result<(RelayConfiguration, Set<String>), ConfigurationError> {
        let box = ResultBox()
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            let result: Result<(RelayConfiguration, Set<String>), ConfigurationError>
            do {
                let configuration = try await ConfigurationLoader.load(file: file, environment: [:], requireService: false)
                result = .success((configuration, await ConfigurationLoader.knownKeys()))
            } catch let error as ConfigurationError {
                result = .failure(error)
            } catch {
                result = .failure(ConfigurationError(key: "--config", problem: "\(error)"))
            }
            box.result.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return box.result.withLock { $0 } ?? .failure(ConfigurationError(key: "--config", problem: "the loader did not finish"))
    }

    private final class ResultBox: Sendable {
        let result = Mutex<Result<(RelayConfiguration, Set<String>), ConfigurationError>?>(nil)
    }

    private static func require(_ condition: Bool, _ message: @autoclosure () -> String) {
        if !condition { fatalError("invariant broken: \(message())") }
    }
}

#if FUZZING
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    ConfigurationFuzzing.check(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}
#endif
