// How far a partition's previous owner got, stored in the badge changelog.

/// The relay's progress on one events partition, stored in the matching `push.badge-state`
/// partition under ``key`` (a key no user id can have): every record at or below `through` whose
/// offset is not in `open` is finished (its results are published; its state change, if any, is
/// in the changelog). Of an open record, the devices in `devicesDone` have their result published
/// already. The partition's next owner skips finished records and done devices, so a hand-over or
/// a restart after a refused commit sends and publishes nothing twice.
///
/// Written with every periodic commit, at a hand-over and at stop. Value:
///
///     {"through":L,"open":[O,...],
///      "exact":{"through":T,"runs":[FIRST,LEN,GAP,LEN,...],"done":[[OFFSET,"DIGEST",...],...]},
///      "updated_at":EPOCH_MS}
///
/// `exact` describes any number of open records exactly: runs of consecutive open offsets, the
/// first run's start, then each run's length and the count of finished offsets before the next.
/// `through`/`open` outside it are the shape older relays read (at most 1,000 offsets, `through`
/// lowered below the first left out: a claim of less, safe for an older reader in a rolling
/// upgrade). A marker without `exact` (written by an older relay) is read from those two alone.
package struct ProgressMarker: Sendable, Equatable {
    /// The key: `0xFF` is never part of UTF-8, so no user's key (a JSON string's bytes) equals it.
    package static let key: [UInt8] = [0xFF] + Array("apns-relay/progress".utf8)
    /// Offsets in the older shape's `open` list at most.
    package static let legacyOpenLimit = 1_000
    /// The most bytes a marker's value takes: below the 1,000,000 bytes of Kafka's default record
    /// limits (the producer's `message.max.bytes`, the topic's `max.message.bytes`). The runs take
    /// at most ``runsBudget`` (a few bytes per open record; the engine pauses consumption before a
    /// partition's open records could need more, see ``openRecordLimit(through:)``); device lists
    /// fill what is left. Past it the open records with the most done devices lose their lists
    /// (those devices would be sent again by the next owner, with the same apns-id), and runs past
    /// ``runsBudget`` are left out with `through` lowered below them: see ``encodedMeasured(at:)``.
    package static let maximumBytes = 900_000
    /// The most bytes the runs of open offsets take in a marker's value.
    package static let runsBudget = 600_000

    /// How many open records one partition's marker describes within ``runsBudget`` whatever their
    /// pattern, while its offsets stay at or below `through`: each run takes two numbers of at most
    /// that many digits, and two commas.
    package static func openRecordLimit(through: Int64, runsBudget: Int = runsBudget) -> Int {
        runsBudget / (2 * decimalDigits(max(0, through)) + 2)
    }

    private static func decimalDigits(_ value: Int64) -> Int {
        var digits = 1
        var rest = value
        while rest >= 10 {
            rest /= 10
            digits += 1
        }
        return digits
    }

    /// The highest offset the marker speaks for.
    package private(set) var through: Int64
    /// Offsets at or below `through` that are not finished: ascending, disjoint, not adjacent.
    package private(set) var open: [ClosedRange<Int64>]
    /// Per open offset, the digests (``DeviceDigest``) of the devices whose result is published.
    package private(set) var devicesDone: [Int64: [DeviceDigest]]

    /// A marker from open offsets in any order (runs are formed here; offsets above `through` are left out).
    package init(through: Int64, open: [Int64], devicesDone: [Int64: [DeviceDigest]] = [:]) {
        self.init(through: through, runs: Self.runs(of: open.sorted()), devicesDone: devicesDone)
    }

    /// A marker from ascending, disjoint runs of open offsets.
    package init(through: Int64, runs: [ClosedRange<Int64>], devicesDone: [Int64: [DeviceDigest]] = [:]) {
        self.through = through
        var merged: [ClosedRange<Int64>] = []
        for run in runs where run.lowerBound <= through {
            let clipped = run.lowerBound...min(run.upperBound, through)
            if let last = merged.last, last.upperBound < Int64.max, clipped.lowerBound <= last.upperBound + 1 {
                merged[merged.count - 1] = last.lowerBound...max(last.upperBound, clipped.upperBound)
            } else {
                merged.append(clipped)
            }
        }
        self.open = merged
        self.devicesDone = devicesDone.filter { !$0.value.isEmpty && Self.contains(merged, $0.key) }
    }

    /// Open offsets in all.
    package var openCount: Int64 { open.reduce(0) { $0 + ($1.upperBound - $1.lowerBound + 1) } }

    /// True when the record at `offset` was finished by the owner that wrote the marker.
    /// The highest offset up to which every record is finished: below the first open run, else ``through``.
    package var finishedThrough: Int64 { open.first.map { $0.lowerBound - 1 } ?? through }

    package func isFinished(_ offset: Int64) -> Bool {
        offset <= through && !Self.contains(open, offset)
    }

    /// The devices of the open record at `offset` whose result was published.
    package func devicesDone(at offset: Int64) -> [DeviceDigest] { devicesDone[offset] ?? [] }

    /// Ascending offsets as runs of consecutive ones.
    package static func runs(of ascending: [Int64]) -> [ClosedRange<Int64>] {
        var runs: [ClosedRange<Int64>] = []
        for offset in ascending {
            if let last = runs.last, offset == last.upperBound &+ 1, last.upperBound < Int64.max {
                runs[runs.count - 1] = last.lowerBound...offset
            } else if runs.last.map({ offset > $0.upperBound }) ?? true {
                runs.append(offset...offset)
            }
        }
        return runs
    }

    private static func contains(_ runs: [ClosedRange<Int64>], _ offset: Int64) -> Bool {
        var low = 0
        var high = runs.count - 1
        while low <= high {
            let middle = (low + high) / 2
            if runs[middle].contains(offset) { return true }
            if runs[middle].upperBound < offset { low = middle + 1 } else { high = middle - 1 }
        }
        return false
    }

    // MARK: The record

    /// The value written at `now` (epoch ms). Device lists that would take it past
    /// ``maximumBytes`` are left out (the shortest lists are kept first), and runs past ``runsBudget``.
    package func encoded(at now: Int64) -> [UInt8] { encodedMeasured(at: now).value }

    /// A marker's stored value, and what was left out of it to fit ``maximumBytes``.
    package struct Encoded: Sendable {
        package var value: [UInt8]
        /// Open records whose device lists were left out (those devices are sent again by the next owner).
        package var droppedDeviceLists: Int
        /// When the runs did not fit ``runsBudget``: the `through` stored instead, below the first run left
        /// out. The next owner then redoes every record above it (sends again with the same apns-ids,
        /// publishes again): a claim of less, never of more.
        package var loweredThrough: Int64?
    }

    /// The value written at `now` (epoch ms), and what was left out to fit.
    package func encodedMeasured(at now: Int64) -> Encoded {
        guard let fitting = fittingRunsBudget() else { return encodedKeepingRuns(at: now) }
        var encoded = fitting.encodedKeepingRuns(at: now)
        encoded.loweredThrough = fitting.through
        return encoded
    }

    /// This marker with its runs cut to fit ``runsBudget`` (`through` lowered below the first run left out);
    /// `nil` when they fit as they are.
    private func fittingRunsBudget() -> ProgressMarker? {
        var bytes = 2
        var previousEnd: Int64?
        for (index, run) in open.enumerated() {
            let startOrGap = previousEnd.map { run.lowerBound - $0 - 1 } ?? run.lowerBound
            bytes += Self.decimalDigits(startOrGap) + Self.decimalDigits(run.upperBound - run.lowerBound + 1) + 2
            if bytes > Self.runsBudget {
                return ProgressMarker(through: run.lowerBound - 1, runs: Array(open[..<index]), devicesDone: devicesDone)
            }
            previousEnd = run.upperBound
        }
        return nil
    }

    /// The value with every run, and how many open records' device lists it left out.
    private func encodedKeepingRuns(at now: Int64) -> Encoded {
        var writer = JSONObjectWriter()
        let (legacyThrough, legacyOpen) = legacyShape
        writer.integer("through", legacyThrough)
        writer.raw("open", JSON.serialize(.array(legacyOpen.map { .integer($0) })))
        var exact = JSONObjectWriter()
        exact.integer("through", through)
        var runNumbers: [JSONValue] = []
        runNumbers.reserveCapacity(open.count * 2)
        var previousEnd: Int64?
        for run in open {
            if let previousEnd {
                runNumbers.append(.integer(run.lowerBound - previousEnd - 1))
            } else {
                runNumbers.append(.integer(run.lowerBound))
            }
            runNumbers.append(.integer(run.upperBound - run.lowerBound + 1))
            previousEnd = run.upperBound
        }
        let runs = JSON.serialize(.array(runNumbers))
        exact.raw("runs", runs)
        var dropped = 0
        if !devicesDone.isEmpty {
            // What the rest takes: the legacy list (at most 1,000 offsets of 20 digits), the runs, the keys.
            var budget = Self.maximumBytes - runs.count - (legacyOpen.count * 21 + 200)
            var kept: [(offset: Int64, digests: [DeviceDigest])] = []
            // Smallest lists first: within the budget, the most records keep theirs.
            for (offset, digests) in devicesDone.sorted(by: { ($0.value.count, $0.key) < ($1.value.count, $1.key) }) {
                let cost = 24 + digests.count * (DeviceDigest.textLength + 3)
                guard cost <= budget else {
                    dropped += 1
                    continue
                }
                budget -= cost
                kept.append((offset, digests))
            }
            kept.sort { $0.offset < $1.offset }
            exact.raw("done", JSON.serialize(.array(kept.map { entry in
                .array([.integer(entry.offset)] + entry.digests.map { .string($0.text) })
            })))
        }
        writer.raw("exact", exact.finish())
        writer.integer("updated_at", now)
        return Encoded(value: writer.finish(), droppedDeviceLists: dropped, loweredThrough: nil)
    }

    /// What an older relay reads: at most ``legacyOpenLimit`` open offsets, `through` lowered
    /// below the first one left out.
    private var legacyShape: (through: Int64, open: [Int64]) {
        var offsets: [Int64] = []
        for run in open {
            var offset = run.lowerBound
            while true {
                guard offsets.count < Self.legacyOpenLimit else {
                    return (offset > Int64.min ? offset - 1 : Int64.min, offsets)
                }
                offsets.append(offset)
                if offset == run.upperBound { break }
                offset += 1
            }
        }
        return (through, offsets)
    }

    /// Reads a marker value, in the current shape or the older one (`through` and `open` only).
    package static func decode(_ bytes: some Collection<UInt8>) throws(EventRejection) -> ProgressMarker {
        guard let root = try? JSON.parse(bytes) else { throw invalid("progress marker is not JSON") }
        return try decode(json: root)
    }

    /// Reads a marker value already parsed (one nested in another record).
    package static func decode(json root: JSONValue) throws(EventRejection) -> ProgressMarker {
        if let exact = root["exact"], exact != .null {
            return try decodeExact(exact)
        }
        guard let through = root["through"]?.integerValue else {
            throw invalid("progress marker must be {\"through\":T,\"open\":[...]}")
        }
        var open: [Int64] = []
        switch root["open"] {
        case nil:
            break  // no open records
        case .array(let elements)?:
            for element in elements {
                guard let offset = element.integerValue else { throw invalid("progress marker open offsets must be integers") }
                open.append(offset)
            }
        case _?:
            throw invalid("progress marker must be {\"through\":T,\"open\":[...]}")
        }
        return ProgressMarker(through: through, open: open)
    }

    private static func decodeExact(_ exact: JSONValue) throws(EventRejection) -> ProgressMarker {
        guard let through = exact["through"]?.integerValue, case .array(let numbers)? = exact["runs"], numbers.count % 2 == 0 else {
            throw invalid("progress marker's exact part must be {\"through\":T,\"runs\":[FIRST,LEN,GAP,LEN,...]}")
        }
        var runs: [ClosedRange<Int64>] = []
        runs.reserveCapacity(numbers.count / 2)
        var index = 0
        while index < numbers.count {
            guard let startOrGap = numbers[index].integerValue, let length = numbers[index + 1].integerValue, length >= 1,
                  runs.isEmpty || startOrGap >= 0 else {
                throw invalid("progress marker runs must be integers: a start, then lengths >= 1 and gaps >= 0")
            }
            // The next run starts `gap + 1` after the last one ends; either sum may overflow, and a wrapped start would
            // land below the runs before it.
            let (step, stepOverflow) = runs.isEmpty ? (0, false) : startOrGap.addingReportingOverflow(1)
            let (start, startOverflow) = runs.last.map { $0.upperBound.addingReportingOverflow(step) } ?? (startOrGap, false)
            let (end, endOverflow) = start.addingReportingOverflow(length - 1)
            guard !stepOverflow, !startOverflow, !endOverflow else { throw invalid("progress marker runs overflow") }
            runs.append(start...end)
            index += 2
        }
        var devicesDone: [Int64: [DeviceDigest]] = [:]
        if case .array(let entries)? = exact["done"] {
            for entry in entries {
                guard case .array(let fields) = entry, let offset = fields.first?.integerValue else {
                    throw invalid("progress marker done entries must be [OFFSET, \"DIGEST\", ...]")
                }
                var digests: [DeviceDigest] = []
                for field in fields.dropFirst() {
                    guard case .string(let text) = field, let digest = DeviceDigest(text: text) else {
                        throw invalid("progress marker device digests must be \(DeviceDigest.textLength) hex digits")
                    }
                    digests.append(digest)
                }
                devicesDone[offset] = digests
            }
        }
        return ProgressMarker(through: through, runs: runs, devicesDone: devicesDone)
    }

    private static func invalid(_ reason: String) -> EventRejection {
        EventRejection(field: "progress", reason: reason)
    }
}

/// A device token's 64-bit digest (FNV-1a of its lower-case text), as a progress marker lists
/// the devices of an open record whose result is published. Stable across processes and versions
/// (Swift's `Hasher` is seeded per process). Within one event's at most 1,000 tokens a collision
/// is about one in 10^13: it would leave one device unsent after a hand-over.
package struct DeviceDigest: Hashable, Sendable, Comparable {
    package let value: UInt64
    /// Characters of ``text``.
    package static let textLength = 16

    /// The digest of `token` (hex; case does not matter).
    package init(token: String) {
        var token = token
        // FNV-1a of the lower-cased bytes, read in place (one per published result).
        value = token.withUTF8 { bytes in
            var hash: UInt64 = 0xCBF2_9CE4_8422_2325
            for byte in bytes {
                let lower = (byte >= 0x41 && byte <= 0x5A) ? byte | 0x20 : byte
                hash = (hash ^ UInt64(lower)) &* 0x0000_0100_0000_01B3
            }
            return hash
        }
    }

    /// Reads ``text``.
    package init?(text: String) {
        // Hex digits only: `UInt64(_:radix:)` also takes a sign.
        guard text.utf8.count == Self.textLength, text.utf8.allSatisfy(\.isHexDigit), let value = UInt64(text, radix: 16) else { return nil }
        self.value = value
    }

    /// 16 lower-case hex digits.
    package var text: String {
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: Self.textLength - hex.count) + hex
    }

    package static func < (lhs: DeviceDigest, rhs: DeviceDigest) -> Bool { lhs.value < rhs.value }
}

private extension UInt8 {
    var isHexDigit: Bool { (0x30...0x39).contains(self) || (0x41...0x46).contains(self) || (0x61...0x66).contains(self) }
}
