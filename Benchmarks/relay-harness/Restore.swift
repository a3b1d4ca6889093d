// `relay-harness restore`: the relay's start-up at scale. Preloads `push.badge-state` with the state of
// `--users` users (1,000,000) and `push.devices` with `--devices` registrations (1,000,000), starts
// `apns-relay run`, and measures how long it takes to be ready (every partition's badge state
// restored and the registry read: `/readyz` 200) and the relay's peak RSS holding all of it.
//
// The time to ready includes joining the group; the restore itself is reported from the relay's
// log: from "partitions assigned" to the last partition's "badge state restored".
import Foundation
import Kafka

func runRestore(_ arguments: [String]) async throws {
    let users = intArgument("--users", 1_000_000, in: arguments)
    let devices = intArgument("--devices", 1_000_000, in: arguments)
    let partitions = intArgument("--partitions", 32, in: arguments)
    let work = try workDirectory(arguments, prefix: "relay-harness-restore")
    let relayBinary = relayBinaryPath()
    print("restore: \(users) users' badge state, \(devices) registered devices, \(partitions) partitions, work dir \(work)")

    // The mock keeps ~5 MB per partition: a registration is ~170 bytes, a badge state ~90.
    let devicesPartitions = max(16, devices * 170 / 3_000_000)
    let statePartitions = max(partitions, users * 90 / 3_000_000)
    guard statePartitions == partitions else {
        print("relay-harness: \(users) users' state needs at least \(statePartitions) partitions (the mock keeps ~5 MB each); pass --partitions \(statePartitions)")
        exit(2)
    }
    let (cluster, _, bootstrap) = try startClusterProcess(partitions: partitions, brokers: 1, devicesPartitions: devicesPartitions)
    let kafka = KafkaConfiguration(bootstrapServers: bootstrap, properties: ["linger.ms": "50"])

    let preloadStart = ContinuousClock.now
    let producer = try KafkaProducer(configuration: kafka, logger: makeQuietLogger())
    let updatedAt = Int64(Date().timeIntervalSince1970 * 1000)
    for user in 0..<users {
        // The shape the relay writes (key = user; partitioned like the user's events).
        let seq = 1 + user % 50
        let value = "{\"badge\":\(seq),\"seq\":\(seq),\"offset\":\(user),\"updated_at\":\(updatedAt)}"
        _ = try await producer.enqueue(KafkaRecord(topic: "push.badge-state", key: Array("u-\(user)".utf8), value: Array(value.utf8)))
    }
    for device in 0..<devices {
        let user = device % max(1, users)
        _ = try await producer.enqueue(KafkaRecord(topic: "push.devices", key: Array(tokenHex(device + 1).utf8),
            value: Array("{\"user\":\"u-\(user)\",\"topic\":\"com.example.app\",\"environment\":\"production\",\"registered_at\":1}".utf8)))
    }
    try await producer.flush()
    await producer.close()
    print(String(format: "preloaded %d badge states and %d registrations in %.1f s", users, devices, (ContinuousClock.now - preloadStart).seconds))

    let (simulator, port) = try startSimulatorProcess(relayBinary: relayBinary, work: work)
    try writeRelayConfiguration(work: work, bootstrap: bootstrap, simulatorPort: port, logLevel: "info", logFormat: "json")
    let start = ContinuousClock.now
    let relay = try startRelayProcess(relayBinary: relayBinary, work: work)
    let relayPID = relay.process.processIdentifier

    var httpPort: Int?
    var ready = false
    var peakKiB = 0
    while ContinuousClock.now - start < .seconds(300) {
        try await Task.sleep(for: .milliseconds(100))
        guard relay.process.isRunning else { print("relay-harness: the relay exited (\(relay.process.terminationStatus)); see \(work)/relay.log"); exit(1) }
        peakKiB = max(peakKiB, ProcessSample(pid: relayPID).peakKiB)
        if httpPort == nil { httpPort = opsPort(inLog: "\(work)/relay.log") }
        if let httpPort, await relayIsReady(port: httpPort) {
            ready = true
            break
        }
    }
    let toReady = (ContinuousClock.now - start).seconds
    // Settle: RSS after the restore's transient buffers are freed and returned (jemalloc returns freed pages after 1 s).
    try await Task.sleep(for: .seconds(12))
    let settled = ProcessSample(pid: relayPID)
    peakKiB = max(peakKiB, settled.peakKiB)
    let (assigned, restored, restoredRecords) = restoreSpan(inLog: "\(work)/relay.log")
    relay.process.terminate()
    relay.process.waitUntilExit()
    simulator.process.terminate()
    simulator.process.waitUntilExit()
    try? cluster.input.fileHandleForWriting.close()
    cluster.process.waitUntilExit()

    guard ready else { print("relay-harness: the relay was not ready within 300 s; see \(work)/relay.log"); exit(1) }
    print(String(format: "ready (/readyz 200) %.1f s after the relay started", toReady))
    if let assigned, let restored {
        print(String(format: "restore: %.2f s from the assignment to the last partition restored (%d records read)", restored - assigned, restoredRecords))
    }
    print(String(format: "relay RSS: peak %.0f MiB, %.0f MiB once settled (%d users, %d devices)", Double(peakKiB) / 1024, Double(settled.rssKiB) / 1024, users, devices))
    print(String(format: "relay CPU: %.1f s", settled.cpuSeconds))
}

/// The ops endpoint's port from the relay's "ops endpoint listening" log line.
private func opsPort(inLog path: String) -> Int? {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8),
          let line = text.split(separator: "\n").first(where: { $0.contains("ops endpoint listening") }),
          let range = line.range(of: "127.0.0.1:") ?? line.range(of: "0.0.0.0:") ?? line.range(of: "]:") else { return nil }
    return Int(line[range.upperBound...].prefix(while: \.isNumber))
}

/// Seconds (of the log's timestamps) of the first "partitions assigned" line and the last "badge state
/// restored" line, and the records those restores read.
private func restoreSpan(inLog path: String) -> (assigned: Double?, restored: Double?, records: Int) {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return (nil, nil, 0) }
    var assigned: Double?
    var restored: Double?
    var records = 0
    for line in text.split(separator: "\n") {
        guard let time = logTimestamp(line) else { continue }
        if line.contains("partitions assigned"), assigned == nil { assigned = time }
        if line.contains("badge state restored") {
            restored = time
            if let range = line.range(of: "\"records\":\"") { records += Int(line[range.upperBound...].prefix(while: \.isNumber)) ?? 0 }
        }
    }
    return (assigned, restored, records)
}

/// The `"ts"` field of a JSON log line (`...THH:MM:SS.fff...`) as seconds of the day: enough for spans
/// within one run.
private func logTimestamp(_ line: Substring) -> Double? {
    guard let range = line.range(of: "\"ts\":\""), let t = line[range.upperBound...].firstIndex(of: "T") else { return nil }
    let clock = line[line.index(after: t)...].prefix(while: { $0.isNumber || $0 == ":" || $0 == "." })
    let parts = clock.split(separator: ":")
    guard parts.count == 3, let hours = Double(parts[0]), let minutes = Double(parts[1]), let seconds = Double(parts[2]) else { return nil }
    return hours * 3600 + minutes * 60 + seconds
}
