// Shared pieces of the relay harness: arguments, child processes, /proc samples.
import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Kafka
import Logging
import Synchronization

func argument(_ name: String, in arguments: [String]) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

/// Every `--relay-kafka-property KEY=VALUE` (repeatable): librdkafka properties for the relay's own clients.
func relayKafkaProperties(in arguments: [String]) -> [(String, String)] {
    zip(arguments, arguments.dropFirst()).compactMap { flag, value in
        guard flag == "--relay-kafka-property", let equals = value.firstIndex(of: "=") else { return nil }
        return (String(value[..<equals]), String(value[value.index(after: equals)...]))
    }
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

/// A process's CPU time and voluntary context switches by kind of thread (/proc/<pid>/task): where the
/// relay's CPU goes (librdkafka's broker threads, the Kafka poll threads, the event loops, Swift's pool)
/// and how often its threads go to sleep, without a profiler.
struct ThreadSample {
    var cpuSeconds: [String: Double] = [:]
    var sleeps: [String: Int] = [:]

    static let kinds = ["librdkafka brokers", "librdkafka main", "Kafka poll threads", "event loops", "Swift pool", "other"]

    static func kind(of name: Substring) -> String {
        if name.hasPrefix("rdk:broker") { return "librdkafka brokers" }
        if name.hasPrefix("rdk:") { return "librdkafka main" }
        if name.hasPrefix("kafka-") { return "Kafka poll threads" }
        if name.hasPrefix("NIO-") { return "event loops" }
        // Dispatch's root queues (com.apple.root.default-qos and its overcommit twin, cut to 15 bytes).
        if name.contains("qos") { return "Swift pool" }
        return "other"
    }

    init() {}

    init(pid: Int32) {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        for task in tasks {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/stat", encoding: .utf8),
                  let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")"),
                  let status = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/status", encoding: .utf8)
            else { continue }
            let kind = Self.kind(of: stat[stat.index(after: open)..<close])
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) {
                cpuSeconds[kind, default: 0] += (user + system) / ticks
            }
            if let line = status.split(separator: "\n").first(where: { $0.hasPrefix("voluntary_ctxt_switches:") }),
               let count = line.split(separator: "\t").last.flatMap({ Int($0.trimmingCharacters(in: .whitespaces)) }) {
                sleeps[kind, default: 0] += count
            }
        }
    }

    /// What happened between `earlier` and this sample (threads that ended meanwhile are left out).
    func since(_ earlier: ThreadSample) -> ThreadSample {
        var difference = ThreadSample()
        for kind in Self.kinds {
            difference.cpuSeconds[kind] = max(0, (cpuSeconds[kind] ?? 0) - (earlier.cpuSeconds[kind] ?? 0))
            difference.sleeps[kind] = max(0, (sleeps[kind] ?? 0) - (earlier.sleeps[kind] ?? 0))
        }
        return difference
    }

    /// CPU µs and sleeps per notification, by kind of thread.
    func report(notifications: Int) -> String {
        let count = Double(max(1, notifications))
        let parts = Self.kinds.compactMap { kind -> String? in
            let seconds = cpuSeconds[kind] ?? 0
            guard seconds > 0 || (sleeps[kind] ?? 0) > 0 else { return nil }
            return String(format: "%@ %.1f µs (%.2f sleeps)", kind, seconds * 1e6 / count, Double(sleeps[kind] ?? 0) / count)
        }
        let total = String(format: "%.1f µs, %.2f sleeps", cpuSeconds.values.reduce(0, +) * 1e6 / count, Double(sleeps.values.reduce(0, +)) / count)
        return "\(total): " + parts.joined(separator: ", ")
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

/// Counts per key, filled from a Kafka reader's callback.
final class LockedCounts: Sendable {
    private let counts = Mutex<[String: Int]>([:])
    func add(_ key: String) { counts.withLock { $0[key, default: 0] += 1 } }
    var all: [String: Int] { counts.withLock { $0 } }
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
func startClusterProcess(partitions: Int, brokers: Int, resultsPartitions: Int? = nil, devicesPartitions: Int? = nil) throws -> (child: Child, output: Pipe, bootstrap: String) {
    let (child, output) = try Child.start(CommandLine.arguments[0], [
        "cluster", "--partitions", "\(partitions)", "--brokers", "\(brokers)", "--results-partitions", "\(resultsPartitions ?? partitions)",
        "--devices-partitions", "\(devicesPartitions ?? max(16, partitions / 2))",
    ], output: nil)
    guard let output, let ready = Child.firstLine(of: output, where: { $0.hasPrefix("READY ") }) else {
        print("relay-harness: the cluster process did not start")
        exit(1)
    }
    return (child, output, String(ready.dropFirst("READY ".count)))
}

/// Registers `devicesPerUser` devices for each of `users` users: user u's devices are the tokens
/// `tokenHex(u * devicesPerUser + d + 1)`. Returns once every registration is acknowledged.
func registerDevices(_ producer: KafkaProducer, users: Int, devicesPerUser: Int) async throws {
    for user in 0..<users {
        for device in 0..<devicesPerUser {
            _ = try await producer.enqueue(KafkaRecord(topic: "push.devices", key: Array(tokenHex(user * devicesPerUser + device + 1).utf8),
                value: Array("{\"user\":\"u-\(user)\",\"topic\":\"com.example.app\",\"environment\":\"production\",\"registered_at\":1}".utf8)))
        }
    }
    try await producer.flush()
}

/// The benchmarks' event: an alert and a badge increment for user `user`, keyed by the user.
func benchEvent(id: String, user: Int, seq: Int) -> KafkaRecord {
    // The payload names the event (`e`): a device log's line says which event it delivered.
    let value = "{\"id\":\"\(id)\",\"user\":\"u-\(user)\",\"seq\":\(seq),\"badge\":{\"increment\":1},\"apns\":{\"payload\":{\"aps\":{\"alert\":{\"title\":\"Hi\",\"body\":\"Message \(seq)\"},\"sound\":\"default\"},\"e\":\"\(id)\"}}}"
    return KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8), value: Array(value.utf8))
}

/// W3C trace context headers as an OpenTelemetry producer writes them: a `traceparent` of its own per event, and a
/// `tracestate` of two vendors.
func benchTraceHeaders(_ index: Int, sampled: Bool = true) -> [KafkaHeader] {
    [KafkaHeader(key: "traceparent", value: String(format: "00-%032x-%016x-%@", index + 1, index + 1, sampled ? "01" : "00")),
     KafkaHeader(key: "tracestate", value: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")]
}

/// Starts `apns-relay simulator` (HTTP/2 over TLS, 1,000 streams per connection) verifying JWTs
/// against a new key written to `work/key.p8` / `work/key.pub.pem`; returns it and its port.
func startSimulatorProcess(relayBinary: String, work: String, maxStreams: Int = 1000, deviceLog: String? = nil) throws -> (child: Child, port: Int) {
    let key = P256.Signing.PrivateKey()
    try key.pemRepresentation.write(toFile: "\(work)/key.p8", atomically: true, encoding: .utf8)
    try key.publicKey.pemRepresentation.write(toFile: "\(work)/key.pub.pem", atomically: true, encoding: .utf8)
    let (simulator, output) = try Child.start(relayBinary, [
        "simulator", "--http2-port", "0", "--cert-dir", "\(work)/certs", "--jwt-public-key", "\(work)/key.pub.pem", "--max-streams", "\(maxStreams)",
    ] + (deviceLog.map { ["--device-log", $0] } ?? []), output: nil)
    guard let output, let announced = Child.firstLine(of: output, where: { $0.contains("127.0.0.1:") }),
          let portText = announced.split(separator: ":").dropFirst().first?.prefix(while: \.isNumber), let port = Int(portText) else {
        print("relay-harness: the simulator did not start"); exit(1)
    }
    return (simulator, port)
}

/// Writes `work/relay.yaml`: `apns-relay run` against the cluster and a simulator whose CA is in
/// `work/certs` and which verifies JWTs signed with `work/key.p8` (see
/// ``startSimulatorProcess(relayBinary:work:)``), logging warnings only, metrics on `httpPort` (0: a free one).
/// `kafkaProperties` go to `kafka.properties`, `relaySettings` to `relay`; the defaults of
/// `connections` and `maxInFlight` are the contract's; `http2Client` is `apns.http2_client` (`nil`: the relay's default).
func writeRelayConfiguration(
    work: String, bootstrap: String, simulatorPort: Int, connections: Int = 2, maxInFlight: Int = 10_000, http2Client: String? = nil, httpPort: Int = 0,
    kafkaProperties: [(String, String)] = [], relaySettings: [(String, String)] = [], logLevel: String = "warning",
    logFormat: String = "text", otlpEndpoint: String? = nil
) throws {
    let properties = kafkaProperties.isEmpty ? "" : "\n  properties:" + kafkaProperties.map { "\n    \($0.0): \($0.1)" }.joined()
    let relay = relaySettings.map { "\n  \($0.0): \($0.1)" }.joined()
    try """
        kafka:
          brokers: \(bootstrap)\(properties)
        apns:
          endpoint: 127.0.0.1:\(simulatorPort)
          ca_file: \(work)/certs/ca.pem
          topic: com.example.app
          connections: \(connections)\(http2Client.map { "\n  http2_client: \($0)" } ?? "")
          auth:
            key_file: \(work)/key.p8
            key_id: ABCDE12345
            team_id: TEAM123456
        relay:
          http_port: \(httpPort)
          max_in_flight: \(maxInFlight)\(relay)
        log:
          level: \(logLevel)
          format: \(logFormat)
        \(otlpEndpoint.map { "tracing:\n  otlp_endpoint: \($0)\n" } ?? "")
        """.write(toFile: "\(work)/relay.yaml", atomically: true, encoding: .utf8)
}

/// Starts `apns-relay run --config work/relay.yaml`, its output going to `work/relay.log`.
func startRelayProcess(relayBinary: String, work: String) throws -> Child {
    _ = FileManager.default.createFile(atPath: "\(work)/relay.log", contents: nil)
    let relayLog = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(work)/relay.log"))
    return try Child.start(relayBinary, ["run", "--config", "\(work)/relay.yaml"], output: relayLog).0
}

/// Fields of a result record read straight from its bytes: the harness reads millions of them, and
/// a JSON parser per record would cost more CPU than the relay it measures.
enum RecordScan {
    static let latencyField = Array("\"latency_ms\":".utf8)
    static let statusField = Array("\"status\":\"".utf8)
    static let reasonField = Array("\"reason\":\"".utf8)
    static let eventIDField = Array("\"event_id\":\"".utf8)
    static let tokenField = Array("\"token\":\"".utf8)

    /// Where the value after the first `needle` starts.
    static func range(after needle: [UInt8], in bytes: [UInt8]) -> Int? {
        guard bytes.count >= needle.count else { return nil }
        outer: for start in 0...(bytes.count - needle.count) {
            for offset in 0..<needle.count where bytes[start + offset] != needle[offset] { continue outer }
            return start + needle.count
        }
        return nil
    }

    /// The decimal digits right after `needle`, or `nil`.
    static func integer(after needle: [UInt8], in bytes: [UInt8]) -> Int? {
        guard let start = range(after: needle, in: bytes) else { return nil }
        return digits(in: bytes[start...])
    }

    /// The decimal number at the start of `bytes`, or `nil` when it does not start with a digit.
    static func digits(in bytes: ArraySlice<UInt8>) -> Int? {
        var value = 0
        var index = bytes.startIndex
        while index < bytes.endIndex, bytes[index] >= 48, bytes[index] <= 57 {
            value = value &* 10 &+ Int(bytes[index] - 48)
            index += 1
        }
        return index > bytes.startIndex ? value : nil
    }

    /// The string after `needle`, up to the next quote.
    static func string(after needle: [UInt8], in bytes: [UInt8]) -> String? {
        guard let start = range(after: needle, in: bytes), let end = bytes[start...].firstIndex(of: 34) else { return nil }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }
}

/// Whether the relay's `/readyz` answers 200.
func relayIsReady(port: Int) async -> Bool {
    guard let url = URL(string: "http://127.0.0.1:\(port)/readyz"),
          let (_, response) = try? await URLSession.shared.data(from: url) else { return false }
    return (response as? HTTPURLResponse)?.statusCode == 200
}
