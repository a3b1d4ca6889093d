import APNs
import Foundation
import Kafka
public import Logging
public import ServiceLifecycle
import RelayCore

/// The relay: consumes events, keeps badges, delivers through `sender`, publishes results.
///
/// `run()` returns after `stop()` (or cancellation): it stops fetching, hands its partitions over
/// (work in flight finishes or is handed back, progress stored, offsets committed) and closes its
/// clients, all within `shutdownTimeout`.
public final class RelayService: Service {
    private let configuration: RelayServiceConfiguration
    private let sender: any NotificationSending
    private let clients: RelayKafkaClients?
    private let logger: Logger
    private let clock: any Clock<Duration>
    private let tracer: RelayTracer?
    public let status = RelayStatus()
    private let stopSignal: AsyncStream<(StopKind, ContinuousClock.Instant)>
    private let stopContinuation: AsyncStream<(StopKind, ContinuousClock.Instant)>.Continuation
    private let deadTokenReports: AsyncStream<[DeadTokenReport]>
    private let deadTokenContinuation: AsyncStream<[DeadTokenReport]>.Continuation

    private enum StopKind: Sendable { case graceful, abandon }

    /// Most events handed to the loop at once: a poll's worth, small against `max_in_flight`, so
    /// backpressure (which applies from the next batch) overshoots little.
    static let consumedBatchSize = 256

    /// - Parameters:
    ///   - clients: the Kafka clients to run with; ``RelayKafkaClients/kafka(_:logger:)`` of `configuration` when `nil`
    ///     (created when `run()` starts).
    ///   - tracer: where the spans of events carrying a `traceparent` go (``RelaySpans``); `nil`: no spans.
    public init(configuration: RelayServiceConfiguration, sender: any NotificationSending, clients: RelayKafkaClients? = nil,
                tracer: RelayTracer? = nil, logger: Logger) {
        self.configuration = configuration
        self.tracer = tracer
        self.sender = sender
        self.clients = clients
        self.logger = logger
        self.clock = ContinuousClock()
        (stopSignal, stopContinuation) = AsyncStream<(StopKind, ContinuousClock.Instant)>.makeStream()
        (deadTokenReports, deadTokenContinuation) = AsyncStream<[DeadTokenReport]>.makeStream()
    }

    /// Tokens the legacy feedback service reported dead: removed from the device registry and published as
    /// failed tokens with reason `Feedback` (handled in order with everything else while `run()` runs).
    public func reportDeadTokens(_ reports: [DeadTokenReport]) {
        deadTokenContinuation.yield(reports)
    }

    /// Asks `run()` to stop gracefully. The stop's budget (`shutdownTimeout`) counts from this call, however late
    /// the relay's loop gets to it.
    public func stop() {
        stopContinuation.yield((.graceful, .now))
        stopContinuation.finish()
    }

    /// Stops at once, as a crash would: nothing more is sent, published, flushed or committed, and
    /// work in flight is dropped. For failure tests: the next owner must recover from the changelog
    /// and the last commit alone.
    func abandon() {
        stopContinuation.yield((.abandon, .now))
        stopContinuation.finish()
    }

    /// Runs until `stop()`, cancellation, or graceful shutdown of its ServiceGroup (SIGTERM/SIGINT).
    ///
    /// - Throws: ``RelayFailure`` when the engine gives up (a destination, a restore or the
    ///   registry failing past the bound, the consumer dead), or when a stop could not hand its
    ///   partitions over to Kafka in time: the process exits 1.
    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await runUntilStopped()
        } onGracefulShutdown: {
            self.stop()
        }
    }

    private func runUntilStopped() async throws {
        let clients = try self.clients ?? RelayKafkaClients.kafka(configuration, logger: logger)
        let input = RelayInbox()
        let batches = ConsumedBatchGate()
        var ending: RelayDriver.Ending = .stopped(handedOver: true)

        await withDiscardingTaskGroup { group in
            // Events: a batch at a time into the loop, which lets the next one come once it has
            // handled this one (so the consumer runs at most a batch ahead of backpressure).
            group.addTask {
                do {
                    try await clients.consumer.forEachBatch(maxCount: Self.consumedBatchSize) { events in
                        await batches.submit { input.yield(.consumed(events)) }
                    }
                } catch {
                    // Joining a group whose members use another assignor kind is the configuration's fault (exit 2).
                    let mismatch = (error as? KafkaError)?.isGroupProtocolMismatch ?? false
                    input.yield(.consumerFailed("\(error)", exitCode: mismatch ? 2 : 1))
                }
            }
            // Delivery reports, a poll's at a time, from each producer.
            for producer in [clients.producer, clients.changelogProducer, clients.forwardProducer] {
                group.addTask {
                    for await reports in producer.deliveries { input.yield(.deliveries(reports)) }
                }
            }
            group.addTask {
                for await (kind, askedAt) in self.stopSignal {
                    input.yield(kind == .graceful ? .stop(askedAt: askedAt) : .abandon)
                    break
                }
            }
            group.addTask {
                for await reports in self.deadTokenReports {
                    if Task.isCancelled { break }
                    input.yield(.deadTokens(reports))
                }
            }
            group.addTask {
                while !Task.isCancelled {
                    try? await self.clock.sleep(for: .milliseconds(100))
                    input.yield(.tick)
                }
            }
            // The events topic's partition count, now and then: a growth while the relay runs moves users' homes.
            if let partitionCount = clients.partitionCount, self.configuration.engine.layout != nil {
                let (topic, interval) = (self.configuration.eventsTopic, self.configuration.layoutCheckInterval)
                group.addTask {
                    while !Task.isCancelled {
                        try? await self.clock.sleep(for: interval)
                        // Unanswered (the cluster out of reach): asked again next time; the consumer's bounds cover an outage.
                        if let count = try? await partitionCount(topic) { input.yield(.partitionCountObserved(count)) }
                    }
                }
            }

            var driver = RelayDriver(configuration: configuration, clients: clients, sender: sender, input: input,
                                     batches: batches, status: status, tracer: tracer, logger: logger)
            ending = await driver.run(in: &group)
            batches.close()
            group.cancelAll()
        }
        switch ending {
        case .stopped(handedOver: true), .abandoned:
            return
        case .stopped(handedOver: false):
            throw RelayFailure(reason: "the stop could not hand its partitions over to Kafka in time; their next owner redoes what was unfinished")
        case .failed(let reason, let code):
            throw RelayFailure(reason: reason, exitCode: code)
        }
    }
}
