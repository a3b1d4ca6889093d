// `relay-harness bench`: the relay end to end, every part in its own process, as in production: an
// embedded Kafka cluster (`relay-harness cluster`), the APNs simulator (`apns-relay simulator`, HTTP/2
// over TLS) and `apns-relay run`. Events and device registrations are preloaded; the bench then starts
// the relay and reads `push.results` until every (event, device) has its result.
//
// Reports events/s (whole run, and steady state between 10% and 90% of the results), event→answer
// latency p50/p99 (the results' latency_ms: from the relay consuming the event to APNs' answer), the
// relay's peak RSS, and CPU seconds per process. `--perf S` records S seconds of the relay with
// `perf record` mid-run and prints the top of the profile.
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
    let work = try workDirectory(arguments, prefix: "relay-harness")
    let relayBinary = relayBinaryPath()
    print("bench: \(events) events, \(users) users x \(devicesPerUser) devices, \(partitions) partitions, \(connections) APNs connections (\(maxStreams) streams each), work dir \(work)")

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
        _ = try await producer.enqueue(benchEvent(id: "e\(index)", user: user, seq: seq))
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
            if case .message(let message) = event, let value = message.value { tally.add(value, at: .now) }
        }
    }

    // 5. The relay.
    try writeRelayConfiguration(work: work, bootstrap: bootstrap, simulatorPort: port, connections: connections, maxInFlight: maxInFlight)
    let start = ContinuousClock.now
    let relay = try startRelayProcess(relayBinary: relayBinary, work: work)
    let relayPID = relay.process.processIdentifier

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
            let (perf, _) = try Child.start("/usr/bin/perf", ["record", "-F", "199", "--no-buildid", "--no-buildid-cache", "-o", "\(work)/perf.data", "-p", "\(relayPID)", "--", "sleep", "\(perfSeconds)"],
                                            output: FileHandle.nullDevice)
            perf.process.waitUntilExit()
        }
    }
    let end = ContinuousClock.now
    let relayCPU = ProcessSample(pid: relayPID)
    let simulatorCPU = ProcessSample(pid: simulator.process.processIdentifier)
    let clusterCPU = ProcessSample(pid: cluster.process.processIdentifier)
    peakKiB = max(peakKiB, relayCPU.peakKiB)
    relay.process.terminate()
    relay.process.waitUntilExit()
    readerTask.cancel()
    await reader.close()
    simulator.process.terminate()
    simulator.process.waitUntilExit()
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
    print(String(format: "relay peak RSS: %.0f MiB", Double(peakKiB) / 1024))
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

