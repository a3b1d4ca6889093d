import Foundation
import Testing

@testable import apns_relay

/// Every committed fuzz corpus file is a regression test: the inputs that found crashes stay in
/// `Tests/Fuzz/Corpus/<target>/` and are replayed here through the fuzz targets' own entry points.
@Suite("Fuzz corpora replay")
struct FuzzCorpusReplayTests {
    static let corpusRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/Corpus").path

    /// The corpus directories of the executable fuzz targets (`Tests/Fuzz/<name>/`).
    static var executableTargets: [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: corpusRoot)) ?? []
        return names.filter { $0 != "ConfigurationFuzz" && !$0.hasPrefix(".") }.sorted()
    }

    /// Runs the fuzz target built without the fuzzer (a corpus replayer) in its own process, so a
    /// crashing input fails this test with the file's name instead of stopping the whole suite.
    @Test("every corpus file of a fuzz target passes its checks", arguments: executableTargets)
    func replay(target: String) throws {
        let directory = "\(Self.corpusRoot)/\(target)"
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).filter { !$0.hasPrefix(".") }
        #expect(!files.isEmpty, "\(target) has a seed corpus")
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(target)
        let process = Process()
        process.executableURL = binary
        process.arguments = [directory]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(target): \(output.suffix(3_000))")
        #expect(output.contains("replayed \(files.count) inputs"), "\(output.suffix(500))")
    }

    @Test("every configuration corpus file loads or is refused naming its key, secrets redacted")
    func replayConfiguration() throws {
        let directory = "\(Self.corpusRoot)/ConfigurationFuzz"
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).filter { !$0.hasPrefix(".") }.sorted()
        #expect(!files.isEmpty)
        for file in files {
            let data = try #require(FileManager.default.contents(atPath: "\(directory)/\(file)"))
            ConfigurationFuzzing.check(Array(data))
        }
    }
}
