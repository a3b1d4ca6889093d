import APNs
import Foundation
import FuzzSupport

/// Fuzzes `APNsResponse.parse`, the HTTP/2 response parser (status, `apns-id` and `retry-after`
/// headers, the `{"reason":…,"timestamp":…}` body) and the classification built on it.
/// Corpus: `Tests/Fuzz/Corpus/APNsResponseFuzz/`.
///
/// Input layout: two bytes of status (big-endian, modulo 1000), then the `apns-id` header up to the
/// first newline, the `retry-after` header up to the second (an empty header is absent), then the body.
enum APNsResponseFuzz: FuzzTarget {
    static func check(_ bytes: [UInt8]) {
        guard bytes.count >= 2 else { return }
        let status = (Int(bytes[0]) << 8 | Int(bytes[1])) % 1000
        let parts = bytes.dropFirst(2).split(separator: UInt8(ascii: "\n"), maxSplits: 2, omittingEmptySubsequences: false)
        func header(_ index: Int) -> String? {
            guard index < parts.count, !parts[index].isEmpty else { return nil }
            return String(decoding: parts[index], as: UTF8.self)
        }
        let apnsID = header(0)
        let retryAfter = header(1)
        let body = parts.count > 2 ? Array(parts[2]) : []

        let response = APNsResponse.parse(status: status, apnsIDHeader: apnsID, retryAfterHeader: retryAfter, body: body)
        Fuzz.require(response == APNsResponse.parse(status: status, apnsIDHeader: apnsID, retryAfterHeader: retryAfter, body: body), "parse is not deterministic")
        Fuzz.require(response.status == status, "status \(response.status) != \(status)")
        Fuzz.require(response.apnsID == apnsID.flatMap(UUID.init(uuidString:)), "apns-id taken from something else than the header")
        Fuzz.require(response.retryAfterSeconds == retryAfter.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }, "retry-after misread")
        if status != 200 { Fuzz.require(response.reason != nil, "an error response without a reason") }
        if let reason = response.reason {
            Fuzz.require(APNsReason(rawValue: reason.rawValue) == reason, "reason \(reason.rawValue) does not survive its raw value")
        }

        let expected: APNsOutcomeClass
        switch status {
        case 200: expected = .delivered
        case 410: expected = .tokenDead
        case 429, 500, 502, 503, 504: expected = .retryable
        default: expected = response.classification
        }
        Fuzz.require(response.classification == expected, "status \(status) classified \(response.classification)")
        Fuzz.require(APNsAttemptResult.response(response).classification == response.classification, "attempt and response disagree")
    }
}

#if FUZZING
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt { APNsResponseFuzz.fuzzOne(data, size) }
#else
@main extension APNsResponseFuzz {}
#endif
