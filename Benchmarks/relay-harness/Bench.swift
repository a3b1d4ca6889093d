// `relay-harness bench`: the relay end to end, every part in its own process, as in production: an
// embedded Kafka cluster (`relay-harness cluster`), the APNs simulator (`apns-relay simulator`, HTTP/2
// over TLS) and `apns-relay run`. Events and device registrations are preloaded; the bench then starts
// the relay and reads `push.results` until every (event, device) has its result.
//
// Reports events/s (whole run, and steady state between 10% and 90% of the results), event→answer
// latency p50/p99 (the results' latency_ms: from the relay consuming the event to APNs' answer), the
// relay's peak RSS, and CPU seconds per process. `--perf S` records S seconds of the relay with
// `perf record` mid-run and prints the top of the profile.
import APNs
import Foundation
import Kafka
import Synchronization

/// What the results reader saw.
final class ResultTally: Sendable {
    private struct State {
        var count = 0
        var latencies: [Int] = []
        var milestones: [Int: ContinuousClock.Instant] = [:]  // percent → when reached
        var statuses: [String: Int] = [:]
        var reasons: [String: Int] = [:]  // "status reason" for results with a reason
    }

    private let state = Mutex(State())
    let expected: Int

    init(expected: Int) { self.expected = expected }

    func add(_ value: [UInt8], at now: ContinuousClock.Instant) {
        let latency = RecordScan.integer(after: RecordScan.latencyField, in: value)
        let status = RecordScan.string(after: RecordScan.statusField, in: value)
        let reason = RecordScan.string(after: RecordScan.reasonField, in: value)
        state.withLock { state in
            state.count += 1
            if let latency { state.latencies.append(latency) }
            if let status { state.statuses[status, default: 0] += 1 }
            if let reason { state.reasons["\(status ?? "?") \(reason)", default: 0] += 1 }
            let percent = state.count * 100 / expected
            if state.milestones[percent] == nil { state.milestones[percent] = now }
        }
    }

    var count: Int { state.withLock { $0.count } }
    var latencies: [Int] { state.withLock { $0.latencies } }
    var statuses: [String: Int] { state.withLock { $0.statuses } }
    var reasons: [String: Int] { state.withLock { $0.reasons } }
    func milestone(_ percent: Int) -> ContinuousClock.Instant? { state.withLock { $0.milestones[percent] } }
}

func percentile(_ sorted: [Int], _ fraction: Double) -> Int {
    guard !sorted.isEmpty else { return 0 }
    return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * fraction))]
}

func runBench(_ arguments: [String]) async throws {
    let events = intArgument("--events", 500_000, in: arguments)
    let users = intArgument("--users", 100_000, in: arguments)
    let devicesPerUser = intArgument("--devices-per-user", 2, in: arguments)
    let partitions = intArgument("--partitions", 32, in: arguments)
    let connections = intArgument("--connections", 4, in: arguments)
    let maxInFlight = intArgument("--max-in-flight", 20_000, in: arguments)
    let perfSeconds = intArgument("--perf", 0, in: arguments)
    let maxStreams = intArgument("--max-streams", 1000, in: arguments)
    let http2Client = argument("--http2-client", in: arguments)
    let traceHeaders = arguments.contains("--trace-headers")
    let exportsSpans = arguments.contains("--otlp")
    let sampledPercent = intArgument("--sampled-percent", 100, in: arguments)
    let work = try workDirectory(arguments, prefix: "relay-harness")
    let relayBinary = relayBinaryPath()
    print("bench: \(events) events, \(users) users x \(devicesPerUser) devices, \(partitions) partitions, \(connections) APNs connections (\(maxStreams) streams each, \(http2Client ?? "the default") HTTP/2 client)\(traceHeaders ? ", trace headers on every event" : "")\(exportsSpans ? ", spans exported over OTLP" : "")\(traceHeaders && sampledPercent < 100 ? " (\(sampledPercent)% of traces sampled)" : ""), work dir \(work)")

    // 1. The cluster, in its own process.
    // Results are the biggest topic (one record per event and device): four times the partitions,
    // so the mock's ~5 MB per partition holds them all.
    let (cluster, _, bootstrap) = try startClusterProcess(partitions: partitions, brokers: 1, resultsPartitions: partitions * 4)
    let kafka = KafkaConfiguration(bootstrapServers: bootstrap, properties: ["linger.ms": "20"])

    // 2. Preload registrations and events.
    let preloadStart = ContinuousClock.now
    let producer = try KafkaProducer(configuration: kafka, logger: makeQuietLogger())
    try await registerDevices(producer, users: users, devicesPerUser: devicesPerUser)
    var nextSeq = [Int](repeating: 1, count: users)
    for index in 0..<events {
        let user = index % users
        let seq = nextSeq[user]
        nextSeq[user] += 1
        var event = benchEvent(id: "e\(index)", user: user, seq: seq)
        if traceHeaders { event.headers = benchTraceHeaders(index, sampled: index % 100 < sampledPercent) }
        _ = try await producer.enqueue(event)
    }
    try await producer.flush()
    await producer.close()
    print(String(format: "preloaded %d registrations and %d events in %.1f s", users * devicesPerUser, events, (ContinuousClock.now - preloadStart).seconds))

    // 3. The APNs simulator, in its own process, verifying the relay's JWTs.
    let (simulator, port) = try startSimulatorProcess(relayBinary: relayBinary, work: work, maxStreams: maxStreams)

    // 4. The results reader.
    let expected = events * devicesPerUser
    let tally = ResultTally(expected: expected)
    let reader = try KafkaConsumer(configuration: KafkaConsumerConfiguration(kafka: kafka, groupID: "relay-harness-results", topics: ["push.results"]), logger: makeQuietLogger())
    let readerTask = Task {
        for try await event in reader.events {
            if case .message(let message) = event, let value = message.value { tally.add(Array(value), at: .now) }
        }
    }

    // 5. The relay (and, with --otlp, the collector it exports its spans to).
    let collector = exportsSpans ? try await startCollectorStandIn(work: work) : nil
    try writeRelayConfiguration(work: work, bootstrap: bootstrap, simulatorPort: port, connections: connections, maxInFlight: maxInFlight, http2Client: http2Client,
                                kafkaProperties: relayKafkaProperties(in: arguments), otlpEndpoint: collector.map { "http://127.0.0.1:\($0.port)" })
    let start = ContinuousClock.now
    let relay = try startRelayProcess(relayBinary: relayBinary, work: work)
    let relayPID = relay.process.processIdentifier

    // The relay's CPU seconds against results received, every 50 ms: the CPU per notification of the steady state
    // (10%..90% of the results) leaves the start (clients, restores, connections) out.
    let cpuByResults = Mutex<[(results: Int, cpu: Double)]>([])
    let cpuSampler = Task {
        while !Task.isCancelled {
            let sample = (tally.count, ProcessSample(pid: relayPID).cpuSeconds)
            cpuByResults.withLock { $0.append(sample) }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }
    var peakKiB = 0
    var profiled = perfSeconds == 0
    var lastCount = 0
    var lastProgress = ContinuousClock.now
    while tally.count < expected {
        try await Task.sleep(for: .seconds(1))
        guard relay.process.isRunning else { print("relay-harness: the relay exited (\(relay.process.terminationStatus)); see \(work)/relay.log"); exit(1) }
        let sample = ProcessSample(pid: relayPID)
        peakKiB = max(peakKiB, sample.peakKiB)
        let count = tally.count
        if count != lastCount { lastCount = count; lastProgress = .now }
        if ContinuousClock.now - lastProgress > .seconds(60) { print("relay-harness: no progress for 60 s at \(count) of \(expected) results"); break }
        if !profiled && count > expected / 5 {
            profiled = true
            // Stopped by SIGINT after the seconds asked for, and killed 10 s later if it has not stopped: on
            // some VMs `perf record -p` never ends by itself (with `-- sleep S` it never reaped the sleep),
            // and waiting for it held the bench forever.
            let (perf, _) = try Child.start("/usr/bin/perf", ["record", "-F", "199", "--no-buildid", "--no-buildid-cache", "-o", "\(work)/perf.data", "-p", "\(relayPID)"],
                                            output: FileHandle.nullDevice)
            try await Task.sleep(for: .seconds(perfSeconds))
            perf.process.interrupt()
            let stopBy = ContinuousClock.now + .seconds(10)
            while perf.process.isRunning && ContinuousClock.now < stopBy { try await Task.sleep(for: .milliseconds(100)) }
            if perf.process.isRunning {
                kill(perf.process.processIdentifier, SIGKILL)
                print("relay-harness: perf did not stop on SIGINT; killed it (its profile may be empty)")
            }
        }
    }
    let end = ContinuousClock.now
    cpuSampler.cancel()
    let relayCPU = ProcessSample(pid: relayPID)
    let relayThreads = ThreadSample(pid: relayPID)
    let simulatorCPU = ProcessSample(pid: simulator.process.processIdentifier)
    let clusterCPU = ProcessSample(pid: cluster.process.processIdentifier)
    peakKiB = max(peakKiB, relayCPU.peakKiB)
    relay.process.terminate()
    relay.process.waitUntilExit()
    readerTask.cancel()
    await reader.close()
    // The peer, in the same run: h2load's CPU per request against the same simulator process.
    let peer = arguments.contains("--skip-h2load") ? nil
        : try h2loadPeer(work: work, port: port, requests: min(expected, 200_000), connections: connections, maxStreams: maxStreams,
                         simulatorPID: simulator.process.processIdentifier)
    simulator.process.terminate()
    simulator.process.waitUntilExit()
    if let collector {
        // SIGKILL: the harness's children inherit its blocked stop signals.
        kill(collector.child.process.processIdentifier, SIGKILL)
        collector.child.process.waitUntilExit()
        let received = (try? String(contentsOfFile: "\(work)/otlp-received", encoding: .utf8)) ?? "nothing"
        print("spans exported to the collector stand-in: \(received.trimmingCharacters(in: .whitespacesAndNewlines))")
    }
    try? cluster.input.fileHandleForWriting.close()
    cluster.process.waitUntilExit()

    let total = (end - start).seconds
    let latencies = tally.latencies.sorted()
    print(String(format: "results: %d of %d in %.1f s from the relay's start: %.0f events/s, %.0f notifications/s", tally.count, expected, total,
                 Double(events) * Double(tally.count) / Double(expected) / total, Double(tally.count) / total))
    if let from = tally.milestone(10), let to = tally.milestone(90) {
        let steady = (to - from).seconds
        print(String(format: "steady state (10%%..90%% of results): %.0f events/s, %.0f notifications/s", Double(events) * 0.8 / steady, Double(expected) * 0.8 / steady))
    }
    print("statuses: \(tally.statuses.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
    if !tally.reasons.isEmpty {
        print("reasons: \(tally.reasons.sorted { $0.value > $1.value }.prefix(10).map { "\($0.key): \($0.value)" }.joined(separator: ", "))")
    }
    print("event→answer latency: p50 \(percentile(latencies, 0.5)) ms, p99 \(percentile(latencies, 0.99)) ms, max \(latencies.last ?? 0) ms")
    print(String(format: "relay peak RSS: %.0f MiB; simulator %.0f MiB", Double(peakKiB) / 1024, Double(simulatorCPU.peakKiB) / 1024))
    let answered = Double(max(1, tally.count))
    let relayMicroseconds = relayCPU.cpuSeconds * 1e6 / answered
    print(String(format: "CPU per notification: relay %.1f µs, simulator %.1f µs, cluster %.1f µs", relayMicroseconds,
                 simulatorCPU.cpuSeconds * 1e6 / answered, clusterCPU.cpuSeconds * 1e6 / answered))
    let samples = cpuByResults.withLock { $0 }
    if let from = samples.first(where: { $0.results >= expected / 10 }), let to = samples.first(where: { $0.results >= expected * 9 / 10 }),
       to.results > from.results {
        print(String(format: "relay CPU per notification in the steady state (10%%..90%% of results): %.1f µs", (to.cpu - from.cpu) * 1e6 / Double(to.results - from.results)))
    }
    print("relay CPU per notification by thread: \(relayThreads.report(notifications: tally.count))")
    if let peer {
        print(String(format: "h2load, same simulator, same run: %.0f requests/s, %.1f µs CPU per request (simulator %.1f µs); relay / h2load = %.1f",
                     peer.rate, peer.clientMicroseconds, peer.simulatorMicroseconds, relayMicroseconds / max(0.001, peer.clientMicroseconds)))
    }
    print(String(format: "CPU seconds: relay %.1f, simulator %.1f, cluster %.1f (wall %.1f s, 2 cores = %.1f CPU-s)", relayCPU.cpuSeconds,
                 simulatorCPU.cpuSeconds, clusterCPU.cpuSeconds, total, total * 2))
    if perfSeconds > 0 {
        let (report, output) = try Child.start("/usr/bin/perf", ["report", "-i", "\(work)/perf.data", "--stdio", "--no-children", "--sort", "dso,symbol",
                                                                  "--percent-limit", "1.5", "-g", "none"], output: nil)
        let text = String(decoding: output!.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        report.process.waitUntilExit()
        print("perf profile of the relay (\(perfSeconds) s, self time, >= 1.5%):")
        print(text.split(separator: "\n").filter { !$0.hasPrefix("#") && !$0.isEmpty }.prefix(40).joined(separator: "\n"))
    }
}


/// What h2load cost against the simulator: its rate and the CPU per request of h2load and of the simulator.
struct PeerMeasurement {
    var rate: Double
    var clientMicroseconds: Double
    var simulatorMicroseconds: Double
}

/// Runs h2load (nghttp2) against the simulator with the relay's connections and streams, the bench
/// event's payload and a JWT signed with the run's key; `nil` (and a line saying why) when h2load is
/// not installed or did not finish.
func h2loadPeer(work: String, port: Int, requests: Int, connections: Int, maxStreams: Int, simulatorPID: Int32) throws -> PeerMeasurement? {
    guard let h2load = ["/usr/bin/h2load", "/usr/local/bin/h2load"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
        print("h2load: not installed (apt install nghttp2-client); no peer figure")
        return nil
    }
    let payload = #"{"aps":{"alert":{"title":"Hi","body":"Message 1"},"sound":"default","badge":1}}"#
    try payload.write(toFile: "\(work)/payload.json", atomically: true, encoding: .utf8)
    let signer = try APNsJWTSigner(p8File: "\(work)/key.p8", keyID: "ABCDE12345", teamID: "TEAM123456")
    let jwt = signer.sign(issuedAt: Int64(Date().timeIntervalSince1970))
    let before = (client: childrenCPUSeconds(), simulator: ProcessSample(pid: simulatorPID).cpuSeconds)
    let (child, output) = try Child.start(h2load, [
        "-n", "\(requests)", "-c", "\(connections)", "-m", "\(maxStreams)", "-t", "1", "-d", "\(work)/payload.json",
        "-H", "authorization: bearer \(jwt)", "-H", "apns-topic: com.example.app", "-H", "apns-push-type: alert",
        "https://127.0.0.1:\(port)/3/device/\(tokenHex(0xC00000))",
    ], output: nil)
    let text = String(decoding: output!.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    child.process.waitUntilExit()
    let clientSeconds = childrenCPUSeconds() - before.client
    let simulatorSeconds = ProcessSample(pid: simulatorPID).cpuSeconds - before.simulator
    guard let finished = text.split(separator: "\n").first(where: { $0.hasPrefix("finished in") }),
          let rateText = finished.split(separator: ",").dropFirst().first?.trimmingCharacters(in: .whitespaces).split(separator: " ").first,
          let rate = Double(rateText) else {
        print("h2load did not finish: \(text.suffix(400))")
        return nil
    }
    if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("status codes:") }) { print("h2load \(line)") }
    return PeerMeasurement(rate: rate, clientMicroseconds: clientSeconds * 1e6 / Double(requests),
                           simulatorMicroseconds: simulatorSeconds * 1e6 / Double(requests))
}

/// CPU seconds used by the children this process has waited for (h2load).
func childrenCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_CHILDREN.rawValue), &usage)
    func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// An OTLP/HTTP collector stand-in for `--otlp`: a Python HTTP server that answers every `POST` 200 and counts the
/// requests and their bytes into `work/otlp-received` (its CPU is its own process's, not the relay's).
func startCollectorStandIn(work: String) async throws -> (child: Child, port: Int) {
    let script = """
        import http.server, sys
        received = [0, 0]
        class Sink(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                received[0] += 1
                received[1] += len(body)
                open(sys.argv[1] + "/otlp-received", "w").write("%d requests, %d bytes" % tuple(received))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()
            def log_message(self, *args):
                pass
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
        open(sys.argv[1] + "/otlp-port", "w").write(str(server.server_address[1]))
        server.serve_forever()
        """
    let (child, _) = try Child.start("/usr/bin/python3", ["-c", script, work], output: FileHandle.nullDevice)
    for _ in 0..<100 {
        if let text = try? String(contentsOfFile: "\(work)/otlp-port", encoding: .utf8), let port = Int(text) { return (child, port) }
        try await Task.sleep(for: .milliseconds(50))
    }
    print("relay-harness: the OTLP collector stand-in did not start")
    exit(1)
}
