import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A real Kafka-protocol broker in its own process for the broker-process tests: noida-db (PyPI, installed
/// into `.tools/` by `scripts/install-noida.sh`), only its Kafka service, on a free loopback port, its data in a
/// directory of its own. Unlike librdkafka's mock cluster it creates topics through the admin API, stores
/// topic configs, keeps data and committed offsets across a restart, enforces the message size limit and
/// compacts. Not `Sendable`: a test drives it from its own task.
///
/// Its known faults, which the tests work with rather than around: it stops on SIGINT (SIGTERM is not
/// reliable), so ``stop()`` sends SIGINT; a member that dies without LeaveGroup is never expired, so a relay
/// is only ever stopped gracefully on it; writes acknowledged while it stops can be lost, so it is stopped
/// only once saved and idle (``waitUntilSaved(quiet:timeout:)``).
package final class NoidaBroker {
    /// The port it listens on, on 127.0.0.1; kept across ``stop()`` and ``start()``.
    package let port: Int
    /// Its data (`data/`) and its output (`output.txt`).
    package let directory: String
    private let executable: String
    private var process: ChildProcess?

    /// `kafka.brokers`' value for it.
    package var bootstrapServers: String { "127.0.0.1:\(port)" }
    package var dataDirectory: String { "\(directory)/data" }
    /// Everything it printed, across restarts.
    package var output: String { (try? String(contentsOfFile: "\(directory)/output.txt", encoding: .utf8)) ?? "" }
    package var isRunning: Bool { process?.isRunning ?? false }
    /// Its process, while it runs (for its CPU time).
    package var processIdentifier: Int32? { process?.processIdentifier }

    /// Starts the broker with an empty data directory; returns once it accepts connections. Fails (never
    /// skips) when noida-db is not installed.
    package init() throws {
        guard let executable = Self.findExecutable() else {
            throw LocalServerProcess.StartError(
                "noida-db is not installed: run scripts/install-noida.sh (`make test` does), or set NOIDA_DB to its binary")
        }
        self.executable = executable
        port = try LocalServerProcess.freePort()
        directory = scratchPath("noida")
        try FileManager.default.createDirectory(atPath: "\(directory)/data", withIntermediateDirectories: true)
        try start()
    }

    deinit {
        process?.signal(SIGKILL)
        if ProcessInfo.processInfo.environment["KEEP_RUN_TEST_DIR"] == nil { try? FileManager.default.removeItem(atPath: directory) }
    }

    /// Starts it (again, after ``stop()``) on the same port and data directory; returns once it accepts connections.
    package func start() throws {
        precondition(!isRunning, "noida-db is running already")
        let process = try LocalServerProcess.launch(
            executable,
            arguments: ["start", "--only", "kafka", "--kafka-port", "\(port)", "--host", "127.0.0.1", "--data-dir", dataDirectory],
            output: "\(directory)/output.txt")
        self.process = process
        // A restart may find the port held a moment longer by the process that just exited: 30 s.
        guard LocalServerProcess.waitUntilListening(process, port: port, attempts: 600) else {
            process.signal(SIGKILL)
            throw LocalServerProcess.StartError("noida-db did not listen on \(bootstrapServers): \(output.suffix(2_000))")
        }
    }

    /// Stops it with SIGINT (its Ctrl-C, which saves the data) and waits for it to exit.
    ///
    /// - Throws: when it is still running 30 s later (it is then killed).
    package func stop() async throws {
        guard let process, process.isRunning else { return }
        process.signal(SIGINT)
        guard await waitUntil(timeout: .seconds(30), every: .milliseconds(50), { !process.isRunning }) else {
            process.signal(SIGKILL)
            process.waitUntilExit()
            throw LocalServerProcess.StartError("noida-db did not stop within 30 s of SIGINT: \(output.suffix(2_000))")
        }
    }

    /// Waits (at most `timeout`) until its data file has not changed for `quiet`: it saves within about a second
    /// of a change, so by then everything acknowledged is on disk and no client has written since. A stop is
    /// safe only then (a write acknowledged while it stops may be lost).
    package func waitUntilSaved(quiet: Duration = .seconds(3), timeout: Duration = .seconds(60)) async -> Bool {
        let file = "\(dataDirectory)/kafka.json"
        return await waitUntil(timeout: timeout) {
            guard let modified = (try? FileManager.default.attributesOfItem(atPath: file))?[.modificationDate] as? Date else { return false }
            return Date().timeIntervalSince(modified) >= Double(quiet.components.seconds)
        }
    }

    /// `NOIDA_DB`, else the repository's `.tools/bin/noida-db`: the binary itself, never pip's `noida-db` script
    /// on PATH, which runs the binary as a child that a signal to the script does not reach.
    private static func findExecutable() -> String? {
        var candidates: [String] = []
        if let configured = ProcessInfo.processInfo.environment["NOIDA_DB"] { candidates.append(configured) }
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(repository.appendingPathComponent(".tools/bin/noida-db").path)
        return LocalServerProcess.firstExecutable(candidates)
    }
}
