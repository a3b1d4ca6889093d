import APNs
import APNsSimulator
import ArgumentParser
import Crypto
import Foundation
import Kafka
import Logging
import Relay

/// `apns-relay demo`: the whole relay on an in-process Kafka and APNs simulator. No config, no network.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run the relay against an embedded Kafka and the APNs simulator with sample traffic, then report what each device showed."
    )

    func run() async throws {
        var logger = Logger(label: "apns-relay.demo")
        logger.logLevel = .error
        let started = ContinuousClock.now
        let cluster = try EmbeddedKafka(brokers: 1, logger: logger)
        defer { cluster.stop() }
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers, properties: ["session.timeout.ms": "6000", "heartbeat.interval.ms": "500"])
        try cluster.createTopic("push.events", partitions: 3)
        var configuration = RelayServiceConfiguration(
            kafka: kafka, engine: .init(reorderWindow: .seconds(2), defaultTopic: "com.example.app"), commitInterval: .milliseconds(300))
        let partitions = try await TopicSetup.ensure(configuration, creator: EmbeddedTopicCreator(cluster: cluster, admin: try KafkaAdmin(configuration: kafka, logger: logger)))
        configuration.engine.layout = PartitionLayout(partitionCount: Int32(partitions))
        print("embedded Kafka on \(cluster.bootstrapServers)")

        let scenario = DemoScenario()
        let signingKey = P256.Signing.PrivateKey()
        // Two simulators stand for Apple's two hosts. As Apple does, the production one refuses the sandbox
        // device's token (400 BadDeviceToken): only routing by the registration's environment delivers it.
        let simulators = try await DemoSimulators.start(
            signingKey: signingKey,
            deadTokens: [scenario.uninstalledToken: Int64(Date().timeIntervalSince1970 * 1000) - 86_400_000],
            sandboxTokens: Set(scenario.devices.filter { $0.environment == .sandbox }.map(\.token)))
        print("APNs simulators on 127.0.0.1:\(simulators.production.http2Port) (production) and 127.0.0.1:\(simulators.sandbox.http2Port) (sandbox) (TLS, JWT checked)")
        let credential = APNsCredential.token(APNsTokenProvider(signer: try APNsJWTSigner(key: signingKey, keyID: "DEMOKEY123", teamID: "DEMOTEAM12")))
        func supervisor(_ simulator: APNsSimulator, connectsOnDemand: Bool) throws -> APNsSupervisor {
            APNsSupervisor(
                configuration: APNsSupervisorConfiguration(pool: .init(connections: 2, connectsOnDemand: connectsOnDemand)),
                factory: try APNsHTTP2ConnectionFactory(configuration: APNsHTTP2ConnectionConfiguration(
                    endpoint: APNsEndpoint(host: "127.0.0.1", port: simulator.http2Port), credential: credential,
                    caFile: simulator.certificates.caPath), logger: logger),
                logger: logger)
        }
        let sender = APNsSupervisorSender(
            production: try supervisor(simulators.production, connectsOnDemand: false),
            sandbox: try supervisor(simulators.sandbox, connectsOnDemand: true))

        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        for device in scenario.devices {
            try await producer.send(topic: configuration.devicesTopic, key: Array(device.token.utf8), value: Array(device.registration.utf8))
        }
        for event in scenario.events {
            _ = try await producer.enqueue(KafkaRecord(topic: configuration.eventsTopic, key: Array(event.key.utf8), value: Array(event.json.utf8)))
        }
        try await producer.flush()
        await producer.close()
        print("produced \(scenario.devices.count) device registrations and \(scenario.events.count) events (seqs out of order, a duplicate, a malformed one)")

        let relay = RelayService(configuration: configuration, sender: sender, logger: logger)
        let finished = try await withThrowingTaskGroup(of: Void.self) { group -> Bool in
            for supervisor in sender.supervisors { group.addTask { await supervisor.run() } }
            group.addTask { try await relay.run() }
            let deadline = ContinuousClock.now.advanced(by: .seconds(60))
            var shown = -1
            var finished = false
            while ContinuousClock.now < deadline {
                let snapshot = relay.status.snapshot
                let done = snapshot.counters.eventsApplied + snapshot.counters.eventsDuplicate + snapshot.counters.eventsInvalid
                if done != shown {
                    Self.progress(done: done, total: scenario.events.count)
                    shown = done
                }
                if done == scenario.events.count && snapshot.pendingRecords == 0 {
                    finished = true
                    break
                }
                try await Task.sleep(for: .milliseconds(100))
            }
            print("")
            try await Task.sleep(for: .milliseconds(400))  // one more commit
            relay.stop()
            try await Task.sleep(for: .milliseconds(500))
            async let production: Void? = sender.pools[0].production?.shutdown(gracePeriod: .seconds(2))
            async let sandbox: Void? = sender.pools[0].sandbox?.shutdown(gracePeriod: .seconds(2))
            _ = await (production, sandbox)
            try await group.waitForAll()
            return finished
        }
        await simulators.shutdown()
        let seconds = (ContinuousClock.now - started) / .seconds(1)
        try await DemoReport(cluster: cluster, configuration: configuration, simulators: simulators, scenario: scenario, logger: logger)
            .print(seconds: seconds)
        // `make run` is a check too: a demo that did not get through its events must not look like a success.
        guard finished else {
            Swift.print("the demo did not process all \(scenario.events.count) events within 60 s (see the report above)")
            throw ExitCode.failure
        }
    }

    static func progress(done: Int, total: Int) {
        let width = 30
        let filled = total == 0 ? width : min(width, done * width / total)
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        Swift.print("\r[\(bar)] \(done)/\(total) events", terminator: "")
        fflush(nil)  // the bar has no newline; show it now
    }
}

/// The demo's stand-ins for Apple's production and sandbox hosts.
struct DemoSimulators {
    let production: APNsSimulator
    let sandbox: APNsSimulator

    /// Starts both, checking JWTs signed with `signingKey`; `sandboxTokens` are valid only on the sandbox one.
    static func start(signingKey: P256.Signing.PrivateKey, deadTokens: [String: Int64], sandboxTokens: Set<String>) async throws -> DemoSimulators {
        func options(_ name: String) -> SimulatorOptions {
            var options = SimulatorOptions()
            options.certDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-relay-demo-\(name)-\(UUID().uuidString)").path
            options.jwtPublicKeyPEM = signingKey.publicKey.pemRepresentation
            options.jwtKeyID = "DEMOKEY123"
            return options
        }
        var productionOptions = options("production")
        productionOptions.deadTokens = deadTokens
        productionOptions.badTokens = sandboxTokens
        let production = try await APNsSimulator.start(productionOptions)
        do {
            return DemoSimulators(production: production, sandbox: try await APNsSimulator.start(options("sandbox")))
        } catch {
            await production.shutdown()
            throw error
        }
    }

    func shutdown() async {
        await production.shutdown()
        await sandbox.shutdown()
    }

    func simulator(for environment: APNsEnvironment) -> APNsSimulator { environment == .production ? production : sandbox }
}

/// The sample traffic: the flicker burst of the seed, an alert, a duplicate, an uninstalled device, a device on a
/// development build (APNs sandbox), a malformed event.
struct DemoScenario {
    struct Device {
        var name: String
        var user: String
        var token: String
        var environment: APNsEnvironment = .production
        var registration: String {
            "{\"user\":\"\(user)\",\"topic\":\"com.example.app\",\"environment\":\"\(environment.rawValue)\",\"registered_at\":1}"
        }
    }

    struct Event {
        var key: String
        var json: String
    }

    let devices: [Device]
    let events: [Event]
    var uninstalledToken: String { devices[3].token }

    init() {
        func token(_ byte: String) -> String { String(repeating: byte, count: 32) }
        devices = [
            Device(name: "alice's iPhone", user: "alice", token: token("a1")),
            Device(name: "alice's iPad", user: "alice", token: token("a2")),
            Device(name: "bob's iPhone", user: "bob", token: token("b1")),
            Device(name: "carol's old iPhone (uninstalled)", user: "carol", token: token("c1")),
            Device(name: "dave's iPhone (development build)", user: "dave", token: token("d1"), environment: .sandbox),
        ]
        var events: [Event] = []
        // The seed's burst: ten increments whose seqs arrive as 1,3,2,4,10,8,5,6,7,9.
        for seq in [1, 3, 2, 4, 10, 8, 5, 6, 7, 9] {
            events.append(Event(key: "alice", json: "{\"id\":\"alice-\(seq)\",\"user\":\"alice\",\"seq\":\(seq),\"badge\":{\"increment\":1}}"))
        }
        events.append(Event(key: "bob", json: #"{"id":"bob-1","user":"bob","seq":1,"badge":{"set":3},"apns":{"push_type":"alert","payload":{"aps":{"alert":{"title":"Hi Bob","body":"You have 3 new messages"},"sound":"default"}}}}"#))
        events.append(Event(key: "bob", json: #"{"id":"bob-2","user":"bob","seq":2,"badge":{"decrement":1}}"#))
        events.append(Event(key: "bob", json: #"{"id":"bob-1-again","user":"bob","seq":1,"badge":{"set":3}}"#))
        events.append(Event(key: "carol", json: #"{"id":"carol-1","user":"carol","seq":1,"badge":{"increment":1}}"#))
        events.append(Event(key: "dave", json: #"{"id":"dave-1","user":"dave","seq":1,"badge":{"set":1},"apns":{"payload":{"aps":{"alert":"Hello from the sandbox"}}}}"#))
        events.append(Event(key: "mallory", json: #"{"id":"broken","user":"mallory","badge":{"increment":"lots"}}"#))
        self.events = events
    }
}

/// Reads the output topics and the simulator's device view and prints them for a person.
struct DemoReport {
    let cluster: EmbeddedKafka
    let configuration: RelayServiceConfiguration
    let simulators: DemoSimulators
    let scenario: DemoScenario
    let logger: Logger

    func print(seconds: Double) async throws {
        Swift.print("\nWhat each device showed (badges in the order they arrived, and the APNs environment they came from):")
        for device in scenario.devices {
            var shown: [String] = []
            for environment in APNsEnvironment.allCases {
                let badges = simulators.simulator(for: environment).deliveries(for: device.token).map { $0.badge.map(String.init) ?? "-" }
                if !badges.isEmpty { shown.append("\(badges.joined(separator: " -> ")) (from \(environment.rawValue))") }
            }
            Swift.print("  \(device.name.padding(toLength: 34, withPad: " ", startingAt: 0)) \(shown.isEmpty ? "(nothing)" : shown.joined(separator: "; "))")
        }
        let results = try await read(configuration.resultsTopic)
        var byStatus: [String: Int] = [:]
        for record in results {
            if let object = try? JSONSerialization.jsonObject(with: Data(record.value ?? [])) as? [String: Any], let status = object["status"] as? String {
                byStatus[status, default: 0] += 1
            }
        }
        Swift.print("\nResults (\(results.count) records on \(configuration.resultsTopic)):")
        for (status, count) in byStatus.sorted(by: { $0.key < $1.key }) {
            Swift.print("  \(status.padding(toLength: 12, withPad: " ", startingAt: 0)) \(count)")
        }
        Swift.print("\nFailed tokens (\(configuration.failedTokensTopic)):")
        for record in try await read(configuration.failedTokensTopic) {
            Swift.print("  \(String(decoding: record.value ?? [], as: UTF8.self))")
        }
        Swift.print("\nDead letters (\(configuration.deadLetterTopic)):")
        for record in try await read(configuration.deadLetterTopic) {
            let error = record.header("x-error").map { String(decoding: $0.value ?? [], as: UTF8.self) } ?? "?"
            Swift.print("  \(String(decoding: record.value ?? [], as: UTF8.self))\n    x-error: \(error)")
        }
        Swift.print(String(format: "\n%d events relayed in %.1f s (including startup and group join).", scenario.events.count, seconds))
        Swift.print("alice's badge went up in order although her events arrived as 1,3,2,4,10,8,5,6,7,9: no flicker.")
        Swift.print("dave's development build is registered for the sandbox: its notification went to the sandbox host, not production.")
    }

    private func read(_ topic: String) async throws -> [KafkaMessage] {
        let admin = try KafkaAdmin(configuration: configuration.kafka, logger: logger)
        let partitions = try await admin.partitionCount(of: topic) ?? 0
        let reader = try KafkaPartitionReader(configuration: configuration.kafka, logger: logger)
        let collected = DemoCollector()
        _ = try await reader.readToEnd((0..<partitions).map { TopicPartition(topic, Int32($0)) }) { collected.append($0) }
        return collected.all
    }
}

import Synchronization

final class DemoCollector: Sendable {
    private let messages = Mutex<[KafkaMessage]>([])
    func append(_ message: KafkaMessage) { messages.withLock { $0.append(message) } }
    var all: [KafkaMessage] { messages.withLock { $0 } }
}
