import Foundation
import Kafka
import APNsSimulator

let topicNames = ["push.events", "push.badge-state", "push.devices", "push.results", "push.failed-tokens", "push.dlq"]

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
/// dead tokens (410), and the device log.
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
    FileHandle.standardOutput.write(Data("READY \(simulator.http2Port)\n".utf8))
    // `slow MS COUNT`: the next COUNT requests are each held MS milliseconds (a slow APNs).
    while let line = readLine() {
        let words = line.split(separator: " ")
        if words.count == 3, words[0] == "slow", let milliseconds = Int64(words[1]), let count = Int(words[2]) {
            simulator.addFault(.delay(.milliseconds(milliseconds)), count: count, every: 1)
            FileHandle.standardOutput.write(Data("OK \(line)\n".utf8))
        }
    }
    await simulator.shutdown()
}
