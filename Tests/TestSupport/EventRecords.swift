// The events and registrations the relay's tests produce, as record values.

/// A `push.events` value: event `id` of `user` at `seq` (or the raw `rawSeq`), incrementing the badge, to `tokens` if given.
package func eventJSON(id: String, user: String, seq: Int?, increment: Int = 1, tokens: [String]? = nil, rawSeq: Int64? = nil) -> [UInt8] {
    var fields = ["\"id\":\"\(id)\"", "\"user\":\"\(user)\"", "\"badge\":{\"increment\":\(increment)}"]
    if let seq = rawSeq ?? seq.map(Int64.init) { fields.append("\"seq\":\(seq)") }
    if let tokens { fields.append("\"tokens\":[\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]") }
    return Array("{\(fields.joined(separator: ","))}".utf8)
}

/// A `push.devices` value registering a production device of `user` for `com.example.app`, registered at `at`.
package func registrationValue(user: String, at: Int64 = 1) -> [UInt8] {
    Array("{\"user\":\"\(user)\",\"topic\":\"com.example.app\",\"environment\":\"production\",\"registered_at\":\(at)}".utf8)
}

