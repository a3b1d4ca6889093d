// apns-bench: notifications/s from the APNs supervisor to a standalone simulator process (TLS, HTTP/2),
// compared with h2load and aioapns against the same simulator endpoint with the same payload; and the
// supervisor over the legacy binary interface (format 2, client certificate) to the same simulator process,
// as a ratio to the HTTP/2 figure of the same run.
//
//   apns-bench [--count N] [--connections C] [--tokens T] [--concurrency K] [--aioapns-count N]
//              [--client nio|nghttp2|both] [--skip-h2load] [--skip-aioapns] [--skip-binary]
//   apns-bench simulator [--http2-port N] [--cert-dir DIR] [--jwt-public-key FILE] [--max-streams N] [--threads N]
//
// The second form runs the simulator alone (until stdin closes); the first starts it as a subprocess.
// `--client` picks the supervisor's HTTP/2 client: swift-nio-http2 (`nio`), nghttp2 (`nghttp2`), or
// both (the default), one after the other against the same simulator process, with their ratios to each other
// and to h2load.
import APNs
import APNsNGHTTP2
import APNsSimulator
import Crypto
import Foundation
import Logging
import NIOCore
import NIOPosix

let topic = "com.example.app"
let keyID = "ABCDE12345"
let teamID = "TEAM123456"
let payloadJSON = #"{"aps":{"alert":{"title":"Hi","body":"You have mail"},"badge":1,"sound":"default"}}"#

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

/// `apns-bench simulator ...`: the standalone simulator process.
func runSimulator(_ arguments: [String]) async throws {
    var options = SimulatorOptions()
    options.http2Port = intArgument("--http2-port", 0, in: arguments)
    options.certDirectory = argument("--cert-dir", in: arguments)
    options.maxConcurrentStreams = intArgument("--max-streams", 1000, in: arguments)
    options.threads = intArgument("--threads", 1, in: arguments)
    if let path = argument("--jwt-public-key", in: arguments) {
        options.jwtPublicKeyPEM = try String(contentsOfFile: path, encoding: .utf8)
    }
    options.deviceLogPath = argument("--device-log", in: arguments)
    options.binaryPort = intArgument("--binary-port", 0, in: arguments)
    let simulator = try await APNsSimulator.start(options)
    FileHandle.standardOutput.write(Data("READY \(simulator.http2Port) \(simulator.certificates.caPath) \(simulator.binaryGatewayPort ?? 0)\n".utf8))
    while readLine() != nil {}
    print("accepted \(simulator.deliveryCount)")
    await simulator.shutdown()
}

/// Runs a command, returns its standard output.
func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

func which(_ name: String) -> String? {
    for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin").split(separator: ":") {
        let path = "\(directory)/\(name)"
        if FileManager.default.isExecutableFile(atPath: path) { return path }
    }
    return nil
}

/// CPU seconds (user + system) a process has used: `/proc/PID/stat` fields 14 and 15, counted after the
/// parenthesised command name (which may itself contain spaces).
func cpuSeconds(pid: String) -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let nameEnd = stat.lastIndex(of: ")") else { return 0 }
    let afterName = stat[stat.index(after: nameEnd)...].split(separator: " ")
    guard afterName.count > 12, let user = Double(afterName[11]), let system = Double(afterName[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// CPU seconds used by the children this process has waited for (h2load, the aioapns script).
func childrenCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_CHILDREN.rawValue), &usage)
    func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// A throughput and what it cost: CPU microseconds per notification in the client and in the simulator.
struct Measurement {
    var rate: Double
    var clientMicroseconds: Double
    var simulatorMicroseconds: Double

    var cpuDescription: String {
        String(format: "CPU per notification: client %.0f us, simulator %.0f us", clientMicroseconds, simulatorMicroseconds)
    }
}

func benchLogger() -> Logger {
    var logger = Logger(label: "apns-bench")
    logger.logLevel = .warning
    return logger
}

/// The supervisor's HTTP/2 client (`--client`).
enum HTTP2Client: String, CaseIterable {
    /// swift-nio-http2 (`APNsHTTP2ConnectionFactory`), the relay's.
    case nio
    /// The nghttp2 client (`APNsNGHTTP2ConnectionFactory`).
    case nghttp2
}

func benchSupervisor(
    client: HTTP2Client, port: Int, caPath: String, key: P256.Signing.PrivateKey, count: Int, connections: Int, tokens: Int, concurrency: Int,
    simulatorPID: Int32
) async throws -> Measurement {
    let signer = try APNsJWTSigner(key: key, keyID: keyID, teamID: teamID)
    let configuration = APNsHTTP2ConnectionConfiguration(
        endpoint: APNsEndpoint(host: "127.0.0.1", port: port), credential: .token(APNsTokenProvider(signer: signer)), caFile: caPath)
    let factory: any APNsConnectionFactory = switch client {
    case .nio: try APNsHTTP2ConnectionFactory(configuration: configuration, logger: benchLogger())
    case .nghttp2: try APNsNGHTTP2ConnectionFactory(configuration: configuration, logger: benchLogger())
    }
    return try await measure(factory: factory, count: count, connections: connections, tokens: tokens, concurrency: concurrency, simulatorPID: simulatorPID)
}

/// The supervisor over binary connections (format 2) with the simulator's client certificate.
func benchBinary(port: Int, certDirectory: String, count: Int, connections: Int, tokens: Int, concurrency: Int, simulatorPID: Int32) async throws -> Measurement {
    let certificate = try APNsClientCertificate(certificatePEMFile: certDirectory + "/client.pem", privateKeyPEMFile: certDirectory + "/client.key")
    let factory = try APNsBinaryConnectionFactory(
        configuration: APNsBinaryConnectionConfiguration(
            endpoint: APNsEndpoint(host: "127.0.0.1", port: port), certificate: certificate, caFile: certDirectory + "/ca.pem", format: .framed),
        logger: benchLogger())
    return try await measure(factory: factory, count: count, connections: connections, tokens: tokens, concurrency: concurrency, simulatorPID: simulatorPID)
}

/// Sends `count` notifications through a supervisor on `factory` from `concurrency` workers; returns notifications/s
/// and the CPU they cost this process and the simulator.
func measure(factory: any APNsConnectionFactory, count: Int, connections: Int, tokens: Int, concurrency: Int, simulatorPID: Int32) async throws -> Measurement {
    let logger = benchLogger()
    let supervisor = APNsSupervisor(
        configuration: APNsSupervisorConfiguration(
            pool: .init(connections: connections, maxQueued: concurrency + 1000, minimumConnectSpacing: .milliseconds(10))),
        factory: factory, logger: logger)
    let notifications = try (0..<tokens).map { index in
        try APNsNotification(
            token: try APNsDeviceToken(hex: tokenHex(0xA00000 + index)), topic: topic, payload: Array(payloadJSON.utf8))
    }
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await supervisor.run() }
        // Warm-up: open every connection. Concurrent, because a binary connection confirms a lone notification only
        // after its quiet period.
        await withTaskGroup(of: Void.self) { warmUp in
            for notification in notifications.prefix(connections * 10) { warmUp.addTask { _ = await supervisor.send(notification) } }
        }
        let clock = ContinuousClock()
        let started = clock.now
        let cpuBefore = (client: cpuSeconds(pid: "self"), simulator: cpuSeconds(pid: String(simulatorPID)))
        let failures = await withTaskGroup(of: Int.self) { workers in
            for worker in 0..<concurrency {
                workers.addTask {
                    var failed = 0
                    var index = worker
                    while index < count {
                        // One in flight per token: a token belongs to exactly one worker.
                        let outcome = await supervisor.send(notifications[index % tokens])
                        if outcome.classification != .delivered { failed += 1 }
                        index += concurrency
                    }
                    return failed
                }
            }
            var total = 0
            for await failed in workers { total += failed }
            return total
        }
        let elapsed = clock.now - started
        let cpuAfter = (client: cpuSeconds(pid: "self"), simulator: cpuSeconds(pid: String(simulatorPID)))
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        await supervisor.shutdown(gracePeriod: .seconds(5))
        try await group.waitForAll()
        if failures > 0 { print("supervisor: \(failures) not delivered") }
        return Measurement(
            rate: Double(count) / seconds, clientMicroseconds: (cpuAfter.client - cpuBefore.client) * 1e6 / Double(count),
            simulatorMicroseconds: (cpuAfter.simulator - cpuBefore.simulator) * 1e6 / Double(count))
    }
}

func runBench(_ arguments: [String]) async throws {
    let count = intArgument("--count", 200_000, in: arguments)
    let connections = intArgument("--connections", 4, in: arguments)
    let tokens = intArgument("--tokens", 20_000, in: arguments)
    let concurrency = intArgument("--concurrency", 4_000, in: arguments)
    // aioapns sends as many as the supervisor unless told otherwise (the issue's comparison).
    let aioapnsCount = intArgument("--aioapns-count", count, in: arguments)
    let maxStreams = intArgument("--max-streams", 1000, in: arguments)
    let clientArgument = argument("--client", in: arguments) ?? "both"
    guard let clients = clientArgument == "both" ? HTTP2Client.allCases : HTTP2Client(rawValue: clientArgument).map({ [$0] }) else {
        print("--client: nio, nghttp2 or both")
        exit(2)
    }
    let directory = NSTemporaryDirectory() + "apns-bench-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let key = P256.Signing.PrivateKey()
    try key.pemRepresentation.write(toFile: directory + "/key.p8", atomically: true, encoding: .utf8)
    try key.publicKey.pemRepresentation.write(toFile: directory + "/public.pem", atomically: true, encoding: .utf8)

    // The simulator as a separate process.
    let simulator = Process()
    simulator.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    simulator.arguments = [
        "simulator", "--cert-dir", directory + "/certs", "--jwt-public-key", directory + "/public.pem",
        "--max-streams", String(maxStreams), "--threads", String(intArgument("--simulator-threads", 1, in: arguments)),
    ]
    let output = Pipe()
    let input = Pipe()
    simulator.standardOutput = output
    simulator.standardInput = input
    try simulator.run()
    guard let line = String(data: output.fileHandleForReading.availableData, encoding: .utf8),
        line.hasPrefix("READY "), let port = Int(line.split(separator: " ")[1]),
        let binaryPort = Int(line.split(separator: " ")[3].trimmingCharacters(in: .whitespacesAndNewlines))
    else {
        simulator.terminate()
        throw CancellationError()
    }
    let caPath = directory + "/certs/ca.pem"
    print("simulator pid \(simulator.processIdentifier) on 127.0.0.1:\(port)")
    print("payload \(payloadJSON.utf8.count) bytes, \(connections) connections, \(count) notifications")

    let simulatorPID = simulator.processIdentifier
    var supervisors: [HTTP2Client: Measurement] = [:]
    for client in clients {
        let measurement = try await benchSupervisor(
            client: client, port: port, caPath: caPath, key: key, count: count, connections: connections, tokens: tokens,
            concurrency: concurrency, simulatorPID: simulatorPID)
        supervisors[client] = measurement
        print(String(format: "supervisor (\(client)): %.0f notifications/s", measurement.rate) + " (\(measurement.cpuDescription))")
    }
    // The ratios below are the first client's (nio unless --client nghttp2).
    let supervisorRate = supervisors[clients[0]]!.rate

    var binaryRate: Double?
    if !arguments.contains("--skip-binary") {
        let binary = try await benchBinary(
            port: binaryPort, certDirectory: directory + "/certs", count: count, connections: connections, tokens: tokens, concurrency: concurrency,
            simulatorPID: simulatorPID)
        binaryRate = binary.rate
        print(String(format: "supervisor, binary format 2: %.0f notifications/s", binary.rate) + " (\(binary.cpuDescription))")
    }

    var h2loadRate: Double?
    var h2loadMicroseconds: Double?
    if !arguments.contains("--skip-h2load"), let h2load = which("h2load") {
        let payloadFile = directory + "/payload.json"
        try payloadJSON.write(toFile: payloadFile, atomically: true, encoding: .utf8)
        let jwt = try APNsJWTSigner(key: key, keyID: keyID, teamID: teamID).sign(issuedAt: Int64(Date().timeIntervalSince1970))
        let cpuBefore = (client: childrenCPUSeconds(), simulator: cpuSeconds(pid: String(simulatorPID)))
        let result = try run(h2load, [
            "-n", String(count), "-c", String(connections), "-m", String(min(maxStreams, 1000)), "-t", "1",
            "-d", payloadFile,
            "-H", "authorization: bearer \(jwt)", "-H", "apns-topic: \(topic)", "-H", "apns-push-type: alert",
            "https://127.0.0.1:\(port)/3/device/\(tokenHex(0xC00000))",
        ])
        if let finished = result.output.split(separator: "\n").first(where: { $0.hasPrefix("finished in") }),
            let rateText = finished.split(separator: ",").dropFirst().first?.trimmingCharacters(in: .whitespaces).split(separator: " ").first
        {
            h2loadRate = Double(rateText)
        }
        let cpu = Measurement(
            rate: h2loadRate ?? 0, clientMicroseconds: (childrenCPUSeconds() - cpuBefore.client) * 1e6 / Double(count),
            simulatorMicroseconds: (cpuSeconds(pid: String(simulatorPID)) - cpuBefore.simulator) * 1e6 / Double(count))
        h2loadMicroseconds = cpu.clientMicroseconds
        let succeeded = result.output.split(separator: "\n").first(where: { $0.hasPrefix("requests:") }) ?? "?"
        print("h2load: \(h2loadRate.map { String(format: "%.0f", $0) } ?? "?") requests/s (\(succeeded); \(cpu.cpuDescription))")
    }

    var aioapnsRate: Double?
    if !arguments.contains("--skip-aioapns"), let python = which("python3") {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/aioapns_bench.py").path
        let cpuBefore = (client: childrenCPUSeconds(), simulator: cpuSeconds(pid: String(simulatorPID)))
        let result = try run(python, [
            script, "--port", String(port), "--ca", caPath, "--key", directory + "/key.p8", "--key-id", keyID,
            "--team-id", teamID, "--count", String(aioapnsCount), "--connections", String(connections),
        ])
        if let rateField = result.output.split(separator: " ").first(where: { $0.hasPrefix("rate=") }) {
            aioapnsRate = Double(rateField.dropFirst("rate=".count).trimmingCharacters(in: .whitespacesAndNewlines))
        }
        // The whole script: interpreter start-up and its warm-up request are counted too (a small share of 10,000).
        let cpu = Measurement(
            rate: aioapnsRate ?? 0, clientMicroseconds: (childrenCPUSeconds() - cpuBefore.client) * 1e6 / Double(aioapnsCount),
            simulatorMicroseconds: (cpuSeconds(pid: String(simulatorPID)) - cpuBefore.simulator) * 1e6 / Double(aioapnsCount))
        print("aioapns: \(aioapnsRate.map { String(format: "%.0f", $0) } ?? "?") notifications/s (\(result.output.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "\n").last ?? ""); \(cpu.cpuDescription))")
    }

    if let nio = supervisors[.nio], let nghttp2 = supervisors[.nghttp2] {
        print(String(format: "client CPU per notification: nio %.1f us, nghttp2 %.1f us, nio / nghttp2 = %.2f", nio.clientMicroseconds, nghttp2.clientMicroseconds, nio.clientMicroseconds / nghttp2.clientMicroseconds))
    }
    if let h2loadMicroseconds {
        for client in clients {
            print(String(format: "\(client) / h2load (client CPU per notification) = %.2f", supervisors[client]!.clientMicroseconds / h2loadMicroseconds))
        }
    }
    if let binaryRate { print(String(format: "binary format 2 / HTTP/2 (supervisor) = %.2f", binaryRate / supervisorRate)) }
    if let h2loadRate { print(String(format: "supervisor / h2load = %.2f", supervisorRate / h2loadRate)) }
    if let aioapnsRate { print(String(format: "supervisor / aioapns = %.1fx", supervisorRate / aioapnsRate)) }
    try? input.fileHandleForWriting.close()
    simulator.waitUntilExit()
    try? FileManager.default.removeItem(atPath: directory)
}

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "simulator" {
    try await runSimulator(Array(arguments.dropFirst()))
} else {
    try await runBench(arguments)
}
