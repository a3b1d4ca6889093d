// `relay-harness mixed`: latency under mixed load, per class of notification, measured from outside: from the
// moment the harness produced an event to the moment its result reached a `read_committed` reader of
// `push.results` (so the time an event waits in Kafka while the relay's consumption is paused counts, as a user
// of the service feels it). Every part runs in its own process, as in `bench`; the simulator answers every
// request after `--apns-latency-ms` (20 by default).
//
// Two scenarios, each a baseline and then the same traffic under load, in one relay run that owns every partition
// and has sent one uncounted round of alerts first:
// - flood: `--alert-users` users (200) get a priority-10 alert each, alone; then `--bulk-users` users (10,000) get
//   `--bulk-events` background pushes in all (60,000: priority 5, `content-available`), and 2 s into that flood the
//   alert users get one more alert each. Compared: the alerts' p99 during the flood against alone.
// - hot: `--other-users` users (2,000, one device each) get two events each, alone; then one user with
//   `--hot-devices` devices (200) gets `--hot-events` events (1,000) and, right behind them, the other users get two
//   more each. Compared: the other users' p99 beside the hot user against alone, and the most notifications in
//   flight (the relay's `apns_relay_notifications_in_flight`, sampled every 100 ms) against `relay.max_in_flight`.
import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Kafka
import Synchronization
import TestSupport

/// What the results reader saw, per class of event (the event id's first letter): the latency of each (event,
/// device) from its event's production, counted once.
final class MixedTally: Sendable {
    private struct State {
        var producedAt: [String: ContinuousClock.Instant] = [:]
        var seen: Set<String> = []
        var latencies: [Character: [Int]] = [:]
        var statuses: [String: Int] = [:]
        var duplicates = 0
    }

    private let state = Mutex(State())

    /// Event `id` was handed to the producer now.
    func produced(_ id: String) {
        let now = ContinuousClock.now
        state.withLock { $0.producedAt[id] = now }
    }

    func add(_ value: [UInt8]) {
        let now = ContinuousClock.now
        guard let event = RecordScan.string(after: RecordScan.eventIDField, in: value), let first = event.first else { return }
        let pair = event + "/" + (RecordScan.string(after: RecordScan.tokenField, in: value) ?? "")
        let status = RecordScan.string(after: RecordScan.statusField, in: value) ?? "?"
        state.withLock { state in
            guard state.seen.insert(pair).inserted else {
                state.duplicates += 1
                return
            }
            state.statuses[status, default: 0] += 1
            guard let producedAt = state.producedAt[event] else { return }
            let milliseconds = Int((now - producedAt).seconds * 1_000)
            state.latencies[first, default: []].append(milliseconds)
        }
    }

    /// Results of class `kind` received so far.
    func count(_ kind: Character) -> Int { state.withLock { $0.latencies[kind]?.count ?? 0 } }

    /// Takes the latencies of class `kind` received so far (the next phase starts empty).
    func take(_ kind: Character) -> [Int] {
        state.withLock { state in
            defer { state.latencies[kind] = [] }
            return (state.latencies[kind] ?? []).sorted()
        }
    }

    var statuses: [String: Int] { state.withLock { $0.statuses } }
    var duplicates: Int { state.withLock { $0.duplicates } }
}

/// The value of the relay's metric `name` (one without labels) from its metrics endpoint (`nil` when it does not answer).
func metric(_ name: String, port: Int) async -> Int? {
    guard let url = URL(string: "http://127.0.0.1:\(port)/metrics"),
          let (data, _) = try? await URLSession.shared.data(from: url) else { return nil }
    for line in String(decoding: data, as: UTF8.self).split(separator: "\n") where line.hasPrefix(name + " ") {
        return line.split(separator: " ").last.flatMap { Double($0) }.map { Int($0) }
    }
    return nil
}

/// Writes `line` to standard output at once (`print` holds it in a buffer when the output is a pipe or a file).
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func runMixed(_ arguments: [String]) async throws {
    let scenario = argument("--scenario", in: arguments) ?? "both"
    let apnsLatency = intArgument("--apns-latency-ms", 20, in: arguments)
    let partitions = intArgument("--partitions", 32, in: arguments)
    let maxInFlight = intArgument("--max-in-flight", 10_000, in: arguments)
    let alertUsers = intArgument("--alert-users", 200, in: arguments)
    let bulkUsers = intArgument("--bulk-users", 10_000, in: arguments)
    let bulkEvents = intArgument("--bulk-events", 60_000, in: arguments)
    let otherUsers = intArgument("--other-users", 2_000, in: arguments)
    let hotDevices = intArgument("--hot-devices", 200, in: arguments)
    let hotEvents = intArgument("--hot-events", 1_000, in: arguments)
    let work = try workDirectory(arguments, prefix: "relay-mixed")
    let relayBinary = relayBinaryPath()
    say("mixed: scenario \(scenario), APNs answers in \(apnsLatency) ms, \(partitions) partitions, relay.max_in_flight \(maxInFlight), work dir \(work)")

    let (cluster, _, bootstrap) = try startClusterProcess(partitions: partitions, brokers: 1, resultsPartitions: partitions * 4)
    let producer = try KafkaProducer(configuration: KafkaConfiguration(bootstrapServers: bootstrap, properties: ["linger.ms": "2"]),
                                     logger: makeQuietLogger())
    // Tokens by range: alert users from 1, bulk users from 100,001, the hot user's from 300,001, the others from 400,001.
    func register(user: String, token: Int) async throws {
        _ = try await producer.enqueue(KafkaRecord(topic: "push.devices", key: Array(tokenHex(token).utf8),
            value: Array("{\"user\":\"\(user)\",\"topic\":\"com.example.app\",\"environment\":\"production\",\"registered_at\":1}".utf8)))
    }
    for user in 0..<alertUsers { try await register(user: "alert-\(user)", token: 1 + user) }
    for user in 0..<bulkUsers { try await register(user: "bulk-\(user)", token: 100_001 + user) }
    say("registering \(alertUsers + bulkUsers + hotDevices + otherUsers) devices")
    for device in 0..<hotDevices { try await register(user: "hot", token: 300_001 + device) }
    for user in 0..<otherUsers { try await register(user: "other-\(user)", token: 400_001 + user) }
    try await producer.flush()

    // The simulator, answering every request after `apnsLatency` ms.
    let key = P256.Signing.PrivateKey()
    try key.pemRepresentation.write(toFile: "\(work)/key.p8", atomically: true, encoding: .utf8)
    try key.publicKey.pemRepresentation.write(toFile: "\(work)/key.pub.pem", atomically: true, encoding: .utf8)
    let (simulator, simulatorOutput) = try Child.start(CommandLine.arguments[0], [
        "simulator", "--cert-dir", "\(work)/certs", "--jwt-public-key", "\(work)/key.pub.pem", "--latency-ms", "\(apnsLatency)",
    ], output: nil)
    guard let simulatorReady = Child.firstLine(of: simulatorOutput!, where: { $0.hasPrefix("READY ") }),
          let simulatorPort = Int(simulatorReady.dropFirst("READY ".count)) else {
        say("mixed: the simulator did not start"); exit(1)
    }

    let tally = MixedTally()
    // A short fetch wait: with `read_committed` a transaction's commit does not end a fetch that waits for data, and
    // the default 500 ms would be in every latency.
    let reader = try KafkaConsumer(configuration: KafkaConsumerConfiguration(
                                       kafka: KafkaConfiguration(bootstrapServers: bootstrap, properties: ["fetch.wait.max.ms": "5"]),
                                       groupID: "relay-harness-mixed", topics: ["push.results"]),
                                   logger: makeQuietLogger())
    let readerTask = Task {
        for try await event in reader.events {
            if case .message(let message) = event, let value = message.value { tally.add(Array(value)) }
        }
    }

    let opsPort = try LocalServerProcess.freePort()
    try writeRelayConfiguration(work: work, bootstrap: bootstrap, simulatorPort: simulatorPort, connections: 4, maxInFlight: maxInFlight,
                                httpPort: opsPort, kafkaProperties: relayKafkaProperties(in: arguments))
    let relay = try startRelayProcess(relayBinary: relayBinary, work: work)
    let inFlightPeak = Atomic<Int>(0)
    let sampler = Task {
        while !Task.isCancelled {
            if let inFlight = await metric("apns_relay_notifications_in_flight", port: opsPort) { inFlightPeak.max(inFlight) }
            try? await Task.sleep(for: .milliseconds(100))
        }
    }

    // The baselines start once the relay is ready and owns every partition (the group's first assignment waits for
    // its initial rebalance delay), after a round of alerts that is not counted (connections opened, JWT signed).
    let readyBy = ContinuousClock.now + .seconds(120)
    while true {
        let ready = await relayIsReady(port: opsPort)
        let assigned = await metric("apns_relay_partitions_assigned", port: opsPort) ?? 0
        if ready && assigned >= partitions { break }
        guard relay.process.isRunning, ContinuousClock.now < readyBy else { say("mixed: the relay did not become ready; see \(work)/relay.log"); exit(1) }
        try await Task.sleep(for: .milliseconds(100))
    }

    var nextSeq: [String: Int] = [:]
    func event(_ id: String, user: String, apns: String, badge: Bool) -> KafkaRecord {
        let seq = nextSeq[user, default: 1]
        nextSeq[user] = seq + 1
        let value = "{\"id\":\"\(id)\",\"user\":\"\(user)\",\"seq\":\(seq)\(badge ? ",\"badge\":{\"increment\":1}" : ""),\"apns\":\(apns)}"
        return KafkaRecord(topic: "push.events", key: Array(user.utf8), value: Array(value.utf8))
    }
    let alert = "{\"priority\":10,\"payload\":{\"aps\":{\"alert\":{\"title\":\"Hi\",\"body\":\"Now\"},\"sound\":\"default\"}}}"
    let background = "{\"push_type\":\"background\",\"priority\":5,\"payload\":{\"aps\":{\"content-available\":1}}}"
    var produced = 0
    func produce(_ record: KafkaRecord, id: String) async throws {
        tally.produced(id)
        _ = try await producer.enqueue(record)
        produced += 1
    }
    /// Waits until `count` results of class `kind` are in (or 300 s pass, or the relay ends).
    func awaitResults(_ kind: Character, _ count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(300)
        while tally.count(kind) < count {
            guard relay.process.isRunning else { say("mixed: the relay exited (\(relay.process.terminationStatus)); see \(work)/relay.log"); exit(1) }
            guard ContinuousClock.now < deadline else { say("mixed: \(tally.count(kind)) of \(count) results of class \(kind) after 300 s"); exit(1) }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
    func report(_ label: String, _ latencies: [Int]) -> Int {
        say(String(format: "  %@: %d results, p50 %d ms, p99 %d ms, max %d ms", label, latencies.count,
                     percentile(latencies, 0.5), percentile(latencies, 0.99), latencies.last ?? 0))
        return percentile(latencies, 0.99)
    }

    for user in 0..<alertUsers { try await produce(event("a\(produced)", user: "alert-\(user)", apns: alert, badge: true), id: "a\(produced)") }
    try await producer.flush()
    try await awaitResults("a", alertUsers)
    _ = tally.take("a")

    if scenario == "flood" || scenario == "both" {
        say("flood:")
        for user in 0..<alertUsers { try await produce(event("a\(produced)", user: "alert-\(user)", apns: alert, badge: true), id: "a\(produced)") }
        try await producer.flush()
        try await awaitResults("a", alertUsers)
        let alone = report("alerts alone", tally.take("a"))
        let floodStart = ContinuousClock.now
        var alertsSent = false
        for index in 0..<bulkEvents {
            try await produce(event("b\(index)", user: "bulk-\(index % bulkUsers)", apns: background, badge: false), id: "b\(index)")
            if !alertsSent && ContinuousClock.now - floodStart >= .seconds(2) {
                alertsSent = true
                for user in 0..<alertUsers { try await produce(event("a\(produced)", user: "alert-\(user)", apns: alert, badge: true), id: "a\(produced)") }
            }
        }
        if !alertsSent {
            try await Task.sleep(until: floodStart + .seconds(2))
            for user in 0..<alertUsers { try await produce(event("a\(produced)", user: "alert-\(user)", apns: alert, badge: true), id: "a\(produced)") }
        }
        try await producer.flush()
        try await awaitResults("a", alertUsers)
        let during = report("alerts during the flood", tally.take("a"))
        try await awaitResults("b", bulkEvents)
        _ = report("background pushes", tally.take("b"))
        say(String(format: "  alert p99 during the flood / alone: %.1fx (bound: %d ms = max(1 s, 3x alone))",
                     Double(during) / Double(max(1, alone)), max(1_000, 3 * alone)))
    }

    if scenario == "hot" || scenario == "both" {
        say("hot user:")
        inFlightPeak.store(0, ordering: .relaxed)
        for round in 0..<2 {
            for user in 0..<otherUsers { try await produce(event("o\(round)-\(user)", user: "other-\(user)", apns: alert, badge: true), id: "o\(round)-\(user)") }
        }
        try await producer.flush()
        try await awaitResults("o", otherUsers * 2)
        let alone = report("other users alone", tally.take("o"))
        for index in 0..<hotEvents { try await produce(event("h\(index)", user: "hot", apns: alert, badge: true), id: "h\(index)") }
        for round in 2..<4 {
            for user in 0..<otherUsers { try await produce(event("o\(round)-\(user)", user: "other-\(user)", apns: alert, badge: true), id: "o\(round)-\(user)") }
        }
        try await producer.flush()
        try await awaitResults("o", otherUsers * 2)
        let beside = report("other users beside the hot user", tally.take("o"))
        try await awaitResults("h", hotEvents * hotDevices)
        _ = report("the hot user's devices", tally.take("h"))
        say(String(format: "  other users' p99 beside the hot user / alone: %.1fx (bound: %d ms = max(2 s, 3x alone)); most notifications in flight %d (relay.max_in_flight %d)",
                     Double(beside) / Double(max(1, alone)), max(2_000, 3 * alone), inFlightPeak.load(ordering: .relaxed), maxInFlight))
    }
    say("statuses: \(tally.statuses.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")); results seen twice: \(tally.duplicates)")

    sampler.cancel()
    relay.process.interrupt()
    relay.process.waitUntilExit()
    readerTask.cancel()
    await reader.close()
    await producer.close()
    simulator.process.terminate()
    simulator.process.waitUntilExit()
    try? cluster.input.fileHandleForWriting.close()  // the cluster process stops at the end of its input
    cluster.process.waitUntilExit()
}

extension Atomic where Value == Int {
    /// Raises the value to `candidate` when that is larger.
    func max(_ candidate: Int) {
        var current = load(ordering: .relaxed)
        while candidate > current {
            let (exchanged, original) = compareExchange(expected: current, desired: candidate, ordering: .relaxed)
            if exchanged { return }
            current = original
        }
    }
}
