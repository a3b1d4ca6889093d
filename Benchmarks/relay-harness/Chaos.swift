// `relay-harness chaos`: crash trials of the built `apns-relay run` against the embedded cluster and
// the APNs simulator, each in its own process.
//
// Standing faults for the whole run: the simulator sends a GOAWAY every 1,000 streams, answers 503
// to every 20th request (5%), closes a connection abruptly every 5,000 requests, and 1% of the
// tokens answer 410. Each trial produces a new batch of events (seqs shuffled in windows of 3; every
// `--seqless-every`th user sends events without seq; `--duplicate-percent` of the numbered events are
// produced a second time at the end of the batch, as a retrying producer would) while a relay runs,
// kills it with SIGKILL at a random moment, restarts it, waits until every event has its results,
// stops it with SIGTERM and checks:
//   - every (event, live device) has a result;
//   - every user's badge state equals the model (no event lost, none applied twice);
//   - no device saw its badge go down, and every live device ends at its user's count;
//   - the restarted relay exits 0 on SIGTERM;
//   - no (event, device) got a `failed` result: every fault here is shorter than `relay.max_retry_s`, so
//     `failed` (APNs unusable that long, or a final answer it never gives here) is always a fault of the relay.
// Trial 2 also takes a Kafka broker down for `--broker-down-s` seconds while the relay works.
// Trial 3 makes every broker refuse writes for 20 s while the relay works (results, changelog).
// Trial 4 refuses the first 40 ListOffsets requests after the restart (the first step of every
// badge-state restore and of the device registry's read): restores fail and are read again.
// Trial 5 slows APNs (each of the next 2,000 requests held 8 s) and starts a second relay: the
// first hands partitions over with sends in flight (cancelled at its drain deadline); the second
// is stopped with SIGTERM at the end of the trial.
// Trial 6 is a GOAWAY storm: for `--goaway-storm-s` seconds (25) APNs answers every stream, then sends
// GOAWAY (NO_ERROR) naming it, refusing the streams after it, as it does when it rotates connections.
// Trial 7 is a 5xx spell: for `--server-error-s` seconds (60) every request is answered 500 or 503.
import Crypto
import Foundation
import TestSupport
import Kafka

struct TrialReport {
    var trial: Int
    var events: Int
    var fault: String
    var killedAfter: Double
    var recoveredIn: Double
    var missingResults: Int
    var badgeMismatches: Int
    var badgeWentDown: Int
    var stopStatus: Int32
    /// `failed` results published during the trial, by reason.
    var failedResults: [String: Int]

    var failedCount: Int { failedResults.values.reduce(0, +) }
    var passed: Bool { missingResults == 0 && badgeMismatches == 0 && badgeWentDown == 0 && stopStatus == 0 && failedCount == 0 }
}


func runChaos(_ arguments: [String]) async throws {
    let trials = intArgument("--trials", 10, in: arguments)
    let users = intArgument("--users", 500, in: arguments)
    let eventsPerTrial = intArgument("--events-per-trial", 4_000, in: arguments)
    let brokerDownSeconds = intArgument("--broker-down-s", 30, in: arguments)
    let seqLessEvery = max(1, intArgument("--seqless-every", 10, in: arguments))
    let duplicatePercent = intArgument("--duplicate-percent", 5, in: arguments)
    let goAwayStormSeconds = intArgument("--goaway-storm-s", 25, in: arguments)
    let serverErrorSeconds = intArgument("--server-error-s", 60, in: arguments)
    let seqLessUsers = Set((0..<users).filter { $0 % seqLessEvery == seqLessEvery - 1 })
    var random = SeededGenerator(seed: UInt64(intArgument("--seed", 1, in: arguments)))
    let work = try workDirectory(arguments, prefix: "relay-chaos")
    let relayBinary = relayBinaryPath()
    let eventsPerUser = max(1, eventsPerTrial / users)
    print("chaos: \(trials) trials, \(users) users x 2 devices (\(seqLessUsers.count) without seq), \(eventsPerUser * users) events per trial + \(duplicatePercent)% produced twice, broker down \(brokerDownSeconds) s in trial 2; work dir \(work)")

    // The cluster (3 brokers), in its own process.
    let (cluster, clusterOutput, bootstrap) = try startClusterProcess(partitions: 6, brokers: 3)
    let kafka = KafkaConfiguration(bootstrapServers: bootstrap)
    func clusterCommand(_ line: String) throws {
        try cluster.input.fileHandleForWriting.write(contentsOf: Data("\(line)\n".utf8))
        _ = Child.firstLine(of: clusterOutput, where: { $0.hasSuffix(line) })
    }

    // Devices: tokens 2u+1 and 2u+2 for user u; every 100th token is dead (410).
    let tokens = (0..<users * 2).map { tokenHex($0 + 1) }
    let deadTokens = Set(tokens.enumerated().filter { $0.offset % 100 == 99 }.map(\.element))
    try deadTokens.joined(separator: "\n").write(toFile: "\(work)/dead-tokens.txt", atomically: true, encoding: .utf8)

    // The simulator with its standing faults, in its own process.
    let key = P256.Signing.PrivateKey()
    try key.pemRepresentation.write(toFile: "\(work)/key.p8", atomically: true, encoding: .utf8)
    try key.publicKey.pemRepresentation.write(toFile: "\(work)/key.pub.pem", atomically: true, encoding: .utf8)
    let deviceLog = "\(work)/device-log.jsonl"
    let (simulator, simulatorOutput) = try Child.start(CommandLine.arguments[0], [
        "simulator", "--cert-dir", "\(work)/certs", "--jwt-public-key", "\(work)/key.pub.pem", "--dead-tokens", "\(work)/dead-tokens.txt",
        "--device-log", deviceLog, "--goaway-every", "1000", "--fail-every", "20", "--reset-every", "5000",
    ], output: nil)
    guard let simulatorReady = Child.firstLine(of: simulatorOutput!, where: { $0.hasPrefix("READY ") }),
          let port = Int(simulatorReady.dropFirst("READY ".count)) else {
        print("chaos: the simulator did not start"); exit(1)
    }
    func simulatorCommand(_ line: String) throws {
        try simulator.input.fileHandleForWriting.write(contentsOf: Data("\(line)\n".utf8))
        _ = Child.firstLine(of: simulatorOutput!, where: { $0.hasSuffix(line) })
    }

    try writeRelayConfiguration(
        work: work, bootstrap: bootstrap, simulatorPort: port,
        // A killed relay's group membership expires in 6 s rather than librdkafka's 45 s.
        kafkaProperties: [("session.timeout.ms", "6000"), ("heartbeat.interval.ms", "500")]
            + (argument("--relay-kafka-debug", in: arguments).map { [("debug", $0)] } ?? []),
        relaySettings: [("shutdown_timeout_s", "10"), ("reorder_window_ms", "5000")],
        logLevel: argument("--relay-log-level", in: arguments) ?? "warning")

    // The harness's own records must all exist whatever the trial's faults: a record queued for a
    // broker that is down waits for it (no message timeout), and every delivery is checked.
    var reliableKafka = kafka
    reliableKafka.properties["message.timeout.ms"] = "0"
    let producer = try KafkaProducer(configuration: reliableKafka, logger: makeQuietLogger())
    func produceAll(_ records: [KafkaRecord]) async throws {
        var deliveries: [KafkaPendingDelivery] = []
        deliveries.reserveCapacity(records.count)
        for record in records { deliveries.append(try await producer.enqueue(record)) }
        for delivery in deliveries { _ = try await delivery.report() }
    }
    try await produceAll(tokens.enumerated().map { index, token in
        KafkaRecord(topic: "push.devices", key: Array(token.utf8),
            value: Array("{\"user\":\"u-\(index / 2)\",\"topic\":\"com.example.app\",\"environment\":\"production\",\"registered_at\":1}".utf8))
    })

    var produced = [Int](repeating: 0, count: users)  // the model: each event increments by 1
    var eventIDs: [(id: String, user: Int)] = []
    var reports: [TrialReport] = []
    var relayRuns = 0
    var failedSoFar: [String: Int] = [:]

    func startRelay() throws -> Child {
        relayRuns += 1
        let log = "\(work)/relay-\(relayRuns).log"
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        return try Child.start(relayBinary, ["run", "--config", "\(work)/relay.yaml"], output: try FileHandle(forWritingTo: URL(fileURLWithPath: log))).0
    }

    for trial in 1...trials {
        // This trial's events, produced while the relay runs.
        var batch: [KafkaRecord] = []
        var producedAgain: [KafkaRecord] = []
        for user in 0..<users {
            let seqLess = seqLessUsers.contains(user)
            var seqs = Array(produced[user] + 1...produced[user] + eventsPerUser)
            for start in stride(from: 0, to: seqs.count, by: 3) { seqs[start..<min(seqs.count, start + 3)].shuffle(using: &random) }
            for seq in seqs {
                let id = "t\(trial)-u\(user)-s\(seq)"
                eventIDs.append((id, user))
                // A user without seqs: each record is one increment, applied once on arrival.
                let seqField = seqLess ? "" : "\"seq\":\(seq),"
                let record = KafkaRecord(topic: "push.events", key: Array("u-\(user)".utf8), value: Array(
                    "{\"id\":\"\(id)\",\"user\":\"u-\(user)\",\(seqField)\"badge\":{\"increment\":1},\"apns\":{\"payload\":{\"aps\":{\"alert\":\"\(id)\"}}}}".utf8))
                batch.append(record)
                // A producer's retry of a numbered event (same id, same seq): a duplicate, not a second increment.
                if !seqLess && Int.random(in: 0..<100, using: &random) < duplicatePercent { producedAgain.append(record) }
            }
            produced[user] += eventsPerUser
        }
        batch += producedAgain
        let relay = try startRelay()
        let started = ContinuousClock.now
        var fault = "kill -9"
        // APNs spells begin as the trial's events arrive, and outlast the kill: the restarted relay meets them too.
        if trial == 6 && goAwayStormSeconds > 0 {
            fault = "GOAWAY after every stream \(goAwayStormSeconds) s, kill -9"
            try simulatorCommand("goaway-storm \(goAwayStormSeconds)")
        }
        if trial == 7 && serverErrorSeconds > 0 {
            fault = "500/503 for every request \(serverErrorSeconds) s, kill -9"
            try simulatorCommand("5xx \(serverErrorSeconds)")
        }
        let brokerDown = trial == 2 && brokerDownSeconds > 0
        if brokerDown {
            fault = "broker down \(brokerDownSeconds) s, kill -9"
            try clusterCommand("down 2")
        }
        if brokerDown {
            async let bringBack: Void = {
                try await Task.sleep(for: .seconds(brokerDownSeconds))
                try clusterCommand("up 2")
            }()
            try await produceAll(batch)
            try await bringBack
        } else {
            try await produceAll(batch)
        }
        var joiner: Child?
        switch trial {
        case 3:
            fault = "writes refused 20 s, kill -9"
            try clusterCommand("refuse-writes 20")
        case 4:
            fault = "kill -9, 40 ListOffsets refused at restart"
        case 5:
            fault = "APNs +8 s, a second relay joins, kill -9"
            try simulatorCommand("slow 8000 2000")
            joiner = try startRelay()
            try await Task.sleep(for: .seconds(12))
        default:
            break
        }
        // A random moment while it works.
        try await Task.sleep(for: .milliseconds(Int.random(in: 500...4_000, using: &random)))
        kill(relay.process.processIdentifier, SIGKILL)
        relay.process.waitUntilExit()
        let killedAfter = (ContinuousClock.now - started).seconds

        // Restart; wait until every (event, live device) has a result.
        if trial == 4 { try clusterCommand("refuse-list-offsets 40") }
        let restarted = try startRelay()
        let restartedAt = ContinuousClock.now
        var check = ResultsCheck(missing: Int.max, failed: [:])
        while ContinuousClock.now - restartedAt < .seconds(180) {
            try await Task.sleep(for: .seconds(2))
            // The trial's own faults (refused ListOffsets) reach this reader too: a failed read is "not yet".
            check = (try? await checkResults(kafka: kafka, events: eventIDs, tokens: tokens, dead: deadTokens)) ?? check
            if check.missing == 0 { break }
        }
        let missing = check.missing
        let recoveredIn = (ContinuousClock.now - restartedAt).seconds
        if missing > 0 { check = try await checkResults(kafka: kafka, events: eventIDs, tokens: tokens, dead: deadTokens, explain: true) }
        let failedInTrial = check.failed.reduce(into: [String: Int]()) { trialFailed, entry in
            let new = entry.value - (failedSoFar[entry.key] ?? 0)
            if new > 0 { trialFailed[entry.key] = new }
        }
        failedSoFar = check.failed
        try await Task.sleep(for: .seconds(1))  // one more commit interval
        kill(restarted.process.processIdentifier, SIGTERM)
        if let joiner { kill(joiner.process.processIdentifier, SIGTERM) }
        restarted.process.waitUntilExit()
        joiner?.process.waitUntilExit()

        var badgeMismatches = -1
        for _ in 0..<5 where badgeMismatches < 0 {
            if let count = try? await badgeStateMismatches(kafka: kafka, model: produced, seqLess: seqLessUsers) { badgeMismatches = count } else { try await Task.sleep(for: .seconds(1)) }
        }
        let wentDown = deviceBadgesWentDown(logPath: deviceLog, model: produced, dead: deadTokens)
        let report = TrialReport(trial: trial, events: eventIDs.count, fault: fault, killedAfter: killedAfter, recoveredIn: recoveredIn,
                                 missingResults: missing, badgeMismatches: badgeMismatches, badgeWentDown: wentDown,
                                 stopStatus: restarted.process.terminationStatus | (joiner?.process.terminationStatus ?? 0),
                                 failedResults: failedInTrial)
        reports.append(report)
        print(String(format: "trial %2d: %@ after %.1f s; results complete %.1f s after the restart; missing %d, failed %d%@, badge mismatches %d, devices going down %d, exit %d: %@",
                     trial, fault, killedAfter, recoveredIn, missing, report.failedCount, describeFailed(report.failedResults), badgeMismatches, wentDown,
                     report.stopStatus, report.passed ? "ok" : "FAILED"))
    }
    await producer.close()
    simulator.process.terminate()
    simulator.process.waitUntilExit()
    try? cluster.input.fileHandleForWriting.close()
    cluster.process.waitUntilExit()

    print("\n| trial | events so far | fault | killed after (s) | results complete after restart (s) | missing results | `failed` results | badge ≠ model | badge went down | exit on SIGTERM | |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for report in reports {
        print(String(format: "| %d | %d | %@ | %.1f | %.1f | %d | %d | %d | %d | %d | %@ |", report.trial, report.events, report.fault, report.killedAfter,
                     report.recoveredIn, report.missingResults, report.failedCount, report.badgeMismatches, report.badgeWentDown, report.stopStatus,
                     report.passed ? "ok" : "FAILED"))
    }
    let failed = reports.filter { !$0.passed }.count
    print(failed == 0 ? "\nchaos: all \(reports.count) trials passed" : "\nchaos: \(failed) of \(reports.count) trials FAILED (logs in \(work))")
    if failed > 0 { exit(1) }
}

/// What `push.results` holds for the trials' (event, live device) pairs.
struct ResultsCheck {
    /// Pairs without a result.
    var missing: Int
    /// `failed` results, by reason (`-` without one), over the whole topic.
    var failed: [String: Int]
}

/// Reads `push.results`: the (event, live device) pairs without a result, and every `failed` result by reason.
/// When some are missing (and `explain`), prints what event-level results (no token: `duplicate`, `invalid`,
/// `no_devices`) their events got instead.
func checkResults(kafka: KafkaConfiguration, events: [(id: String, user: Int)], tokens: [String], dead: Set<String>,
                  explain: Bool = false) async throws -> ResultsCheck {
    let reader = try KafkaPartitionReader(configuration: kafka, logger: makeQuietLogger())
    let pairs = LockedPairs()
    let eventLevel = LockedValues()
    let failed = LockedCounts()
    _ = try await reader.readToEnd((0..<6).map { TopicPartition("push.results", Int32($0)) }) { message in
        guard let value = message.value,
              let object = try? JSONSerialization.jsonObject(with: Data(value)) as? [String: Any],
              let eventID = object["event_id"] as? String else { return }
        if object["status"] as? String == "failed" { failed.add((object["reason"] as? String) ?? "-") }
        if let token = object["token"] as? String {
            pairs.insert("\(eventID)/\(token)")
        } else {
            eventLevel.set(eventID, "\(object["status"] ?? "?") (\(object["reason"] ?? "-"))")
        }
    }
    let seen = pairs.all
    let instead = eventLevel.all
    var missing = 0
    var explanations: [String: Int] = [:]
    for event in events {
        for token in [tokens[event.user * 2], tokens[event.user * 2 + 1]] where !dead.contains(token) {
            if !seen.contains("\(event.id)/\(token)") {
                missing += 1
                if explain { explanations[instead[event.id].map { "\($0.prefix(60))" } ?? "no result at all", default: 0] += 1 }
            }
        }
    }
    if explain && missing > 0 {
        print("  missing results, by what their event got instead: " + explanations.sorted { $0.value > $1.value }.prefix(5).map { "\($0.key): \($0.value)" }.joined(separator: "; "))
    }
    return ResultsCheck(missing: missing, failed: failed.all)
}

/// ` (reason: count, ...)` of `failed` results, or nothing when there are none.
func describeFailed(_ failed: [String: Int]) -> String {
    failed.isEmpty ? "" : " (" + failed.sorted { $0.value > $1.value }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + ")"
}

/// Users whose last `push.badge-state` record is not (count, last seq) of the model; a user without
/// seqs has seq 0.
func badgeStateMismatches(kafka: KafkaConfiguration, model: [Int], seqLess: Set<Int>) async throws -> Int {
    let reader = try KafkaPartitionReader(configuration: kafka, logger: makeQuietLogger())
    let last = LockedValues()
    _ = try await reader.readToEnd((0..<6).map { TopicPartition("push.badge-state", Int32($0)) }) { message in
        guard let key = message.key, let value = message.value else { return }
        last.set(String(decoding: key, as: UTF8.self), String(decoding: value, as: UTF8.self))
    }
    let states = last.all
    return model.enumerated().filter { user, count in
        guard let value = states["u-\(user)"] else { return count > 0 }
        let seq = seqLess.contains(user) ? 0 : count
        return !(value.contains("\"badge\":\(count),") && value.contains("\"seq\":\(seq),"))
    }.count
}

/// Devices whose badges (in the simulator's device log, in acceptance order) ever went down, plus
/// live devices that do not end at their user's count.
func deviceBadgesWentDown(logPath: String, model: [Int], dead: Set<String>) -> Int {
    guard let text = try? String(contentsOfFile: logPath, encoding: .utf8) else { return -1 }
    var badges: [String: [Int]] = [:]
    for line in text.split(separator: "\n") {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
              let token = object["token"] as? String, let badge = object["badge"] as? Int else { continue }
        badges[token, default: []].append(badge)
    }
    var bad = 0
    for (token, seen) in badges where seen != seen.sorted() { _ = token; bad += 1 }
    for (index, count) in model.enumerated() {
        for token in [tokenHex(index * 2 + 1), tokenHex(index * 2 + 2)] where !dead.contains(token) {
            if badges[token]?.last != count { bad += 1 }
        }
    }
    return bad
}
