package import Foundation
import Synchronization

/// A directory laid out as Kubernetes mounts a Secret: each file a symlink through `..data`, which points at a
/// timestamped directory; an update writes a new directory and swaps `..data` atomically (a rename).
package final class MountedSecret: Sendable {
    package let directory: String
    private let version = Mutex(0)

    package init(directory: String, files: [String: Data]) throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try update(files)
        for name in files.keys { try FileManager.default.createSymbolicLink(atPath: path(name), withDestinationPath: "..data/\(name)") }
    }

    package func path(_ name: String) -> String { "\(directory)/\(name)" }

    /// Writes `files` into a new version directory, then swaps `..data` to it in one rename.
    package func update(_ files: [String: Data]) throws {
        let next = version.withLock { $0 += 1; return $0 }
        let versionDirectory = "..2026_11_29_\(next)"
        try FileManager.default.createDirectory(atPath: "\(directory)/\(versionDirectory)", withIntermediateDirectories: true)
        for (name, data) in files { try data.write(to: URL(fileURLWithPath: "\(directory)/\(versionDirectory)/\(name)")) }
        try FileManager.default.createSymbolicLink(atPath: "\(directory)/..data_tmp", withDestinationPath: versionDirectory)
        guard rename("\(directory)/..data_tmp", "\(directory)/..data") == 0 else { throw CocoaError(.fileWriteUnknown) }
    }
}
