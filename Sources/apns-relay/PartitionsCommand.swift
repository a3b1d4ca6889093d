import ArgumentParser
import Foundation
import Kafka
import Logging
import Relay

/// `apns-relay partitions`: the layout that places users on the partitions of the events and badge-state topics.
struct PartitionsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "partitions",
        abstract: "Work with the partition layout that places each user on a home partition.",
        subcommands: [Migrate.self]
    )

    /// `apns-relay partitions migrate`: moves users' badge state to their homes under the topics' partition count.
    struct Migrate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "migrate",
            abstract: "Move every user's badge state to its home under the current partition count and record the layout (a dry run unless --execute).",
            discussion: """
                Run it with every relay stopped, after growing kafka.topics.events and kafka.topics.badge_state to the \
                same new partition count (docs/DEPLOY.md, "Growing the partitions"), and once when upgrading from a \
                relay that recorded no layout. Reads every badge-state partition to its end and the group's committed \
                offsets of the events topic, then prints the plan: users in place, users to move, users counted in two \
                partitions (the highest seq is kept). With --execute it writes each moved user's state at its new home, \
                then deletes it where it was, then the layout record of every partition, each step acknowledged before \
                the next. A run stopped at any point is finished by running it again. Refuses when the two topics' \
                partition counts differ, when the relays' consumer group has a member (a relay still running, busy or \
                idle; one killed without leaving counts until the group's session timeout expires it), or when the \
                badge-state topic changes while it reads (a relay still running). \
                Exit 0 when the layout holds (or the dry run printed the plan), 1 when a read or write failed or a relay \
                is running, 2 for a bad option, configuration or partition count.
                """
        )

        @Option(name: .long, help: "YAML configuration file; APNS_RELAY_* environment variables override it.")
        var config: String?

        @Flag(name: .long, help: "Write the moves and layout records (without it: a dry run that prints the plan).")
        var execute = false

        func run() async throws {
            let configuration = try await ConfigurationLoader.load(file: config, requireService: false)
            configuration.log.bootstrap()
            guard let brokers = configuration.kafka.brokers, !configuration.kafka.isEmbedded else {
                throw ConfigurationError(key: "kafka.brokers", problem: "partitions migrate reads and writes a real cluster; set kafka.brokers to it")
            }
            let kafka = KafkaConfiguration(bootstrapServers: brokers, properties: configuration.kafka.properties)
            let migrator = try LayoutMigrator(kafka: kafka, topics: configuration.kafka.topics, groupID: configuration.kafka.groupID,
                                              logger: Logger(label: "apns-relay.partitions"))
            do {
                try await migrator.run(execute: execute) { print($0) }
            } catch let refusal as LayoutMigrator.Refusal {
                FileHandle.standardError.write(Data("apns-relay partitions migrate: \(refusal.message)\n".utf8))
                throw ExitCode(refusal.exitCode)
            }
        }
    }
}

/// Reads what `apns-relay partitions migrate` needs, plans it (``LayoutMigration``) and writes it.
struct LayoutMigrator {
    /// Why the migration did not run.
    struct Refusal: Error {
        var message: String
        var exitCode: Int32
    }

    let topics: RelayConfiguration.Topics
    let groupID: String
    private let admin: KafkaAdmin
    private let reader: KafkaChangelogReader
    private let offsets: KafkaGroupOffsets
    private let kafka: KafkaConfiguration
    private let logger: Logger

    init(kafka: KafkaConfiguration, topics: RelayConfiguration.Topics, groupID: String, logger: Logger) throws {
        self.kafka = kafka
        self.topics = topics
        self.groupID = groupID
        self.logger = logger
        admin = try KafkaAdmin(configuration: kafka, logger: logger)
        reader = KafkaChangelogReader(kafka: kafka, logger: logger)
        offsets = try KafkaGroupOffsets(configuration: kafka, groupID: groupID, logger: logger)
    }

    func run(execute: Bool, report: (String) -> Void) async throws {
        let count = try await partitionCount()
        let badgeState = (0..<Int32(count)).map { TopicPartition(topics.badgeState, $0) }
        let ends = try await self.ends(of: badgeState)
        let changelogs = try await read(badgeState)
        let committed = try await offsets.committed((0..<Int32(count)).map { TopicPartition(topics.events, $0) })
        let plan = LayoutMigration(changelogs: changelogs, layout: PartitionLayout(partitionCount: Int32(count)),
                                   committed: Dictionary(uniqueKeysWithValues: committed.map { ($0.key.partition, $0.value) }),
                                   now: Int64(Date().timeIntervalSince1970 * 1_000))
        describe(plan, report: report)
        guard !plan.isDone else {
            report("the layout holds: users are placed for \(count) partitions (\(PartitionLayout.hashName)) in every partition of \(topics.badgeState); nothing to do")
            return
        }
        let members = try await admin.describeGroup(groupID).members
        guard execute else {
            if !members.isEmpty { report("note: \(Self.describe(members, of: groupID)); --execute refuses until every relay is stopped") }
            report("dry run: nothing written; --execute writes the moves, then the layout records")
            return
        }
        // A relay that is running but idle writes nothing, so the badge-state check below cannot see it; the group can.
        guard members.isEmpty else {
            throw Refusal(message: "\(Self.describe(members, of: groupID)): a relay is still running (idle or not; one killed without leaving counts until the group's session timeout). Stop every relay (for example `kubectl scale deployment apns-relay --replicas=0`), then run this again", exitCode: 1)
        }
        guard try await self.ends(of: badgeState) == ends else {
            throw Refusal(message: "\(topics.badgeState) changed while it was read: a relay is still running. Stop every relay (for example `kubectl scale deployment apns-relay --replicas=0`), then run this again", exitCode: 1)
        }
        try await write(plan, report: report)
    }

    /// "group G has N member(s) (client id at host, ...)".
    static func describe(_ members: [KafkaGroupDescription.Member], of group: String) -> String {
        let named = members.map { "\($0.clientID) at \($0.clientHost)" }.joined(separator: ", ")
        return "consumer group \(group) has \(members.count) member(s) (\(named))"
    }

    /// The partition count both topics share.
    private func partitionCount() async throws -> Int {
        guard let events = try await admin.partitionCount(of: topics.events) else {
            throw Refusal(message: "topic \(topics.events) does not exist", exitCode: 2)
        }
        guard let badgeState = try await admin.partitionCount(of: topics.badgeState) else {
            throw Refusal(message: "topic \(topics.badgeState) does not exist", exitCode: 2)
        }
        guard events == badgeState else {
            throw Refusal(message: "\(topics.events) has \(events) partitions and \(topics.badgeState) \(badgeState): grow the smaller one to \(max(events, badgeState)) first (`kafka-topics --alter --topic \(events < badgeState ? topics.events : topics.badgeState) --partitions \(max(events, badgeState))`)", exitCode: 2)
        }
        return events
    }

    private func ends(of partitions: [TopicPartition]) async throws -> [Int64] {
        var ends: [Int64] = []
        for partition in partitions { ends.append(try await admin.watermarks(of: partition).high) }
        return ends
    }

    private func read(_ partitions: [TopicPartition]) async throws -> [RestoredChangelog] {
        var changelogs: [RestoredChangelog] = []
        for partition in partitions { changelogs.append(try await reader.readChangelog(partition)) }
        return changelogs
    }

    private func describe(_ plan: LayoutMigration, report: (String) -> Void) {
        report("\(plan.usersInPlace) user(s) at home; \(plan.moves.count) to move; layout record to write in \(plan.layoutRecords.count) partition(s)")
        var routes: [String: Int] = [:]
        for move in plan.moves { routes["\(move.from) -> \(move.to)", default: 0] += 1 }
        for (route, users) in routes.sorted(by: { $0.key < $1.key }) { report("  move \(users) user(s): partition \(route)") }
        for conflict in plan.conflicts {
            report("  user \(conflict.user.debugDescription) is counted in partitions \(conflict.partitions.map(String.init).joined(separator: ", ")): the state in \(conflict.kept) (highest seq) is kept")
        }
    }

    /// The writes, stage by stage, each stage acknowledged whole before the next.
    private func write(_ plan: LayoutMigration, report: (String) -> Void) async throws {
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        do {
            try await write(plan, with: producer, report: report)
        } catch {
            await producer.close()
            throw error
        }
        await producer.close()
    }

    private func write(_ plan: LayoutMigration, with producer: KafkaProducer, report: (String) -> Void) async throws {
        let homes = plan.moves.filter { !$0.written }.map { move in
            KafkaRecord(topic: topics.badgeState, partition: move.to, key: Array(move.user.utf8), value: move.record.encoded())
        }
        try await send(homes, with: producer)
        report("wrote \(homes.count) user state(s) at their homes")
        let tombstones = plan.moves.map { KafkaRecord(topic: topics.badgeState, partition: $0.from, key: Array($0.user.utf8), value: nil) }
        try await send(tombstones, with: producer)
        report("deleted \(tombstones.count) user state(s) where they were")
        let layouts = plan.layoutRecords.map { KafkaRecord(topic: topics.badgeState, partition: $0, key: PartitionLayout.recordKey, value: plan.layoutRecordValue) }
        try await send(layouts, with: producer)
        report("recorded the layout (\(plan.layout.partitionCount) partitions, \(PartitionLayout.hashName)) in \(layouts.count) partition(s); the relays may start")
    }

    private func send(_ records: [KafkaRecord], with producer: KafkaProducer) async throws {
        var pending: [KafkaPendingDelivery] = []
        for record in records { pending.append(try await producer.enqueue(record)) }
        for delivery in pending { _ = try await delivery.report() }
    }
}
