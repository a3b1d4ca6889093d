import Foundation
import Kafka
import Testing
import TestSupport

/// The librdkafka `apns-relay` runs with: logged at start, and an older one than it needs refused.
@Suite("apns-relay and the librdkafka it loads")
struct LibraryVersionProcessTests {
    /// A shared library answering librdkafka's two version calls as `version` (`0xMMmmrrpp`) and `name`; preloaded, it
    /// stands in front of the real library as an older installed one would.
    static func olderLibrary(version: String, name: String, in directory: String) throws -> String {
        let source = "\(directory)/old-rdkafka.c"
        let library = "\(directory)/old-rdkafka.so"
        try """
            int rd_kafka_version(void) { return \(version); }
            const char *rd_kafka_version_str(void) { return "\(name)"; }
            """.write(toFile: source, atomically: true, encoding: .utf8)
        let compiler = Process()
        compiler.executableURL = URL(fileURLWithPath: "/usr/bin/cc")
        compiler.arguments = ["-shared", "-fPIC", "-o", library, source]
        try compiler.run()
        compiler.waitUntilExit()
        try #require(compiler.terminationStatus == 0, "cc could not build the stand-in library")
        return library
    }

    @Test("run, demo, dlq replay and partitions migrate refuse an older librdkafka with exit 2 naming it; commands without Kafka still run")
    func olderLibraryRefused() throws {
        let directory = scratchPath("old-librdkafka")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let library = try Self.olderLibrary(version: "0x020002ff", name: "2.0.2", in: directory)
        let fixture = try ConfigFixture()
        let file = try fixture.write(fixture.validYAML)
        for arguments in [["run", "--config", file], ["demo"], ["dlq", "replay", "--config", file], ["partitions", "migrate", "--config", file]] {
            let (status, output) = try runRelay(arguments, environment: ["LD_PRELOAD": library])
            #expect(status == 2, "\(arguments): \(output)")
            #expect(output.contains("librdkafka 2.0.2 is older than 2.8.0"), "\(arguments): \(output)")
        }
        let checked = try runRelay(["check-config", "--config", file], environment: ["LD_PRELOAD": library])
        #expect(checked.status == 0, "\(checked.output)")
    }

    @Test("run logs the librdkafka it loaded as it starts")
    func versionLogged() async throws {
        let fixture = try ConfigFixture()
        let file = try fixture.write(fixture.validYAML.replacingOccurrences(of: "brokers: ", with: "brokers: 127.0.0.1:1 #"))
        let log = "\(scratchPath("version-log")).log"
        let relay = try startRelay(["run", "--config", file], log: log)
        defer { if relay.isRunning { relay.interrupt() } }
        let logged = await waitUntil(timeout: .seconds(30)) {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains(#""librdkafka":"\#(KafkaLibrary.versionString)""#)
        }
        #expect(logged, "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "no log")")
    }
}
