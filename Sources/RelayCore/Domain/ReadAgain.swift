// What each events partition's owner reads again after the partition count changed: how a forward made under the
// old layout is told from the copy its source's owner makes again under the new one.

/// The records of one events partition that its next owner reads, and so forwards, again once the relays start
/// under a new layout: from the group's committed offset, every record the partition's last progress marker does
/// not list as finished. `apns-relay partitions migrate` stores these, for every partition of the old layout, in the
/// new layout record, while no relay runs (so neither moves).
///
/// An event forwarded under the old layout and not yet read at its old home is read there under the new layout,
/// away from its user's new home. When its source record is one its source's owner reads again, that owner forwards
/// the event to the new home itself, so this copy is dropped; otherwise this copy is the only one and is forwarded
/// on (with this hop as its source, as any other record read away from home).
package struct ReadAgain: Sendable, Equatable {
    /// The events partition.
    package var partition: Int32
    /// The group's committed offset for it when the layout changed.
    package var committed: Int64
    /// Its last progress marker then (only which records were finished), `nil` when it had none.
    package var progress: ProgressMarker?

    package init(partition: Int32, committed: Int64, progress: ProgressMarker?) {
        self.partition = partition
        self.committed = committed
        self.progress = progress.map { ProgressMarker(through: $0.through, runs: $0.open) }
    }

    /// Whether the partition's owner reads the record at `offset` again (and forwards it again if it belongs
    /// elsewhere).
    package func includes(_ offset: Int64) -> Bool {
        offset >= committed && !(progress?.isFinished(offset) ?? false)
    }

    /// `{"partition":P,"from":COMMITTED,"progress":MARKER}` (the marker as a progress-marker record's value).
    func encoded(at now: Int64) -> [UInt8] {
        var writer = JSONObjectWriter()
        writer.integer("partition", Int64(partition))
        writer.integer("from", committed)
        if let progress { writer.raw("progress", progress.encoded(at: now)) }
        return writer.finish()
    }

    /// Reads one element of a layout record's `read_again`; `nil` when it is not one.
    static func decode(_ value: JSONValue) -> ReadAgain? {
        guard let partition = value["partition"]?.integerValue, partition >= 0, partition <= Int64(Int32.max),
              let committed = value["from"]?.integerValue else { return nil }
        var progress: ProgressMarker?
        if let marker = value["progress"], marker != .null {
            guard let decoded = try? ProgressMarker.decode(json: marker) else { return nil }
            progress = decoded
        }
        return ReadAgain(partition: Int32(partition), committed: committed, progress: progress)
    }
}
