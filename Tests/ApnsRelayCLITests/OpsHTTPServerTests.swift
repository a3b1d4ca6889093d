import Foundation
import Logging
import Prometheus
import ServiceLifecycle
import Synchronization
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@testable import apns_relay

/// `GET http://127.0.0.1:port/path`: the status and the body, `nil` while nothing answers.
func httpGet(port: Int, path: String) async -> (status: Int, body: String)? {
    guard let url = URL(string: "http://127.0.0.1:\(port)\(path)"),
          let (data, response) = try? await URLSession.shared.data(from: url),
          let http = response as? HTTPURLResponse else { return nil }
    return (http.statusCode, String(decoding: data, as: UTF8.self))
}

@Suite("The ops endpoint")
struct OpsHTTPServerTests {
    @Test("/healthz answers 200 while the relay can go on and 503 with the reason once it gave up; /readyz says what is missing")
    func healthAndReadiness() async throws {
        let failure = Mutex<String?>(nil)
        let port = Int.random(in: 30_000...39_999)
        let server = OpsHTTPServer(host: "127.0.0.1", port: port, registry: PrometheusCollectorRegistry(), logger: Logger(label: "ops-test"),
                                   health: { failure.withLock { $0 } }) { (false, "not ready: badge state restoring") }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            var healthy: (status: Int, body: String)?
            for _ in 0..<100 where healthy == nil {
                healthy = await httpGet(port: port, path: "/healthz")
                if healthy == nil { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(healthy?.status == 200)
            let ready = await httpGet(port: port, path: "/readyz")
            #expect(ready?.status == 503)
            #expect(ready?.body.contains("badge state restoring") == true)
            failure.withLock { $0 = "publishing the badge changelog failed for 60 s" }
            let unhealthy = await httpGet(port: port, path: "/healthz")
            #expect(unhealthy?.status == 503)
            #expect(unhealthy?.body == "unhealthy: publishing the badge changelog failed for 60 s\n")
            group.cancelAll()
        }
    }

    @Test("/metrics says whether the relay is ready (read at each scrape) and when the process started")
    func readinessAndStartInMetrics() async throws {
        let ready = Mutex(false)
        let port = Int.random(in: 30_000...39_999)
        let server = OpsHTTPServer(host: "127.0.0.1", port: port, registry: PrometheusCollectorRegistry(), logger: Logger(label: "ops-test"),
                                   startedAt: Date(timeIntervalSince1970: 1_795_000_000.5)) {
            ready.withLock { $0 } ? (true, "ready") : (false, "not ready: device registrations loading")
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            var metrics: (status: Int, body: String)?
            for _ in 0..<100 where metrics == nil {
                metrics = await httpGet(port: port, path: "/metrics")
                if metrics == nil { try await Task.sleep(for: .milliseconds(50)) }
            }
            let lines = metrics?.body.split(separator: "\n") ?? []
            #expect(lines.contains("apns_relay_ready 0.0"), "\(metrics?.body ?? "")")
            #expect(lines.contains("process_start_time_seconds 1795000000.5"), "\(metrics?.body ?? "")")
            ready.withLock { $0 = true }
            #expect(await httpGet(port: port, path: "/metrics")?.body.split(separator: "\n").contains("apns_relay_ready 1.0") == true)
            group.cancelAll()
        }
    }
}
