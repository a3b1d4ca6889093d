import APNs
import ArgumentParser
import Foundation
import Kafka
import Logging
import Metrics
import NIOCore
import Prometheus
import Relay
import ServiceLifecycle

/// `apns-relay run`: the service.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Consume push events, keep badges, deliver to APNs, publish results. SIGTERM/SIGINT stop it gracefully."
    )

    @Option(name: .long, help: "YAML configuration file; APNS_RELAY_* environment variables override it.")
    var config: String?

    func run() async throws {
        let configuration = try await ConfigurationLoader.load(file: config, requireService: true)
        configuration.log.bootstrap()
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let logger = Logger(label: "apns-relay")
        try await RelayRunner(configuration: configuration, registry: registry, logger: logger).run()
    }
}

/// Runs the relay from a validated configuration until SIGTERM/SIGINT.
///
/// The service group, and so its signal handling, starts first: startup (the embedded cluster, the
/// topic check, the APNs credential and pools) runs as the group's one service, and a stop signal
/// cancels it (Kubernetes sends SIGTERM to a pod still starting when a rollout replaces it). The
/// relay's services then run in a group of their own inside it, which the signal's graceful shutdown
/// reaches too.
struct RelayRunner {
    var configuration: RelayConfiguration
    var registry: PrometheusCollectorRegistry
    var logger: Logger

    /// What startup built: the services to run, and the embedded cluster to stop after them.
    struct Started: Sendable {
        var services: [ServiceGroupConfiguration.ServiceConfiguration]
        var embedded: EmbeddedKafka?
        var budget: ShutdownBudget
    }

    func run() async throws {
        logger.info("heap", metadata: ["allocator": "\(Heap.settings.map(\.description) ?? "not jemalloc")", "options": "\(Heap.compiledOptions)"])
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: ClosureService { try await startThenRun() })],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        try await group.run()
        logger.info("stopped")
    }

    /// Startup, given up at a stop signal, then the relay's services until they stop.
    private func startThenRun() async throws {
        // The group traps the stop signals from here: one that came before is sent to it again.
        StopSignals.handOverToServiceGroup()
        // Logged from inside the group: once this line is out, a stop signal is handled.
        logger.info("starting", metadata: ["librdkafka": "\(KafkaLibrary.versionString)", "configuration": "\(configuration.effectiveValues.map { "\($0.key)=\($0.value)" }.joined(separator: " "))"])
        let started: Started
        do {
            started = try await cancelWhenGracefulShutdown { try await start() }
        } catch where Task.isShuttingDownGracefully && !(error is ConfigurationError) {
            logger.info("stop signal received while starting; stopping", metadata: ["startup": "\(error)"])
            return
        }
        defer { started.embedded?.stop() }
        guard !Task.isShuttingDownGracefully else {
            logger.info("stop signal received while starting; stopping")
            return
        }
        try await withGracefulShutdownHandler {
            try await ServiceGroup(configuration: ServiceGroupConfiguration(services: started.services, logger: logger)).run()
        } onGracefulShutdown: {
            started.budget.start()
        }
    }

    /// Everything before the first event: the embedded cluster if configured, the topic check,
    /// the APNs credential and connection pools, the ops endpoint; the services to run.
    private func start() async throws -> Started {
        var embedded: EmbeddedKafka?
        var handedOver = false
        defer { if !handedOver { embedded?.stop() } }
        var bootstrap = configuration.kafka.brokers ?? ""
        if configuration.kafka.isEmbedded {
            let cluster = try EmbeddedKafka(brokers: 1, logger: logger)
            embedded = cluster
            bootstrap = cluster.bootstrapServers
            logger.info("embedded Kafka started", metadata: ["bootstrap": "\(bootstrap)"])
        }
        let kafka = KafkaConfiguration(bootstrapServers: bootstrap, properties: configuration.kafka.properties)
        var serviceConfiguration = RelayServiceConfiguration(
            kafka: kafka,
            groupID: configuration.kafka.groupID,
            groupInstanceID: configuration.kafka.groupInstanceID,
            eventsTopic: configuration.kafka.topics.events,
            devicesTopic: configuration.kafka.topics.devices,
            resultsTopic: configuration.kafka.topics.results,
            failedTokensTopic: configuration.kafka.topics.failedTokens,
            deadLetterTopic: configuration.kafka.topics.deadLetter,
            badgeStateTopic: configuration.kafka.topics.badgeState,
            wrongEnvironmentTopic: configuration.kafka.topics.wrongEnvironment,
            engine: RelayEngineConfiguration(
                reorderWindow: configuration.relay.reorderWindow,
                maxInFlight: configuration.relay.maxInFlight,
                transport: configuration.apns.transport == .binary ? .binary(configuration.apns.binaryFormat) : .http2,
                defaultTopic: configuration.apns.defaultTopic,
                defaultEnvironment: configuration.apns.environment,
                maxTokensPerEvent: configuration.relay.maxTokensPerEvent,
                failureTimeout: configuration.relay.failureTimeout,
                urgentReserve: configuration.relay.urgentReserve,
                maxInFlightPerUser: configuration.relay.maxInFlightPerUser,
                readAheadBytes: configuration.relay.readAheadBytes,
                rateLimits: configuration.relay.rateLimits
            ),
            shutdownTimeout: configuration.relay.shutdownTimeout,
            transactions: configuration.kafka.transactions == .on
                ? .init(interval: configuration.relay.transactionInterval, timeout: configuration.relay.transactionTimeout) : nil
        )

        let admin = try KafkaAdmin(configuration: kafka, logger: logger)
        let eventsPartitions: Int
        do {
            if let embedded {
                eventsPartitions = try await TopicSetup.ensure(serviceConfiguration, creator: EmbeddedTopicCreator(cluster: embedded, admin: admin))
            } else {
                eventsPartitions = try await TopicSetup.ensure(serviceConfiguration, creator: AdminTopicCreator(admin: admin))
            }
        } catch let error as TopicLayoutError {
            throw ConfigurationError(key: error.key, problem: error.problem)
        }
        // Users live where the events topic's partition count places them, now; a partition whose badge state was
        // placed for another count is refused when it is assigned (README, "Topics").
        serviceConfiguration.engine.layout = PartitionLayout(partitionCount: Int32(eventsPartitions))
        serviceConfiguration.engine.badgeStateTopic = serviceConfiguration.badgeStateTopic

        // One supervisor per credential and APNs environment it is valid in, each a pool to its own host. The
        // configured environment's pools connect at start (readiness waits for them); the others only once a
        // notification needs them.
        let defaultEnvironment = configuration.apns.environment
        let groups = try configuration.apns.credentialGroups(logger: logger)
        var routes: [(topics: [String], pools: APNsEnvironmentPools)] = []
        var reloadable: [ReloadableCredential] = []
        for group in groups {
            let factories = try makeConnectionFactories(for: group)
            func supervisor(for environment: APNsEnvironment) -> APNsSupervisor {
                APNsSupervisor(
                    configuration: APNsSupervisorConfiguration(
                        pool: .init(connections: configuration.apns.connections, maxQueued: max(1_024, configuration.relay.maxInFlight),
                                    connectsOnDemand: environment != defaultEnvironment),
                        retry: APNsRetryPolicy(maxAttempts: configuration.relay.maxAttempts, maxRetryDuration: configuration.relay.maxRetry),
                        connectionGaugeDimensions: [("environment", environment.rawValue), ("credential", group.name)]
                    ),
                    factory: environment == .production ? factories.production : factories.sandbox,
                    logger: logger.with(environment: environment, credential: group.name)
                )
            }
            let pools = APNsEnvironmentPools(
                production: group.environments.contains(.production) ? supervisor(for: .production) : nil,
                sandbox: group.environments.contains(.sandbox) ? supervisor(for: .sandbox) : nil)
            routes.append((group.topics, pools))
            reloadable.append(ReloadableCredential(group: group, factories: [factories.production, factories.sandbox],
                                                   supervisors: [pools.production, pools.sandbox].compactMap { $0 }))
        }
        let sender = APNsSupervisorSender(routes: routes)
        let readySupervisors = sender.pools.map { $0.supervisor(for: defaultEnvironment) }
        // Every pool by credential and environment, for readiness to name one whose credential APNs refuses.
        let namedPools = zip(groups, sender.pools).flatMap { group, pools in
            APNsEnvironment.allCases.compactMap { environment in pools.supervisor(for: environment).map { (group.name, environment, $0) } }
        }
        let spanExport = try SpanExport.make(configuration.tracing, logger: logger)
        let relay = RelayService(configuration: serviceConfiguration, sender: sender, tracer: spanExport?.tracer, logger: logger)
        let status = relay.status
        let ops = OpsHTTPServer(port: configuration.relay.httpPort, registry: registry, logger: logger, health: { status.snapshot.failure }) {
            let snapshot = status.snapshot
            var missing: [String] = []
            if let failure = snapshot.failure { missing.append("failed: \(failure)") }
            if !snapshot.devicesLoaded { missing.append("device registrations loading") }
            if !snapshot.partitionsRestored { missing.append("badge state restoring") }
            for (group, supervisor) in zip(groups, readySupervisors) {
                guard let supervisor, supervisor.readyConnectionCount == 0 else { continue }
                missing.append("no APNs connection (\(defaultEnvironment.rawValue), \(group.name))")
            }
            for (name, environment, supervisor) in namedPools {
                guard let refusal = supervisor.credentialStanding.current else { continue }
                missing.append("APNs credential refused (\(name) in \(environment.rawValue): \(refusal.reason); that pool cannot send)")
            }
            return (missing.isEmpty, missing.isEmpty ? "ready" : "not ready: \(missing.joined(separator: ", "))")
        }
        // Graceful shutdown goes from the last service to the first: the relay finishes its
        // in-flight work while the supervisors can still send, then the supervisors drain.
        let budget = ShutdownBudget(timeout: configuration.relay.shutdownTimeout, logger: logger)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = sender.supervisors.map { .init(service: SupervisorService(supervisor: $0, budget: budget)) }
        // First, so it stops last: the spans of the relay's hand-over are exported before the process exits.
        if let spanExport { services.insert(.init(service: spanExport.service), at: 0) }
        services += [.init(service: CredentialReloadService(credentials: reloadable, interval: configuration.apns.credentialCheckInterval, logger: logger)),
                     .init(service: ops), .init(service: relay)]
        if configuration.apns.transport == .binary {
            // The feedback service answers for the certificate that connects to it: one poller per certificate.
            for group in groups {
                guard let certificate = group.clientCertificate else { continue }
                services.append(.init(service: FeedbackService(
                    client: try configuration.apns.feedbackClient(certificate: certificate, logger: logger.with(credential: group.name)),
                    interval: configuration.apns.feedbackInterval, relay: relay, logger: logger.with(credential: group.name))))
            }
        }
        handedOver = true
        return Started(services: services, embedded: embedded, budget: budget)
    }

    /// The connection factories of one credential's two environments, each environment's host.
    private func makeConnectionFactories(for group: APNsCredentialGroup) throws -> (production: any APNsConnectionFactory, sandbox: any APNsConnectionFactory) {
        let apns = configuration.apns
        let logger = self.logger.with(credential: group.name)
        if apns.transport == .binary {
            guard let certificate = group.clientCertificate else {
                throw ConfigurationError(key: group.keyPrefix, problem: "the binary transport needs a client certificate (cert_file and private_key_file, or p12_file)")
            }
            return (try apns.binaryConnectionFactory(for: .production, certificate: certificate, logger: logger),
                    try apns.binaryConnectionFactory(for: .sandbox, certificate: certificate, logger: logger))
        }
        return (try apns.http2ConnectionFactory(for: .production, credential: group.credential, logger: logger.with(environment: .production)),
                try apns.http2ConnectionFactory(for: .sandbox, credential: group.credential, logger: logger.with(environment: .sandbox)))
    }
}

extension Logger {
    /// This logger with `apns_environment` metadata, so each environment's connection logs say which host pool they are.
    func with(environment: APNsEnvironment) -> Logger {
        var logger = self
        logger[metadataKey: "apns_environment"] = "\(environment.rawValue)"
        return logger
    }

    /// This logger with `apns_credential` metadata (`team:<id>` or `certificate:<topic>`), so each credential's
    /// connection logs say whose pool they are.
    func with(credential: String) -> Logger {
        var logger = self
        logger[metadataKey: "apns_credential"] = "\(credential)"
        return logger
    }

    func with(environment: APNsEnvironment, credential: String) -> Logger {
        with(environment: environment).with(credential: credential)
    }
}

/// Runs the APNs supervisor as a service; on graceful shutdown it drains and closes with GOAWAY, within
/// what is left of the stop's budget (the relay, which stops first, cancelled its own sends already).
struct SupervisorService: Service {
    let supervisor: APNsSupervisor
    let budget: ShutdownBudget

    func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await supervisor.run() }
            try? await gracefulShutdown()
            await supervisor.shutdown(gracePeriod: TimeAmount(min(Duration.seconds(5), budget.remaining / 4)))
            await group.waitForAll()
        }
    }
}
