// `relay-harness soak`: the relay under a steady load for a long time, every part in its own process
// as in `bench` (the embedded cluster, `apns-relay simulator`, `apns-relay run`); `--broker noida`: on
// noida-db instead of the embedded cluster, a broker that keeps transactions with markers, reached through a
// `KafkaBrokerFront` in this process that holds empty Fetch answers for their MaxWaitMs as Kafka does (noida-db
// answers them at once: an idle consumer then fetches again at once, thousands of times a second).
//
// Devices are registered for `--users` users (`--devices-per-user` each); then events are produced at
// `--rate` events/s, paced by the clock (a batch every 10 ms, never a burst), for `--minutes`, each
// user's seqs in order, while `push.results` is read concurrently (the mock cluster keeps only ~5 MB
// per partition, so results must be read as they come). Every 10 s it samples the relay's RSS and
// CPU seconds, events produced, results received and the event→answer latency p50/p99 of the
// results received in those 10 s (and the simulator's and the cluster's CPU seconds, which share the
// cores), prints a line and appends a row to `<work>/soak.csv`.
//
// Three latencies are measured: the results' own `latency_ms` (the relay's consume → APNs answer); produce → APNs
// request (each event's produce time, kept here, against the simulator's receive time in its device log); produce →
// result visible to a `read_committed` reader (this reader's receipt of the result).
//
// At the end it checks that every (event, device) has a result, reports the totals, the latency
// percentiles over the whole run and the RSS trend (least-squares slope over the second half of the
// production, so start-up growth is left out), stops the relay with SIGTERM, and exits 1 when
// results are missing or the relay died.
import Foundation
import Kafka
import KafkaBrokerFront
import Synchronization
import TestSupport

/// Latencies in whole milliseconds, counted per millisecond up to a bound: percentiles of millions
/// of results without keeping them.
struct LatencyHistogram {
    static let bound = 600_000
    private(set) var counts = [Int](repeating: 0, count: bound + 1)
    private(set) var total = 0
    private(set) var maximum = 0

    mutating func add(_ milliseconds: Int) {
        counts[min(max(0, milliseconds), Self.bound)] += 1
        total += 1
        maximum = max(maximum, milliseconds)
    }

    /// The smallest latency at or above `fraction` of the values (the bound for values beyond it).
    func percentile(_ fraction: Double) -> Int {
        guard total > 0 else { return 0 }
        let rank = max(1, Int((Double(total) * fraction).rounded(.up)))
        var seen = 0
        for (milliseconds, count) in counts.enumerated() {
            seen += count
            if seen >= rank { return milliseconds }
        }
        return maximum
    }
}

/// What the soak's results reader saw: which (event, device) pairs have a result, how often a pair
/// came back twice, statuses, and latencies for the current window and for the whole run.
final class SoakTally: Sendable {
    private struct State {
        var producedAt: [Int64]
        var visible = LatencyHistogram()
        var results = 0
        var duplicates = 0
        var unexpected = 0
        var answered: [UInt64]
        var answeredCount = 0
        var statuses: [String: Int] = [:]
        var window: [Int] = []
        var run = LatencyHistogram()
    }

    private let state: Mutex<State>
    let users: Int
    let devicesPerUser: Int
    let events: Int

    /// For event ids `s<index>` with index in `0..<events`, event i going to user `i % users`.
    init(events: Int, users: Int, devicesPerUser: Int) {
        self.events = events
        self.users = users
        self.devicesPerUser = devicesPerUser
        state = Mutex(State(producedAt: [Int64](repeating: 0, count: events), answered: [UInt64](repeating: 0, count: (events * devicesPerUser + 63) / 64)))
    }

    /// Event `index` was handed to the producer at `epochMilliseconds`.
    func produced(_ index: Int, at epochMilliseconds: Int64) {
        state.withLock { $0.producedAt[index] = epochMilliseconds }
    }

    /// When event `index` was produced (epoch milliseconds), 0 if unknown.
    func producedAt(_ index: Int) -> Int64 {
        state.withLock { index < $0.producedAt.count ? $0.producedAt[index] : 0 }
    }

    func add(_ value: [UInt8]) {
        let now = Int64((Date().timeIntervalSince1970 * 1_000).rounded())
        let pair = self.pair(value)
        let latency = RecordScan.integer(after: RecordScan.latencyField, in: value)
        let status = RecordScan.string(after: RecordScan.statusField, in: value)
        state.withLock { state in
            state.results += 1
            if let latency {
                state.window.append(latency)
                state.run.add(latency)
            }
            if let status { state.statuses[status, default: 0] += 1 }
            guard let pair else {
                state.unexpected += 1
                return
            }
            let producedAt = state.producedAt[pair / devicesPerUser]
            if producedAt > 0 { state.visible.add(Int(now - producedAt)) }
            let (word, bit) = pair.quotientAndRemainder(dividingBy: 64)
            if state.answered[word] & (1 << bit) != 0 {
                state.duplicates += 1
            } else {
                state.answered[word] |= 1 << bit
                state.answeredCount += 1
            }
        }
    }

    /// The bit of (event, device) named by a result, `nil` for a result that is not one of ours
    /// (an unknown event, or a token of another user).
    private func pair(_ value: [UInt8]) -> Int? {
        guard let idStart = RecordScan.range(after: RecordScan.eventIDField, in: value), idStart < value.count, value[idStart] == UInt8(ascii: "s"),
              let index = RecordScan.digits(in: value[(idStart + 1)...]), index < events,
              let token = RecordScan.string(after: RecordScan.tokenField, in: value), let deviceNumber = Int(token, radix: 16), deviceNumber >= 1
        else { return nil }
        let device = deviceNumber - 1
        guard device / devicesPerUser == index % users else { return nil }
        return index * devicesPerUser + device % devicesPerUser
    }

    var results: Int { state.withLock { $0.results } }
    var answered: Int { state.withLock { $0.answeredCount } }
    var duplicates: Int { state.withLock { $0.duplicates } }
    var unexpected: Int { state.withLock { $0.unexpected } }
    var statuses: [String: Int] { state.withLock { $0.statuses } }
    var runLatencies: LatencyHistogram { state.withLock { $0.run } }
    /// Produce → result visible to this `read_committed` reader, over the run.
    var visibleLatencies: LatencyHistogram { state.withLock { $0.visible } }

    /// The latencies received since the last call, sorted.
    func takeWindow() -> [Int] {
        state.withLock { state in
            defer { state.window.removeAll(keepingCapacity: true) }
            return state.window.sorted()
        }
    }

    /// (event, device) pairs of the first `produced` events without a result.
    func missing(produced: Int) -> Int {
        state.withLock { state in
            var missing = 0
            for pair in 0..<(produced * devicesPerUser) where state.answered[pair / 64] & (1 << (pair % 64)) == 0 { missing += 1 }
            return missing
        }
    }
}

/// The producer's progress, read by the sampler.
final class SoakProduction: Sendable {
    let acknowledged = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    /// How long producing took, in milliseconds; -1 while it goes on.
    let finishedAfterMilliseconds = Atomic<Int>(-1)

    var seconds: Double? {
        let milliseconds = finishedAfterMilliseconds.load(ordering: .acquiring)
        return milliseconds < 0 ? nil : Double(milliseconds) / 1000
    }
}

/// One 10-second sample.
struct SoakSample {
    var elapsed: Double
    var phase: String
    var produced: Int
    var results: Int
    var producedPerSecond: Double
    var resultsPerSecond: Double
    var rssMiB: Double
    var cpuSeconds: Double
    var cpuPercent: Double
    var p50: Int
    var p99: Int
    var windowResults: Int
    /// The other processes on the same cores, to tell the relay's slowdowns from theirs.
    var simulatorCPUSeconds: Double
    var clusterCPUSeconds: Double

    static let csvHeader = "elapsed_s,phase,events_produced,results_received,events_per_s,results_per_s,rss_mib,relay_cpu_s,relay_cpu_percent,p50_ms,p99_ms,window_results,simulator_cpu_s,cluster_cpu_s"

    var csvRow: String {
        String(format: "%.1f,%@,%d,%d,%.1f,%.1f,%.1f,%.2f,%.1f,%d,%d,%d,%.2f,%.2f", elapsed, phase, produced, results, producedPerSecond, resultsPerSecond,
               rssMiB, cpuSeconds, cpuPercent, p50, p99, windowResults, simulatorCPUSeconds, clusterCPUSeconds)
    }

    var line: String {
        String(format: "%6.0f s  %@  events %9d (%5.0f/s)  results %9d (%5.0f/s)  RSS %6.1f MiB  CPU %5.1f%%  p50 %6d ms  p99 %6d ms",
               elapsed, phase.padding(toLength: 7, withPad: " ", startingAt: 0), produced, producedPerSecond, results, resultsPerSecond, rssMiB, cpuPercent, p50, p99)
    }
}

/// The least-squares slope of `y` over `x` (`nil` with fewer than two distinct x).
func leastSquaresSlope(_ points: [(x: Double, y: Double)]) -> Double? {
    guard points.count >= 2 else { return nil }
    let meanX = points.map(\.x).reduce(0, +) / Double(points.count)
    let meanY = points.map(\.y).reduce(0, +) / Double(points.count)
    let sxx = points.map { ($0.x - meanX) * ($0.x - meanX) }.reduce(0, +)
    guard sxx > 0 else { return nil }
    return points.map { ($0.x - meanX) * ($0.y - meanY) }.reduce(0, +) / sxx
}

func runSoak(_ arguments: [String]) async throws {
    let users = intArgument("--users", 20_000, in: arguments)
    let devicesPerUser = intArgument("--devices-per-user", 1, in: arguments)
    let rate = intArgument("--rate", 5_000, in: arguments)
    let minutes = Double(argument("--minutes", in: arguments) ?? "30") ?? 30
    let partitions = intArgument("--partitions", 32, in: arguments)
    let connections = intArgument("--connections", 4, in: arguments)
    let maxInFlight = intArgument("--max-in-flight", 20_000, in: arguments)
    let sampleEvery = Duration.seconds(intArgument("--sample-s", 10, in: arguments))
    let drainLimit = Duration.seconds(intArgument("--drain-s", 120, in: arguments))
    guard users > 0, devicesPerUser > 0, rate > 0, minutes > 0 else {
        print("relay-harness soak: --users, --devices-per-user, --rate and --minutes must be positive")
        exit(64)
    }
    let events = Int(Double(rate) * minutes * 60)
    let work = try workDirectory(arguments, prefix: "relay-soak")
    let relayBinary = relayBinaryPath()
    print("soak: \(rate) events/s for \(minutes) min (\(events) events), \(users) users x \(devicesPerUser) device(s), \(partitions) partitions, "
        + "\(connections) APNs connections; work dir \(work)")

    let broker = argument("--broker", in: arguments) ?? "mock"
    guard broker == "mock" || broker == "noida" else {
        print("relay-harness soak: --broker is mock (librdkafka's mock cluster) or noida (noida-db, a broker of its own)")
        exit(64)
    }
    // The mock cluster runs in a child of ours that ends when its input closes; noida-db ends with `noida` (SIGKILL: its
    // data is the run's own).
    var mockCluster: Child?
    var noida: NoidaBroker?
    let bootstrap: String
    var front: KafkaBrokerFront?
    if broker == "noida" {
        let started = try NoidaBroker()
        // Every client reaches noida-db through a front that holds an empty Fetch answer as Kafka does (noida-db answers
        // at once, and each idle consumer would ask again at once: a core of noida-db and much of the relay's busy).
        let holding = try await KafkaBrokerFront(upstreams: started.bootstrapServers, holdingEmptyFetches: true)
        try await createSoakTopics(bootstrap: holding.bootstrapServers, partitions: partitions)
        (noida, front, bootstrap) = (started, holding, holding.bootstrapServers)
    } else {
        let started = try startClusterProcess(partitions: partitions, brokers: 1)
        (mockCluster, bootstrap) = (started.child, started.bootstrap)
    }
    let clusterPID = noida?.processIdentifier ?? mockCluster!.process.processIdentifier
    // Batches of 50 ms by default: the mock cluster finds a fetch's offset by walking a partition's
    // batches one by one, so one small batch per event would make the cluster, not the relay, the
    // cost that grows. The relay then sees events in bursts of 50 ms; `--producer-linger-ms 5`
    // makes the arrival smoother (what the latency target is about) for a short run.
    let producerLinger = intArgument("--producer-linger-ms", 50, in: arguments)
    let kafka = KafkaConfiguration(bootstrapServers: bootstrap, properties: ["linger.ms": "\(producerLinger)"])
    let producer = try KafkaProducer(configuration: kafka, logger: makeQuietLogger())
    try await registerDevices(producer, users: users, devicesPerUser: devicesPerUser)
    print("soak: registered \(users * devicesPerUser) devices")

    let deviceLog = "\(work)/devices.jsonl"
    let (simulator, port) = try startSimulatorProcess(relayBinary: relayBinary, work: work, deviceLog: deviceLog)
    try writeRelayConfiguration(work: work, bootstrap: bootstrap, simulatorPort: port, connections: connections, maxInFlight: maxInFlight,
                                kafkaProperties: relayKafkaProperties(in: arguments))
    let tally = SoakTally(events: events, users: users, devicesPerUser: devicesPerUser)
    let production = SoakProduction()
    let reader = try KafkaConsumer(configuration: KafkaConsumerConfiguration(kafka: kafka, groupID: "relay-soak-results", topics: ["push.results"]),
                                   logger: makeQuietLogger())
    let relay = try startRelayProcess(relayBinary: relayBinary, work: work)
    let relayPID = relay.process.processIdentifier

    _ = FileManager.default.createFile(atPath: "\(work)/soak.csv", contents: Data((SoakSample.csvHeader + "\n").utf8))
    let csv = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(work)/soak.csv"))
    try csv.seekToEnd()

    let start = ContinuousClock.now
    var samples: [SoakSample] = []
    /// The relay's threads at each sample, with the results received by then.
    var threadSamples: [(elapsed: Double, results: Int, threads: ThreadSample)] = []
    var relayDied = false
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask {
            for try await event in reader.events {
                if case .message(let message) = event, let value = message.value { tally.add(Array(value)) }
            }
        }
        group.addTask {
            try await produceSteadily(producer, events: events, users: users, rate: rate, production: production) { tally.produced($0, at: $1) }
        }

        var previous = (at: start, produced: 0, results: 0, cpu: 0.0)
        var lastProgress = (at: start, answered: 0)
        var nextSample = start
        while true {
            nextSample = nextSample.advanced(by: sampleEvery)
            try await Task.sleep(until: nextSample, clock: .continuous)
            let now = ContinuousClock.now
            guard relay.process.isRunning else {
                print("soak: the relay exited (\(relay.process.terminationStatus)); see \(work)/relay.log")
                relayDied = true
                break
            }
            let process = ProcessSample(pid: relayPID)
            let produced = production.acknowledged.load(ordering: .relaxed)
            let results = tally.results
            let window = tally.takeWindow()
            let seconds = (now - previous.at).seconds
            let finished = production.seconds != nil
            let sample = SoakSample(
                elapsed: (now - start).seconds, phase: finished ? "drain" : "produce", produced: produced, results: results,
                producedPerSecond: Double(produced - previous.produced) / seconds, resultsPerSecond: Double(results - previous.results) / seconds,
                rssMiB: Double(process.rssKiB) / 1024, cpuSeconds: process.cpuSeconds, cpuPercent: (process.cpuSeconds - previous.cpu) / seconds * 100,
                p50: percentile(window, 0.5), p99: percentile(window, 0.99), windowResults: window.count,
                simulatorCPUSeconds: ProcessSample(pid: simulator.process.processIdentifier).cpuSeconds,
                clusterCPUSeconds: ProcessSample(pid: clusterPID).cpuSeconds)
            samples.append(sample)
            threadSamples.append((sample.elapsed, results, ThreadSample(pid: relayPID)))
            print(sample.line)
            try csv.write(contentsOf: Data((sample.csvRow + "\n").utf8))
            previous = (now, produced, results, process.cpuSeconds)

            let answered = tally.answered
            if answered != lastProgress.answered { lastProgress = (now, answered) }
            if finished {
                if answered >= events * devicesPerUser { break }
                if now - lastProgress.at > .seconds(60) {
                    print("soak: no new results for 60 s; \(events * devicesPerUser - answered) (event, device) pairs without a result")
                    break
                }
                if now - start > .seconds(minutes * 60) + drainLimit {
                    print("soak: results still missing \(drainLimit) after production ended")
                    break
                }
            }
        }
        group.cancelAll()
    }
    let end = ContinuousClock.now
    let relayAtEnd = ProcessSample(pid: relayPID)
    let simulatorAtEnd = ProcessSample(pid: simulator.process.processIdentifier)
    let clusterAtEnd = ProcessSample(pid: clusterPID)
    var relayExit: Int32 = -1
    if !relayDied {
        relay.process.terminate()
        relay.process.waitUntilExit()
        relayExit = relay.process.terminationStatus
    }
    await reader.close()
    await producer.close()
    simulator.process.terminate()
    simulator.process.waitUntilExit()
    if let mockCluster {
        try? mockCluster.input.fileHandleForWriting.close()
        mockCluster.process.waitUntilExit()
    }
    await front?.close()
    noida = nil
    try csv.close()

    // The report.
    let produced = production.acknowledged.load(ordering: .relaxed)
    let expected = produced * devicesPerUser
    let missing = tally.missing(produced: produced)
    let latencies = tally.runLatencies
    let productionSeconds = production.seconds ?? (end - start).seconds
    let producing = samples.filter { $0.phase == "produce" }
    // The second half by the samples' clock (as scripts/plot_soak.py draws it).
    let secondHalf = producing.filter { $0.elapsed >= (producing.last?.elapsed ?? 0) / 2 }
    let slope = leastSquaresSlope(secondHalf.map { ($0.elapsed, $0.rssMiB) })
    print("")
    print(String(format: "soak: produced %d of %d events in %.0f s: %.0f events/s (target %d); %d delivery failures",
                 produced, events, productionSeconds, Double(produced) / productionSeconds, rate, production.failed.load(ordering: .relaxed)))
    print(String(format: "results: %d (event, device) pairs of %d answered, %d missing, %d answered twice, %d not ours; %d results in %.0f s",
                 tally.answered, expected, missing, tally.duplicates, tally.unexpected, tally.results, (end - start).seconds))
    print("statuses: \(tally.statuses.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
    print("event→answer latency over the run: p50 \(latencies.percentile(0.5)) ms, p90 \(latencies.percentile(0.9)) ms, p99 \(latencies.percentile(0.99)) ms, "
        + "p99.9 \(latencies.percentile(0.999)) ms, max \(latencies.maximum) ms")
    let requests = requestLatencies(deviceLog: deviceLog, tally: tally)
    print("produce→APNs request latency over the run (\(requests.total) requests): p50 \(requests.percentile(0.5)) ms, p90 \(requests.percentile(0.9)) ms, "
        + "p99 \(requests.percentile(0.99)) ms, p99.9 \(requests.percentile(0.999)) ms, max \(requests.maximum) ms")
    let visible = tally.visibleLatencies
    print("produce→result visible (read_committed) latency over the run: p50 \(visible.percentile(0.5)) ms, p90 \(visible.percentile(0.9)) ms, "
        + "p99 \(visible.percentile(0.99)) ms, p99.9 \(visible.percentile(0.999)) ms, max \(visible.maximum) ms")
    if let first = producing.first, let last = producing.last {
        print(String(format: "relay RSS: %.1f MiB at %.0f s, %.1f MiB at %.0f s, peak %.1f MiB", first.rssMiB, first.elapsed, last.rssMiB, last.elapsed,
                     Double(relayAtEnd.peakKiB) / 1024))
    }
    if let slope {
        print(String(format: "relay RSS trend over the second half of production (%d samples from %.0f s): %+.2f MiB per 10 min",
                     secondHalf.count, secondHalf.first?.elapsed ?? 0, slope * 600))
    } else {
        print("relay RSS trend: too few samples in the second half of production")
    }
    // From the first sample after start-up (20 s: restore, registry, connections) to the end of production.
    if let first = threadSamples.first(where: { $0.elapsed >= 19 }), let last = threadSamples.last(where: { $0.elapsed <= (producing.last?.elapsed ?? 0) }),
       last.elapsed > first.elapsed {
        print(String(format: "relay CPU per notification by thread, %.0f-%.0f s: ", first.elapsed, last.elapsed)
            + last.threads.since(first.threads).report(notifications: last.results - first.results))
    }
    print(String(format: "CPU seconds over %.0f s: relay %.1f (%.2f cores on average), simulator %.1f, cluster %.1f", (end - start).seconds,
                 relayAtEnd.cpuSeconds, relayAtEnd.cpuSeconds / (end - start).seconds, simulatorAtEnd.cpuSeconds, clusterAtEnd.cpuSeconds))
    print("relay exit on SIGTERM: \(relayDied ? "died before the end" : "\(relayExit)")")
    print("samples: \(work)/soak.csv")
    if relayDied || missing > 0 || produced < events {
        print("soak: FAILED (\(missing) results missing\(relayDied ? ", the relay died" : "")\(produced < events ? ", \(events - produced) events not produced" : ""))")
        exit(1)
    }
    print("soak: every (event, device) has a result")
}

/// Produce → APNs request per delivery in the simulator's device log (each line's `received_at` and the event its
/// payload names, `e`), for the events whose produce time `tally` kept.
func requestLatencies(deviceLog: String, tally: SoakTally) -> LatencyHistogram {
    var histogram = LatencyHistogram()
    guard let data = FileManager.default.contents(atPath: deviceLog) else { return histogram }
    let receivedField = Array("\"received_at\":".utf8)
    let eventField = Array("\"e\":\"s".utf8)
    for line in data.split(separator: UInt8(ascii: "\n")) {
        let bytes = Array(line)
        guard let received = RecordScan.integer(after: receivedField, in: bytes), let start = RecordScan.range(after: eventField, in: bytes),
              let index = RecordScan.digits(in: bytes[start...]) else { continue }
        let producedAt = tally.producedAt(index)
        if producedAt > 0 { histogram.add(received - Int(producedAt)) }
    }
    return histogram
}

/// Produces `events` events at `rate` per second: every 10 ms, the events due by then (the clock,
/// not the previous batch, decides how many, so a slow tick is caught up and the rate holds).
/// Event i is `s<i>` for user `i % users`, whose seqs go up by one per event; `produced` is told when each is handed
/// to the producer (epoch milliseconds).
func produceSteadily(_ producer: KafkaProducer, events: Int, users: Int, rate: Int, production: SoakProduction,
                     produced: (Int, Int64) -> Void = { _, _ in }) async throws {
    var nextSeq = [Int](repeating: 1, count: users)
    var enqueued = 0
    let start = ContinuousClock.now
    var tick = start
    while enqueued < events {
        tick = tick.advanced(by: .milliseconds(10))
        try await Task.sleep(until: tick, clock: .continuous)
        let due = min(events, Int(Double(rate) * (ContinuousClock.now - start).seconds))
        while enqueued < due {
            let user = enqueued % users
            produced(enqueued, Int64((Date().timeIntervalSince1970 * 1_000).rounded()))
            let pending = try await producer.enqueue(benchEvent(id: "s\(enqueued)", user: user, seq: nextSeq[user]))
            pending.onReport { report in
                switch report {
                case .success: production.acknowledged.add(1, ordering: .relaxed)
                case .failure: production.failed.add(1, ordering: .relaxed)
                }
            }
            nextSeq[user] += 1
            enqueued += 1
        }
    }
    try await producer.flush()
    let took = ContinuousClock.now - start
    production.finishedAfterMilliseconds.store(Int(took.seconds * 1000), ordering: .releasing)
}

/// Creates the events topic with `partitions` partitions and `push.devices` on a broker that creates topics through
/// the admin API (the relay creates the rest like it); returns once they exist.
func createSoakTopics(bootstrap: String, partitions: Int) async throws {
    let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: bootstrap), logger: makeQuietLogger())
    try await admin.createTopics([KafkaTopicSpecification(name: "push.events", partitions: partitions, replicationFactor: -1),
                                  KafkaTopicSpecification(name: "push.devices", partitions: max(16, partitions / 2), replicationFactor: -1,
                                                          configs: ["cleanup.policy": "compact"])])
}
