import CStopSignals
#if canImport(Glibc)
import Glibc
#endif

/// SIGTERM and SIGINT are caught from before `main` (the CStopSignals constructor) until a
/// command's service group takes them over. Without this a stop signal that came before the group
/// trapped it (Kubernetes stopping a pod that is still starting) ended the process by the signal
/// instead of a clean exit 0: on Linux, Dispatch's main thread waits in `sigsuspend` with every
/// signal unblocked, so a held (blocked) signal is not enough. Only the dynamic loader's first
/// milliseconds come before the constructor.
enum StopSignals {
    /// Once the service group traps the stop signals: a stop signal that came before is sent
    /// again, now to the group.
    static func handOverToServiceGroup() {
        let early = apns_relay_take_early_stop_signal()
        if early != 0 { kill(getpid(), early) }
    }

    /// For commands that do not trap the stop signals: they act as by default again, and one that
    /// came since the start acts now.
    static func restoreDefault() {
        apns_relay_default_stop_signals()
        let early = apns_relay_take_early_stop_signal()
        if early != 0 { raise(early) }
    }
}
