// domain-bench: ledger + dispatcher throughput on one core, resident memory per user and per
// registered device, the engine's CPU per event, and two per-notification steps alone (a result
// record's encoding, an apns-id's derivation).
//
//   swift build -c release --product domain-bench && .build/release/domain-bench [users]
//
// Memory per user = (RSS with N users in the ledger - RSS before) / N, RSS from /proc/self/statm;
// memory per device the same way, with N devices (one per user) in a `DeviceRegistry`.
// Single-threaded on purpose: one partition's domain runs on one core. Rates are per CPU second
// of the benchmark thread (CLOCK_THREAD_CPUTIME_ID).

import Glibc
import APNsCore
import Kafka
import Relay

func residentBytes() -> Int {
    let descriptor = open("/proc/self/statm", O_RDONLY)
    guard descriptor >= 0 else { return 0 }
    defer { close(descriptor) }
    var buffer = [UInt8](repeating: 0, count: 256)
    let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, 255) }
    guard count > 0 else { return 0 }
    let fields = String(decoding: buffer[0..<count], as: UTF8.self).split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// CPU seconds used by this thread. Rates are per CPU second ("on one core"), so other processes
/// competing for the machine's cores do not distort them the way wall-clock time would.
func cpuNow() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

func formatted(_ value: Double) -> String {
    let rounded = Int(value.rounded())
    var digits = String(rounded)
    var index = digits.count - 3
    while index > 0 {
        digits.insert(",", at: digits.index(digits.startIndex, offsetBy: index))
        index -= 3
    }
    return digits
}

let userCount = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 1_000_000 : 1_000_000
let tokens: [String] = (0..<1_024).map { index in
    let hex = String(index, radix: 16)
    return String(repeating: "0", count: 64 - hex.count) + hex
}
// User ids are short enough ("u-999999") to be stored inline in the String, as most real ids of
// this shape are; longer ids add their heap bytes on top of the figure below.
func userID(_ index: Int) -> String { "u-\(index)" }

var sequencer = BadgeSequencer<Int>(reorderWindowMs: 2_000)
var dispatcher = DeviceDispatcher<Int>()

// Warm up allocator and code paths on a throwaway instance.
do {
    var warm = BadgeSequencer<Int>()
    for index in 0..<10_000 { _ = warm.offer(BadgeUpdate(user: userID(index), seq: 1, operation: .increment(1), tag: index), now: 0) }
}

let rssBefore = residentBytes()

// Phase 1: 1M users, first event each (creates the user's state).
var start = cpuNow()
for index in 0..<userCount {
    _ = sequencer.offer(BadgeUpdate(user: userID(index), seq: 1, operation: .increment(1), tag: index), now: 0)
}
let populate = (cpuNow() - start)
let rssAfter = residentBytes()
let bytesPerUser = Double(rssAfter - rssBefore) / Double(userCount)

// Registry: one device per user, loaded as the relay loads `push.devices` at start-up (`apply` of
// each record). Measured from the same baseline as the ledger, then freed, so the phases below
// run as they did without it.
func deviceToken(_ index: Int) -> String {
    let hex = String(index, radix: 16)
    return String(repeating: "0", count: 64 - hex.count) + hex
}
func deviceRecord(_ index: Int) -> [UInt8] {
    Array(#"{"user":"\#(userID(index))","topic":"com.example.app","environment":"production","registered_at":1795000000000}"#.utf8)
}
let registryPopulateRate: Double
let registryLookupRate: Double
let bytesPerDevice: Double
let registryCheck: String
do {
    let before = residentBytes()
    var registry = DeviceRegistry()
    start = cpuNow()
    for index in 0..<userCount {
        if let rejection = registry.apply(key: deviceToken(index), value: deviceRecord(index)[...]) { fatalError("\(rejection)") }
    }
    registryPopulateRate = Double(userCount) / (cpuNow() - start)
    bytesPerDevice = Double(residentBytes() - before) / Double(userCount)
    // Fan-out's reads: the user's devices, then each one's registration; users in a scattered order.
    let stride = 2_654_435_761 % userCount | 1
    var index = 0
    var found = 0
    start = cpuNow()
    for _ in 0..<userCount {
        index = (index + stride) % userCount
        for device in registry.devices(of: userID(index)) where registry.registration(for: device.token) != nil { found += 1 }
    }
    registryLookupRate = Double(userCount) / (cpuNow() - start)
    registryCheck = "devices \(registry.count), found \(found)"
}

// Phase 2: ledger only, in-order seqs, users in a scattered order (multiplicative hash walk).
let rounds = 3
let stride = 2_654_435_761 % userCount | 1
var operations = 0
start = cpuNow()
for round in 0..<rounds {
    var index = 0
    for _ in 0..<userCount {
        index = (index + stride) % userCount
        _ = sequencer.offer(BadgeUpdate(user: userID(index), seq: Int64(round + 2), operation: .increment(1), tag: index), now: 0)
        operations += 1
    }
}
let ledgerRate = Double(operations) / (cpuNow() - start)

// Phase 3: ledger + dispatcher: each event applied, enqueued for the user's device, sent, completed.
operations = 0
var sent = 0
start = cpuNow()
for round in 0..<rounds {
    var index = 0
    for _ in 0..<userCount {
        index = (index + stride) % userCount
        for outcome in sequencer.offer(BadgeUpdate(user: userID(index), seq: Int64(round + 2 + rounds), operation: .increment(1), tag: index), now: 0) {
            guard case .applied(_, let state, _) = outcome else { continue }
            let step = dispatcher.enqueue(DeviceNotification(token: tokens[index & 1_023], eventID: "e", badge: state.badge, isBadgeOnly: true, payload: index))
            if let dispatch = step.dispatch {
                sent += (dispatcher.complete(dispatch.ticket, outcome: .finished).dispatch == nil ? 0 : 1) + 1
            }
        }
        operations += 1
    }
}
let combinedRate = Double(operations) / (cpuNow() - start)

// Phase 4: reordered pairs (seq n+1 arrives after n+2): every event goes through the held path.
operations = 0
start = cpuNow()
var base = Int64(2 + 2 * rounds)
for _ in 0..<rounds {
    var index = 0
    for _ in 0..<userCount {
        index = (index + stride) % userCount
        _ = sequencer.offer(BadgeUpdate(user: userID(index), seq: base + 1, operation: .increment(1), tag: index), now: 0)
        _ = sequencer.offer(BadgeUpdate(user: userID(index), seq: base, operation: .increment(1), tag: index), now: 0)
        operations += 2
    }
    base += 2
}
let reorderedRate = Double(operations) / (cpuNow() - start)

// Phase 5: dispatcher only, idle devices: enqueue (sent at once) then complete.
operations = 0
start = cpuNow()
for index in 0..<(rounds * userCount) {
    let step = dispatcher.enqueue(DeviceNotification(token: tokens[index & 1_023], eventID: "e", badge: 1, isBadgeOnly: false, payload: index))
    if let dispatch = step.dispatch { _ = dispatcher.complete(dispatch.ticket, outcome: .finished) }
    operations += 1
}
let dispatcherRate = Double(operations) / (cpuNow() - start)

// Phase 6: dispatcher only, deep queues: 1,024 devices x 1,000 queued alerts, then drained by completions.
operations = 0
start = cpuNow()
var inFlight: [DeviceDispatch<Int>] = []
for index in 0..<1_024_000 {
    if let dispatch = dispatcher.enqueue(DeviceNotification(token: tokens[index & 1_023], eventID: "e", badge: nil, isBadgeOnly: false, payload: index)).dispatch {
        inFlight.append(dispatch)
    }
}
while let dispatch = inFlight.popLast() {
    if let next = dispatcher.complete(dispatch.ticket, outcome: .finished).dispatch { inFlight.append(next) }
    operations += 1
}
let deepQueueRate = Double(operations) / (cpuNow() - start)

// Phase 7: the engine itself (`RelayEngine`), one event at a time, with `window` records in flight on one partition:
// consumed, its badge change stored, its send answered, its result published (the oldest first, so the window
// stays full). The CPU per event must not grow with the window: an update that copied the partition's offset
// table would cost one table copy per event.
func engineMicrosecondsPerEvent(window: Int, events: Int) -> Double {
    let partition = TopicPartition("push.events", 0)
    var engine = RelayEngine(configuration: RelayEngine.Configuration(maxInFlight: 4 * window + 1_000, defaultTopic: "com.example.app"))
    _ = engine.assigned([partition])
    _ = engine.restored(partition, changelog: RestoredChangelog(), now: 0)
    var stored: [UInt64] = []
    var effects: [RelayEffect] = []
    var oldest = 0
    func consume(_ offset: Int) {
        let token = tokens[offset & 1_023]
        let value = Array("{\"id\":\"e\(offset)\",\"user\":\"u-\(offset)\",\"seq\":1,\"badge\":{\"increment\":1},\"tokens\":[\"\(token)\"]}".utf8)
        effects.removeAll(keepingCapacity: true)
        engine.consumed(KafkaMessage(topic: partition.topic, partition: 0, offset: Int64(offset), key: nil, value: value), now: 0, into: &effects)
        for case .appendChangelog(_, _, _, let changelogToken) in effects { stored.append(changelogToken) }
    }
    func finishOldest() {
        let changelogToken = stored[oldest]
        oldest += 1
        effects.removeAll(keepingCapacity: true)
        engine.changelogged(changelogToken, now: 0, into: &effects)
        for case .send(let dispatch) in effects {
            let answer = APNsOutcome(.response(APNsResponse(status: 200)), attempts: 1, apnsID: dispatch.notification.payload.notification.apnsID)
            var answered: [RelayEffect] = []
            engine.sent(dispatch, outcome: answer, now: 0, into: &answered)
            for case .publishResult(_, let record) in answered { _ = engine.published(record, now: 0) }
        }
    }
    for offset in 0..<window { consume(offset) }
    let start = cpuNow()
    for offset in window..<(window + events) {
        consume(offset)
        finishOldest()
    }
    return (cpuNow() - start) / Double(events) * 1_000_000
}
let engineSmallWindow = engineMicrosecondsPerEvent(window: 100, events: 100_000)
let engineLargeWindow = engineMicrosecondsPerEvent(window: 10_000, events: 100_000)

// Phase 8: two steps of every notification, alone: its result record encoded (the JSON value published to
// `push.results`) and its `apns-id` derived (a SHA-1 of the event id and the token). Nanoseconds of CPU each.
func nanosecondsEach(_ count: Int, _ body: (Int) -> Int) -> Double {
    var sink = 0
    for index in 0..<(count / 10) { sink &+= body(index) }  // warm-up
    let start = cpuNow()
    for index in 0..<count { sink &+= body(index) }
    let elapsed = cpuNow() - start
    precondition(sink != 42, "keeps the work from being optimised away")
    return elapsed / Double(count) * 1_000_000_000
}
let sampleResult = ResultRecord(eventID: "6f1c2a9e-0b1d-4c55-9a7e-3f7d2c1b9e10", user: "user-123456", token: tokens[77], seq: 12_345,
                                badge: 7, status: .delivered, apnsID: "a1b2c3d4-e5f6-5789-9abc-def012345678", httpStatus: 200,
                                reason: nil, attempts: 1, latencyMs: 123, at: 1_764_000_000_000)
let resultEncoding = nanosecondsEach(1_000_000) { _ in sampleResult.encoded().count }
let apnsIDDerivation = nanosecondsEach(1_000_000) { index in
    Int(DeliveryIdentity.apnsID(eventID: "6f1c2a9e-0b1d-4c55-9a7e-3f7d2c1b9e10", token: tokens[index & 1_023]).uuid.0)
}

let stateBytes = MemoryLayout<UserBadgeState>.stride
let keyBytes = MemoryLayout<String>.stride
print("users:                         \(formatted(Double(userCount)))")
print("populate (first event/user):   \(formatted(Double(userCount) / populate)) events/s")
print("ledger offer, in order:        \(formatted(ledgerRate)) events/s")
print("ledger + dispatcher:           \(formatted(combinedRate)) events/s (apply, enqueue, send, complete)")
print("dispatcher only, idle devices: \(formatted(dispatcherRate)) notifications/s (enqueue + complete)")
print("dispatcher only, deep queues:  \(formatted(deepQueueRate)) notifications/s (1,024 devices x 1,000 queued; enqueue + complete)")
print("ledger, reordered pairs:       \(formatted(reorderedRate)) events/s")
print("resident bytes per user:       \(twoDecimals(bytesPerUser)) (key \(keyBytes) B inline + state \(stateBytes) B + table slack)")
print("beyond the key:                \(twoDecimals(bytesPerUser - Double(keyBytes))) bytes/user, target 64 -> ratio \(twoDecimals((bytesPerUser - Double(keyBytes)) / 64))")
print("registry populate (apply):     \(formatted(registryPopulateRate)) records/s")
print("registry fan-out reads:        \(formatted(registryLookupRate)) users/s (devices(of:), then registration(for:) of each)")
print("resident bytes per device:     \(twoDecimals(bytesPerDevice)) (registry, one device per user)")
print("engine, 100 records in flight:    \(twoDecimals(engineSmallWindow)) µs CPU per event (consume, change stored, answered, published)")
print("engine, 10,000 records in flight: \(twoDecimals(engineLargeWindow)) µs CPU per event -> ratio \(twoDecimals(engineLargeWindow / engineSmallWindow)) (1 when nothing grows with the window)")
print("result record encoded:         \(formatted(resultEncoding)) ns CPU each (\(sampleResult.encoded().count) bytes)")
print("apns-id derived:               \(formatted(apnsIDDerivation)) ns CPU each (event id 36 bytes, token 64)")
print("check: \(registryCheck), users \(sequencer.ledger.userCount), sent \(sent), dispatcher pending \(dispatcher.pendingCount)")

func twoDecimals(_ value: Double) -> String {
    let scaled = (value * 100).rounded() / 100
    return "\(scaled)"
}
