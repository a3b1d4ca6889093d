import APNsSimulator
import Foundation
import TestSupport
import Testing

@Suite("The simulator's certificate directory")
struct CertificateAuthorityTests {
    @Test("a directory the simulator generated is removed at shutdown; one it was given is kept")
    func generatedDirectoryRemoved() async throws {
        let generated = try await APNsSimulator.start(SimulatorOptions())
        let generatedDirectory = generated.certificates.directory
        #expect(FileManager.default.fileExists(atPath: generated.certificates.caPath))
        await generated.shutdown()
        #expect(!FileManager.default.fileExists(atPath: generatedDirectory), "\(generatedDirectory) left behind")

        var options = SimulatorOptions()
        let given = scratchPath("given")
        defer { try? FileManager.default.removeItem(atPath: given) }
        options.certDirectory = given
        let simulator = try await APNsSimulator.start(options)
        await simulator.shutdown()
        #expect(FileManager.default.fileExists(atPath: simulator.certificates.caPath), "the caller's directory is the caller's")
    }
}
