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
struct OpsEndpointTests {
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
}
