// Where a user lives: the one function that maps a user id to its home partition.

package import KafkaCore

/// How users are placed on the partitions of `push.events` (and the same-numbered partitions of
/// `push.badge-state`): a user's home is `murmur2(user id's UTF-8 bytes) & 0x7fffffff % partitionCount`,
/// the hash and arithmetic of Kafka's Java client's default partitioner for a keyed record. A producer that
/// keys events by user id with that partitioner (Java's and kafkajs' default, librdkafka's `murmur2_random`)
/// writes each event at its user's home; any other event of a user is forwarded there by the relay that
/// reads it.
package struct PartitionLayout: Sendable, Equatable, Hashable {
    /// The number of partitions users are placed on.
    package var partitionCount: Int32

    /// The layout over `partitionCount` partitions (at least 1).
    package init(partitionCount: Int32) {
        precondition(partitionCount >= 1, "a topic has at least one partition")
        self.partitionCount = partitionCount
    }

    /// The name of the placement function, as the layout record stores it.
    package static let hashName = "murmur2"

    /// The partition where `user`'s events are counted.
    package func home(of user: String) -> Int32 {
        var user = user
        return user.withUTF8 { home(ofKey: $0) }
    }

    /// The partition a record keyed with `key` lands on under this layout's function.
    package func home(ofKey key: some Collection<UInt8>) -> Int32 {
        Int32(bitPattern: Self.murmur2(key) & 0x7fff_ffff) % partitionCount
    }

    /// MurmurHash2 (32-bit) with Kafka's seed `0x9747b28c`, bytes read little-endian four at a time: the value
    /// `org.apache.kafka.common.utils.Utils.murmur2` returns, as an unsigned word.
    package static func murmur2(_ bytes: some Collection<UInt8>) -> UInt32 {
        let multiplier: UInt32 = 0x5bd1_e995
        let length = bytes.count
        var hash: UInt32 = 0x9747_b28c ^ UInt32(truncatingIfNeeded: length)
        var index = bytes.startIndex
        for _ in 0..<(length / 4) {
            var word = UInt32(bytes[index])
            index = bytes.index(after: index)
            word |= UInt32(bytes[index]) << 8
            index = bytes.index(after: index)
            word |= UInt32(bytes[index]) << 16
            index = bytes.index(after: index)
            word |= UInt32(bytes[index]) << 24
            index = bytes.index(after: index)
            word &*= multiplier
            word ^= word >> 24
            word &*= multiplier
            hash &*= multiplier
            hash ^= word
        }
        let tail = length % 4
        if tail > 0 {
            // The last one to three bytes, the first of them lowest.
            var word: UInt32 = 0
            var shift: UInt32 = 0
            while index != bytes.endIndex {
                word |= UInt32(bytes[index]) << shift
                shift += 8
                index = bytes.index(after: index)
            }
            hash ^= word
            hash &*= multiplier
        }
        hash ^= hash >> 13
        hash &*= multiplier
        hash ^= hash >> 15
        return hash
    }
}

extension PartitionLayout {
    /// The `push.badge-state` key of the layout record, in every partition: `0xFF` is never part of UTF-8, so no
    /// user's key equals it (as ``ProgressMarker/key``).
    package static let recordKey: [UInt8] = [0xFF] + Array("apns-relay/layout".utf8)

    /// The layout record's value: `{"partitions":N,"hash":"murmur2"}`, and after a change of the partition count
    /// what each partition's owner reads again (``ReadAgain``) as `"read_again":[...]`.
    package func encoded(readAgain: [ReadAgain] = [], at now: Int64 = 0) -> [UInt8] {
        var writer = JSONObjectWriter()
        writer.integer("partitions", Int64(partitionCount))
        writer.string("hash", Self.hashName)
        if !readAgain.isEmpty {
            var list: [UInt8] = [UInt8(ascii: "[")]
            for (index, partition) in readAgain.enumerated() {
                if index > 0 { list.append(UInt8(ascii: ",")) }
                list += partition.encoded(at: now)
            }
            list.append(UInt8(ascii: "]"))
            writer.raw("read_again", list)
        }
        return writer.finish()
    }

    /// The ``ReadAgain`` entries of a layout record, by partition (none when it has none or is not readable).
    package static func readAgain(in bytes: some Collection<UInt8>) -> [Int32: ReadAgain] {
        guard let root = try? JSON.parse(bytes), case .array(let entries)? = root["read_again"] else { return [:] }
        var table: [Int32: ReadAgain] = [:]
        for entry in entries {
            if let readAgain = ReadAgain.decode(entry) { table[readAgain.partition] = readAgain }
        }
        return table
    }

    /// Decodes a layout record; `nil` when it is not one this relay can read (another hash, a bad count).
    package static func decode(_ bytes: some Collection<UInt8>) -> PartitionLayout? {
        guard let root = try? JSON.parse(bytes), case .object = root,
              let count = root["partitions"]?.integerValue, count >= 1, count <= Int64(Int32.max),
              case .string(Self.hashName)? = root["hash"] else { return nil }
        return PartitionLayout(partitionCount: Int32(count))
    }
}

/// Where a forwarded event was read before the relay that read it forwarded it to its user's home partition:
/// the events partition and offset of that one hop, carried in the ``header`` of the forwarded record.
///
/// A relay forwards a partition's records in offset order through one idempotent producer, and a failed
/// forward ends it (nothing later is forwarded past a gap), so the forwards from one partition reach the home
/// partition in offset order, save repeats of forwards already there (a relay that crashed after forwarding,
/// before its progress was stored, forwards them again). The home partition therefore knows a repeat by its
/// source offset: at or below the highest one applied from that source partition for the user, unless its seq
/// is still to apply (seqs apply out of offset order: one held for a gap stays below a later one applied).
package struct ForwardSource: Sendable, Hashable {
    /// The events partition the record was read on.
    package var partition: Int32
    /// Its offset there.
    package var offset: Int64

    /// The header naming the hop, `PARTITION:OFFSET` in decimal ASCII.
    package static let header = "x-apns-relay-forwarded-from"

    package init(partition: Int32, offset: Int64) {
        self.partition = partition
        self.offset = offset
    }

    /// The header's value.
    package var headerValue: [UInt8] { Array("\(partition):\(offset)".utf8) }

    /// Reads a header value; `nil` when it is not `PARTITION:OFFSET` (a producer's own header of that name is
    /// then ignored: the record counts as one read where it is).
    package init?(headerValue: some Collection<UInt8>) {
        let text = String(decoding: headerValue, as: UTF8.self)
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let partition = Int32(parts[0]), let offset = Int64(parts[1]), partition >= 0, offset >= 0 else { return nil }
        self.init(partition: partition, offset: offset)
    }
}

/// Whether a restored `push.badge-state` partition may be served under the relay's layout (``PartitionLayout``):
/// every user must be counted at the partition that is its home now, or counts would start again from nothing
/// (a user whose home moved) or split in two.
package enum LayoutVerdict: Sendable, Equatable {
    /// Serve it: its layout record names this layout, and its users are at home.
    case serve
    /// A new partition of a new deployment: record the layout in it, then serve it.
    case record
    /// The partition holds nothing: the layout recorded in partition 0 (which every layout has) decides.
    case askPartitionZero
    /// Refuse to serve: the state was placed under another layout (the partition count grew, or a relay that
    /// recorded no layout placed it), and moving it is the operator's command. `problem` says what was found.
    case refuse(problem: String)

    /// The command that moves users' badge state to their homes and records the layout.
    package static let moveCommand = "apns-relay partitions migrate"

    /// The verdict on `changelog`, partition `partition` of a topic placed by `layout`.
    package static func of(_ changelog: RestoredChangelog, partition: Int32, layout: PartitionLayout) -> LayoutVerdict {
        if let recorded = changelog.layout {
            guard recorded == layout else {
                return .refuse(problem: "its users were placed for \(recorded.partitionCount) partitions, and the topic has \(layout.partitionCount) now")
            }
            if let misplaced = firstMisplaced(in: changelog, partition: partition, layout: layout) {
                return .refuse(problem: "user \(misplaced.user.debugDescription) is counted here but lives in partition \(misplaced.home)")
            }
            return .serve
        }
        if changelog.sawLayout { return .refuse(problem: "its layout record is not one this relay reads") }
        guard changelog.isEmpty else {
            return .refuse(problem: "its badge state was written by a relay that did not record its layout (an earlier version)")
        }
        return partition == 0 ? .record : .askPartitionZero
    }

    /// The verdict on an empty partition, from partition 0's changelog: the layout it records, or (none recorded)
    /// whether the deployment is new.
    package static func fromPartitionZero(_ zero: RestoredChangelog, layout: PartitionLayout) -> LayoutVerdict {
        if let recorded = zero.layout {
            return recorded == layout
                ? .record
                : .refuse(problem: "partition 0 says users were placed for \(recorded.partitionCount) partitions, and the topic has \(layout.partitionCount) now")
        }
        return zero.isEmpty ? .record : .refuse(problem: "partition 0's badge state was written by a relay that did not record its layout (an earlier version)")
    }

    /// The refusal as an operator reads it: what was found, and what to run.
    package static func refusal(_ problem: String, badgeStatePartition: TopicPartition) -> String {
        "\(badgeStatePartition) cannot be served: \(problem). Stop every relay, then run `\(moveCommand) --config FILE` (docs/DEPLOY.md, \"Growing the partitions\")"
    }

    private static func firstMisplaced(in changelog: RestoredChangelog, partition: Int32, layout: PartitionLayout) -> (user: String, home: Int32)? {
        for (user, entry) in changelog.users {
            guard case .state = entry else { continue }
            let home = layout.home(of: user.id)
            if home != partition { return (user.id, home) }
        }
        return nil
    }
}
