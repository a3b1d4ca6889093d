/// Waits until `condition` holds, looking every `interval`, for at most `timeout`; returns whether it held.
///
/// For tests that wait for a service or a process to reach a state: the bound only keeps a broken run from
/// hanging, so it is generous, and the test asserts the state itself afterwards.
package func waitUntil(timeout: Duration, every interval: Duration = .milliseconds(100), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now.advanced(by: timeout)
    while !condition() {
        guard ContinuousClock.now < deadline else { return false }
        try? await Task.sleep(for: interval)
    }
    return true
}
