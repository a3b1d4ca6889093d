import Foundation
import Testing

/// The relay's domain and engine are pure: they see Kafka and APNs only as values (`KafkaCore`,
/// `APNsCore`), never the modules that link librdkafka or NIO, so they run in tests and benchmarks
/// with no I/O. Read from the sources, as the compiler sees the imports.
@Suite("Module boundaries of the relay's pure rooms")
struct ModuleBoundaryTests {
    static let relaySources = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/Relay")

    /// The engine's files: the machines the driver asks, with their effects and plans.
    static let engineFiles = ["RelayEffect.swift", "HandOverPlan.swift", "RetrySchedule.swift", "RecordReference.swift",
                              "RelayEngineConfiguration.swift", "PendingNotification.swift"]

    static func pureFiles() throws -> [URL] {
        let manager = FileManager.default
        let domain = relaySources.appendingPathComponent("Domain")
        let service = relaySources.appendingPathComponent("Service")
        let domainFiles = try manager.contentsOfDirectory(atPath: domain.path).filter { $0.hasSuffix(".swift") }.map { domain.appendingPathComponent($0) }
        let engine = try manager.contentsOfDirectory(atPath: service.path)
            .filter { $0.hasPrefix("RelayEngine") || engineFiles.contains($0) }.map { service.appendingPathComponent($0) }
        return domainFiles + engine
    }

    @Test("Relay/Domain and the engine import neither Kafka nor APNs nor NIO, only their value modules")
    func pureRoomsImportValuesOnly() throws {
        let files = try Self.pureFiles()
        #expect(files.count > 20, "found \(files.count) files under \(Self.relaySources.path)")
        let forbidden = ["Kafka", "APNs", "APNsNGHTTP2", "NIOCore", "NIOPosix", "NIOSSL", "NIOHTTP2", "CRdKafka"]
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            for line in text.split(separator: "\n") where line.contains("import ") {
                let words = line.split(separator: " ")
                guard let index = words.firstIndex(of: "import"), index + 1 < words.count else { continue }
                let module = String(words[index + 1])
                #expect(!forbidden.contains(module), "\(file.lastPathComponent) imports \(module)")
            }
        }
    }
}
