#if canImport(Glibc)
import Glibc
#endif
import Logging
import ServiceLifecycle
import Synchronization

/// SIGTERM or SIGINT received before the service group took over signal handling.
///
/// Starting up (loading the configuration, checking the Kafka topics, building the APNs supervisor) takes a moment
/// before `ServiceGroup.run` installs its own handlers. A signal in that window used to end the process with the
/// signal's default action (status 143) instead of a clean stop with exit 0; Kubernetes sends SIGTERM to a pod
/// that is still starting when a rollout replaces it. `install()` runs first thing; `EarlyStopService` turns a
/// signal caught here into a graceful stop of the group once it runs.
enum EarlyStopSignals {
    /// Written from the signal handler: a lock-free atomic store is async-signal-safe.
    private static let received = Atomic<Bool>(false)

    /// Whether a stop signal arrived before the group's own handlers.
    static var wasReceived: Bool { received.load(ordering: .relaxed) }

    /// Catches SIGTERM and SIGINT until the service group installs its own handlers over these.
    static func install() {
        _ = wasReceived  // initialise the global now, never first inside the handler
        for signalNumber in [SIGTERM, SIGINT] {
            signal(signalNumber) { _ in EarlyStopSignals.received.store(true, ordering: .relaxed) }
        }
    }
}

/// Ends (and so, configured with `.gracefullyShutdownGroup`, stops the group gracefully) when a stop signal was
/// caught by `EarlyStopSignals` before the group's handlers were installed; otherwise waits for the group's
/// graceful shutdown. A signal can land just before the group replaces the handler, after the first look, so it
/// keeps looking every 100 ms.
struct EarlyStopService: Service {
    let logger: Logger

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !EarlyStopSignals.wasReceived { try await Task.sleep(for: .milliseconds(100)) }
            logger.info("stop signal received while starting; stopping")
        }
    }
}
