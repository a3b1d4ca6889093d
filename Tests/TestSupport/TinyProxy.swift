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
    package struct StartError: Error, CustomStringConvertible {
        package let description: String
    }

    /// The port it listens on, on 127.0.0.1; kept across ``restart()``.
    package let port: Int
    /// Its configuration, log and output.
    package let directory: String
    private var process: Process

    /// `apns.proxy`'s value for it.
    package var url: String { "http://127.0.0.1:\(port)" }

    /// Starts tinyproxy and returns once it accepts connections. Fails (never skips) when tinyproxy is missing.
    package init(_ options: Options) throws {
        guard let executable = Self.executable() else {
            throw StartError(description: "tinyproxy is not installed: run `make deps` (scripts/install-deps.sh installs it)")
        }
        port = try Self.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyproxy-\(UUID().uuidString)").path
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
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Its log so far (one line per request, `CONNECT host:port` among them).
    package var log: String { (try? String(contentsOfFile: "\(directory)/tinyproxy.log", encoding: .utf8)) ?? "" }

    /// Kills it outright (SIGKILL): every tunnel through it breaks at once, as when a proxy crashes.
    package func crash() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// Stops it and waits for it to exit. SIGKILL: a child of the test process may inherit a signal mask that
    /// blocks SIGTERM, and a test proxy has nothing to finish.
    package func stop() {
        guard process.isRunning else { return }
        crash()
    }

    /// Starts it again on the same port with the same configuration, after ``crash()`` or ``stop()``.
    package func restart() throws {
        guard let executable = Self.executable() else { throw StartError(description: "tinyproxy is not installed: run `make deps`") }
        process = try Self.launch(executable, directory: directory)
        try waitUntilListening()
    }

    private static func executable() -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let candidates = path.split(separator: ":").map { "\($0)/tinyproxy" } + ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    private static func launch(_ executable: String, directory: String) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        // -d: the foreground, so the test owns the process and its exit.
        process.arguments = ["-d", "-c", "\(directory)/tinyproxy.conf"]
        let output = "\(directory)/output.txt"
        if !FileManager.default.fileExists(atPath: output) { _ = FileManager.default.createFile(atPath: output, contents: nil) }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return process
    }

    /// Polls the port (at most 10 s): tinyproxy writes no "ready" line.
    private func waitUntilListening() throws {
        for _ in 0..<200 {
            guard process.isRunning else { break }
            if Self.accepts(port: port) { return }
            usleep(50_000)
        }
        let output = (try? String(contentsOfFile: "\(directory)/output.txt", encoding: .utf8)) ?? ""
        throw StartError(description: "tinyproxy did not listen on 127.0.0.1:\(port): \(output.suffix(1_000))\(log.suffix(1_000))")
    }

    private static func accepts(port: Int) -> Bool {
        let socketDescriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socketDescriptor >= 0 else { return false }
        defer { close(socketDescriptor) }
        var address = loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    /// A port the kernel just handed out on 127.0.0.1 (bound, read, released).
    private static func freePort() throws -> Int {
        let socketDescriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socketDescriptor >= 0 else { throw StartError(description: "socket() failed: \(errno)") }
        defer { close(socketDescriptor) }
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw StartError(description: "bind() failed: \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socketDescriptor, $0, &length) }
        }
        guard named == 0 else { throw StartError(description: "getsockname() failed: \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr = in_addr(s_addr: UInt32(0x7F00_0001).bigEndian)
        return address
    }
}
