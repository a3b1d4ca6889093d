/// A device token (64 lower-case hex digits) numbered `number`, as the relay's tests make them.
package func token(_ number: Int) -> String {
    let hex = String(number, radix: 16)
    return String(repeating: "0", count: 64 - hex.count) + hex
}
