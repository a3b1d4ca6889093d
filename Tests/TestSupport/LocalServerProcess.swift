import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What the test servers started as child processes (tinyproxy, noida-db) share: a free loopback port,
/// a launch whose output goes to a file, and the wait until the port accepts connections.
package enum LocalServerProcess {
    /// Why a server could not be started.
    package struct StartError: Error, CustomStringConvertible {
        package let description: String

        package init(_ description: String) { self.description = description }
    }

    /// Starts `executable` with its stdout and stderr appended to `output` (created when missing), stdin from
    /// /dev/null, this process's environment, and a clean signal state (see ``ChildProcess``).
    static func launch(_ executable: String, arguments: [String], output: String) throws -> ChildProcess {
        try ChildProcess(executable, arguments: arguments, output: output)
    }

    /// Polls `port` every 50 ms until it accepts a connection; `false` once the process exited or
    /// `attempts` polls passed (the servers write no "ready" line to wait for).
    static func waitUntilListening(_ process: ChildProcess, port: Int, attempts: Int = 200) -> Bool {
        for _ in 0..<attempts {
            guard process.isRunning else { return false }
            if accepts(port: port) { return true }
            usleep(50_000)
        }
        return false
    }

    /// Whether something accepts TCP connections on 127.0.0.1:`port`.
    package static func accepts(port: Int) -> Bool {
        let socketDescriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socketDescriptor >= 0 else { return false }
        defer { close(socketDescriptor) }
        var address = loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    /// A port the kernel just handed out on 127.0.0.1 (bound, read, released).
    package static func freePort() throws -> Int {
        let socketDescriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socketDescriptor >= 0 else { throw StartError("socket() failed: \(errno)") }
        defer { close(socketDescriptor) }
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw StartError("bind() failed: \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socketDescriptor, $0, &length) }
        }
        guard named == 0 else { throw StartError("getsockname() failed: \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// The first of `candidates` (absolute paths) that is an executable file.
    package static func firstExecutable(_ candidates: [String]) -> String? {
        candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// `name` in each folder of PATH, in PATH's order.
    package static func onPath(_ name: String) -> [String] {
        (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/\(name)" }
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr = in_addr(s_addr: UInt32(0x7F00_0001).bigEndian)
        return address
    }
}

/// A server started by a test, with nothing blocked and SIGINT and SIGTERM at their defaults. Foundation's
/// `Process` hands its child the signal mask of the thread that spawns it, and the test process's threads
/// block most signals: a server started that way never sees the SIGINT or SIGTERM that should stop it.
/// Not `Sendable`: one test drives it.
final class ChildProcess {
    let processIdentifier: pid_t
    private var exitStatus: Int32?

    init(_ executable: String, arguments: [String], output: String) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var nothing = sigset_t()
        sigemptyset(&nothing)
        posix_spawnattr_setsigmask(&attributes, &nothing)
        var stopSignals = sigset_t()
        sigemptyset(&stopSignals)
        sigaddset(&stopSignals, SIGINT)
        sigaddset(&stopSignals, SIGTERM)
        posix_spawnattr_setsigdefault(&attributes, &stopSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
        guard spawned == 0 else {
            throw LocalServerProcess.StartError("could not start \(executable): \(String(cString: strerror(spawned)))")
        }
        processIdentifier = pid
    }

    /// Whether it has not exited yet (reaps it once it has).
    var isRunning: Bool {
        guard exitStatus == nil else { return false }
        var status: Int32 = 0
        guard waitpid(processIdentifier, &status, WNOHANG) == processIdentifier else { return true }
        exitStatus = status
        return false
    }

    func signal(_ signal: Int32) { if isRunning { kill(processIdentifier, signal) } }

    /// Blocks until it exits.
    func waitUntilExit() {
        guard exitStatus == nil else { return }
        var status: Int32 = 0
        while waitpid(processIdentifier, &status, 0) == -1 && errno == EINTR {}
        exitStatus = status
    }
}
