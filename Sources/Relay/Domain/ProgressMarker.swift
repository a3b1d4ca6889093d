// How far a partition's previous owner got, stored in the badge changelog.

/// The relay's progress on one events partition, stored in the matching `push.badge-state`
/// partition under ``key`` (a key no user id can have): every record at or below `through` whose
/// offset is not in `open` is finished (its results are published; its state change, if any, is
/// in the changelog). The partition's next owner skips those records, so a handover or a restart
/// after a refused commit sends and publishes nothing twice.
///
/// Written with every periodic commit, at revoke and at stop. Value:
/// `{"through":T,"open":[O,...],"updated_at":EPOCH_MS}`.
package struct ProgressMarker: Sendable, Equatable {
    /// The key: `0xFF` is never part of UTF-8, so no user's key (a JSON string's bytes) equals it.
    package static let key: [UInt8] = [0xFF] + Array("apns-relay/progress".utf8)
    /// Offsets listed in `open` at most; past that `through` is lowered to below the first left out.
    package static let maxOpenOffsets = 1_000

    /// The highest offset the marker speaks for.
    package var through: Int64
    /// Offsets at or below `through` that are not finished, ascending.
    package var open: [Int64]

    /// A marker; `open` beyond ``maxOpenOffsets`` lowers `through` (claiming less is always safe).
    package init(through: Int64, open: [Int64]) {
        if open.count > Self.maxOpenOffsets {
            let firstLeftOut = open[Self.maxOpenOffsets]
            self.through = firstLeftOut > Int64.min ? firstLeftOut - 1 : Int64.min  // a corrupt value must not trap
            self.open = Array(open.prefix(Self.maxOpenOffsets))
        } else {
            self.through = through
            self.open = open
        }
    }

    /// True when the record at `offset` was finished by the owner that wrote the marker.
    package func isFinished(_ offset: Int64) -> Bool {
        guard offset <= through else { return false }
        return !Self.binaryContains(open, offset)
    }

    private static func binaryContains(_ sorted: [Int64], _ value: Int64) -> Bool {
        var low = 0
        var high = sorted.count - 1
        while low <= high {
            let middle = (low + high) / 2
            if sorted[middle] == value { return true }
            if sorted[middle] < value { low = middle + 1 } else { high = middle - 1 }
        }
        return false
    }

    /// The value written at `now` (epoch ms).
    package func encoded(at now: Int64) -> [UInt8] {
        var writer = JSONObjectWriter()
        writer.integer("through", through)
        writer.raw("open", JSON.serialize(.array(open.map { .integer($0) })))
        writer.integer("updated_at", now)
        return writer.finish()
    }

    /// Reads a marker value.
    package static func decode(_ bytes: some Collection<UInt8>) throws(EventRejection) -> ProgressMarker {
        guard let root = try? JSON.parse(bytes), let through = root["through"]?.integerValue else {
            throw EventRejection(field: "progress", reason: "progress marker must be {\"through\":T,\"open\":[...]}")
        }
        var open: [Int64] = []
        if case .array(let elements)? = root["open"] {
            for element in elements {
                guard let offset = element.integerValue else {
                    throw EventRejection(field: "progress.open", reason: "progress marker open offsets must be integers")
                }
                open.append(offset)
            }
        }
        return ProgressMarker(through: through, open: open.sorted())
    }
}
