// Shared pieces of the relay harness: arguments, child processes, /proc samples.
import Foundation
import Logging
import Synchronization

func argument(_ name: String, in arguments: [String]) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

func intArgument(_ name: String, _ defaultValue: Int, in arguments: [String]) -> Int {
    argument(name, in: arguments).flatMap(Int.init) ?? defaultValue
}

func tokenHex(_ index: Int) -> String {
    let hex = String(index, radix: 16)
    return String(repeating: "0", count: 64 - hex.count) + hex
}

func makeQuietLogger() -> Logger {
    var logger = Logger(label: "relay-harness")
    logger.logLevel = .critical
    return logger
}

/// A child process with its standard input kept open (closing it stops `cluster` children).
struct Child {
    let process: Process
    let input: Pipe

    static func start(_ executable: String, _ arguments: [String], output: FileHandle?) throws -> (Child, Pipe?) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let input = Pipe()
        process.standardInput = input
        var pipe: Pipe?
        if let output {
            process.standardOutput = output
            process.standardError = output
        } else {
            pipe = Pipe()
            process.standardOutput = pipe
        }
        try process.run()
        return (Child(process: process, input: input), pipe)
    }

    /// Reads the child's output until a line satisfies `match`.
    static func firstLine(of pipe: Pipe, where match: (String) -> Bool) -> String? {
        var buffered = ""
        while true {
            let data = pipe.fileHandleForReading.availableData
            if data.isEmpty { return nil }
            buffered += String(decoding: data, as: UTF8.self)
            while let newline = buffered.firstIndex(of: "\n") {
                let line = String(buffered[..<newline])
                buffered = String(buffered[buffered.index(after: newline)...])
                if match(line) { return line }
            }
        }
    }
}

/// Fields of /proc/PID: resident memory (current, peak) in KiB and CPU seconds used.
struct ProcessSample {
    var rssKiB = 0
    var peakKiB = 0
    var cpuSeconds = 0.0

    init(pid: Int32) {
        if let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) {
            for line in status.split(separator: "\n") {
                let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                if line.hasPrefix("VmRSS:"), parts.count > 1 { rssKiB = Int(parts[1]) ?? 0 }
                if line.hasPrefix("VmHWM:"), parts.count > 1 { peakKiB = Int(parts[1]) ?? 0 }
            }
        }
        if let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
           let close = stat.lastIndex(of: ")") {
            // Fields after the command name: state is 3rd overall; utime and stime are 14th and 15th.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) {
                cpuSeconds = (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
            }
        }
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}


/// A set of strings filled from a Kafka reader's callback.
final class LockedPairs: Sendable {
    private let values = Mutex<Set<String>>([])
    func insert(_ value: String) { values.withLock { _ = $0.insert(value) } }
    var all: Set<String> { values.withLock { $0 } }
}

/// The last value per key, filled from a Kafka reader's callback.
final class LockedValues: Sendable {
    private let values = Mutex<[String: String]>([:])
    func set(_ key: String, _ value: String) { values.withLock { $0[key] = value } }
    var all: [String: String] { values.withLock { $0 } }
}

/// The directory a run works in (`--work`, or a new one under the temporary directory).
func workDirectory(_ arguments: [String], prefix: String) throws -> String {
    let work = argument("--work", in: arguments) ?? FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
    return work
}

/// The `apns-relay` binary built next to this one (same configuration); exits 2 when missing.
func relayBinaryPath() -> String {
    let binDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent().path
    let relayBinary = "\(binDirectory)/apns-relay"
    guard FileManager.default.isExecutableFile(atPath: relayBinary) else {
        print("relay-harness: \(relayBinary) not found; build the apns-relay product in the same configuration first")
        exit(2)
    }
    return relayBinary
}

/// Starts `relay-harness cluster` as a child and returns it, its output and its bootstrap address.
func startClusterProcess(partitions: Int, brokers: Int, resultsPartitions: Int? = nil) throws -> (child: Child, output: Pipe, bootstrap: String) {
    let (child, output) = try Child.start(CommandLine.arguments[0], [
        "cluster", "--partitions", "\(partitions)", "--brokers", "\(brokers)", "--results-partitions", "\(resultsPartitions ?? partitions)",
    ], output: nil)
    guard let output, let ready = Child.firstLine(of: output, where: { $0.hasPrefix("READY ") }) else {
        print("relay-harness: the cluster process did not start")
        exit(1)
    }
    return (child, output, String(ready.dropFirst("READY ".count)))
}
