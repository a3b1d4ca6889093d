import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A real HTTP CONNECT proxy for the `apns.proxy` tests: tinyproxy (Debian's package, installed by
/// `make deps`) in the foreground on a free loopback port, with its configuration and log in a
/// directory of its own. Not `Sendable`: a test drives it from its own task.
package final class TinyProxy {
    /// What the proxy lets through.
    package struct Options {
        /// The only ports `CONNECT` may reach (tinyproxy's `ConnectPort`); others are answered 403.
        package var connectPorts: [Int]
        /// `user` and `password` of Basic auth (tinyproxy's `BasicAuth`); without it anyone may connect.
        package var basicAuth: (user: String, password: String)?

        /// Creates the options.
        package init(connectPorts: [Int], basicAuth: (user: String, password: String)? = nil) {
            self.connectPorts = connectPorts
            self.basicAuth = basicAuth
        }
    }

    /// Why the proxy could not be started.
    package typealias StartError = LocalServerProcess.StartError

    /// The port it listens on, on 127.0.0.1; kept across ``restart()``.
    package let port: Int
    /// Its configuration, log and output.
    package let directory: String
    private var process: ChildProcess

    /// `apns.proxy`'s value for it.
    package var url: String { "http://127.0.0.1:\(port)" }

    /// Starts tinyproxy and returns once it accepts connections. Fails (never skips) when tinyproxy is missing.
    package init(_ options: Options) throws {
        guard let executable = Self.executable() else {
            throw StartError("tinyproxy is not installed: run `make deps` (scripts/install-deps.sh installs it)")
        }
        port = try LocalServerProcess.freePort()
        directory = scratchPath("tinyproxy")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var lines = [
            "Port \(port)", "Listen 127.0.0.1", "Timeout 60", "Allow 127.0.0.1", "LogLevel Info",
            "LogFile \"\(directory)/tinyproxy.log\"", "PidFile \"\(directory)/tinyproxy.pid\"",
        ]
        lines += options.connectPorts.map { "ConnectPort \($0)" }
        if let auth = options.basicAuth { lines.append("BasicAuth \(auth.user) \(auth.password)") }
        try (lines.joined(separator: "\n") + "\n").write(toFile: "\(directory)/tinyproxy.conf", atomically: true, encoding: .utf8)
        process = try Self.launch(executable, directory: directory)
        try waitUntilListening()
    }

    deinit {
        process.signal(SIGKILL)
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Its log so far (one line per request, `CONNECT host:port` among them).
    package var log: String { (try? String(contentsOfFile: "\(directory)/tinyproxy.log", encoding: .utf8)) ?? "" }

    /// Kills it outright (SIGKILL): every tunnel through it breaks at once, as when a proxy crashes.
    package func crash() {
        process.signal(SIGKILL)
        process.waitUntilExit()
    }

    /// Stops it and waits for it to exit. SIGKILL: a test proxy has nothing to finish.
    package func stop() {
        guard process.isRunning else { return }
        crash()
    }

    /// Starts it again on the same port with the same configuration, after ``crash()`` or ``stop()``.
    package func restart() throws {
        guard let executable = Self.executable() else { throw StartError("tinyproxy is not installed: run `make deps`") }
        process = try Self.launch(executable, directory: directory)
        try waitUntilListening()
    }

    private static func executable() -> String? {
        LocalServerProcess.firstExecutable(LocalServerProcess.onPath("tinyproxy") + ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"])
    }

    private static func launch(_ executable: String, directory: String) throws -> ChildProcess {
        // -d: the foreground, so the test owns the process and its exit.
        try LocalServerProcess.launch(executable, arguments: ["-d", "-c", "\(directory)/tinyproxy.conf"], output: "\(directory)/output.txt")
    }

    /// Polls the port (at most 10 s): tinyproxy writes no "ready" line.
    private func waitUntilListening() throws {
        guard !LocalServerProcess.waitUntilListening(process, port: port) else { return }
        let output = (try? String(contentsOfFile: "\(directory)/output.txt", encoding: .utf8)) ?? ""
        throw StartError("tinyproxy did not listen on 127.0.0.1:\(port): \(output.suffix(1_000))\(log.suffix(1_000))")
    }
}
