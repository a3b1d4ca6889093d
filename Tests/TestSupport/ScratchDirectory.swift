import Foundation

/// A path for one test's files (certificates, configurations, logs), unique to the call: `prefix` and a UUID,
/// inside one directory per test process that the process removes as it exits. A test run then leaves nothing in
/// the system's temporary directory, where simulators' CA keys and relays' logs would otherwise pile up.
///
/// The path is not created: the code under test makes its own directories, as it does in production.
package func scratchPath(_ prefix: String) -> String {
    ScratchRoot.path + "/\(prefix)-\(UUID().uuidString)"
}

private enum ScratchRoot {
    /// Created and registered for removal on first use (a static `let` is initialised once, thread-safely).
    static let path: String = {
        let path = NSTemporaryDirectory() + "apns-relay-tests-\(ProcessInfo.processInfo.processIdentifier)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        // KEEP_RUN_TEST_DIR=1 keeps it, for the logs of a failed run.
        if ProcessInfo.processInfo.environment["KEEP_RUN_TEST_DIR"] == nil {
            atexit { try? FileManager.default.removeItem(atPath: ScratchRoot.path) }
        }
        return path
    }()
}
