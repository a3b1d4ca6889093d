import Foundation
import Kafka
import APNsSimulator

let topicNames = ["push.events", "push.badge-state", "push.devices", "push.results", "push.failed-tokens", "push.dlq", "push.wrong-environment"]

/// `relay-harness cluster`: the embedded cluster in a process of its own, with the relay's topics
/// (pre-created: librdkafka's mock has no CreateTopics). Standard input controls it: `down N` /
/// `up N` take broker N down or bring it back; `refuse-writes S` makes every broker refuse Produce
/// requests (NOT_ENOUGH_REPLICAS, retriable) for S seconds; `refuse-list-offsets N` refuses the
/// next N ListOffsets requests (what a restore's first step sends); end of input stops it.
func runCluster(_ arguments: [String]) throws {
    let partitions = intArgument("--partitions", 32, in: arguments)
    let brokers = intArgument("--brokers", 1, in: arguments)
    let resultsPartitions = intArgument("--results-partitions", partitions, in: arguments)
    let devicesPartitions = intArgument("--devices-partitions", max(16, partitions / 2), in: arguments)
    let cluster = try EmbeddedKafka(brokers: brokers, logger: makeQuietLogger())
    for topic in topicNames {
        // The mock keeps ~5 MB per partition: enough partitions that nothing preloaded is dropped.
        let count = switch topic {
        case "push.devices": devicesPartitions
        case "push.results": resultsPartitions
        default: partitions
        }
        try cluster.createTopic(topic, partitions: count)
    }
    FileHandle.standardOutput.write(Data("READY \(cluster.bootstrapServers)\n".utf8))
    while let line = readLine() {
        let words = line.split(separator: " ")
        guard words.count == 2, let broker = Int32(words[1]) else { continue }
        do {
            switch words[0] {
            case "down": try cluster.setBrokerDown(broker)
            case "up": try cluster.setBrokerUp(broker)
            case "refuse-writes":
                let until = ContinuousClock.now.advanced(by: .seconds(Int(broker)))
                while ContinuousClock.now < until {
                    try cluster.topUpRequestErrors(apiKey: 0, code: 19, depth: 5)
                    Thread.sleep(forTimeInterval: 0.02)
                }
            case "refuse-list-offsets": try cluster.failRequests(apiKey: 2, count: Int(broker), code: 6)
            default: continue
            }
            FileHandle.standardOutput.write(Data("OK \(line)\n".utf8))
        } catch {
            FileHandle.standardOutput.write(Data("ERROR \(line): \(error)\n".utf8))
        }
    }
    cluster.stop()
}

/// `relay-harness simulator`: the APNs simulator in its own process with standing faults, for crash
/// trials: a GOAWAY every N streams, a 503 every N requests, an abrupt close every N requests,
/// dead tokens (410), the device log, and `--latency-ms` (every request answered after that long). Standard input
/// adds spells: `slow MS COUNT` holds the next COUNT requests MS milliseconds each; `goaway-storm S` answers every stream for S seconds, then sends
/// GOAWAY (NO_ERROR) naming it (the streams after it are refused); `5xx S` answers every request 500
/// InternalServerError or 503 ServiceUnavailable (alternately) for S seconds.
func runFaultySimulator(_ arguments: [String]) async throws {
    var options = try SimulatorOptions(
        http2Port: 0, certDirectory: argument("--cert-dir", in: arguments), jwtPublicKeyFile: argument("--jwt-public-key", in: arguments),
        deadTokensFile: argument("--dead-tokens", in: arguments), badTokensFile: nil, maxStreams: 1000,
        deviceLogPath: argument("--device-log", in: arguments))
    options.jwtKeyID = "ABCDE12345"
    let simulator = try await APNsSimulator.start(options)
    if let every = argument("--goaway-every", in: arguments).flatMap(Int.init) { simulator.addFault(.goAway, count: nil, every: every) }
    if let every = argument("--fail-every", in: arguments).flatMap(Int.init) {
        simulator.addFault(.status(503, reason: "ServiceUnavailable"), count: nil, every: every)
    }
    if let every = argument("--reset-every", in: arguments).flatMap(Int.init) { simulator.addFault(.closeConnection, count: nil, every: every) }
    if let milliseconds = argument("--latency-ms", in: arguments).flatMap(Int64.init), milliseconds > 0 {
        simulator.addFault(.delay(.milliseconds(milliseconds)), count: nil, every: 1)
    }
    FileHandle.standardOutput.write(Data("READY \(simulator.http2Port)\n".utf8))
    while let line = readLine() {
        let words = line.split(separator: " ")
        switch (words.first, words.count) {
        case ("slow", 3):
            guard let milliseconds = Int64(words[1]), let count = Int(words[2]) else { continue }
            simulator.addFault(.delay(.milliseconds(milliseconds)), count: count, every: 1)
        case ("goaway-storm", 2):
            guard let seconds = Int(words[1]) else { continue }
            simulator.addFault(.goAwayAfterStream, count: nil, for: .seconds(seconds))
        case ("5xx", 2):
            guard let seconds = Int(words[1]) else { continue }
            simulator.addFault(.status(500, reason: "InternalServerError"), count: nil, every: 2, for: .seconds(seconds))
            simulator.addFault(.status(503, reason: "ServiceUnavailable"), count: nil, for: .seconds(seconds))
        default:
            continue
        }
        FileHandle.standardOutput.write(Data("OK \(line)\n".utf8))
    }
    await simulator.shutdown()
}
