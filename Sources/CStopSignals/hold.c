// SIGTERM and SIGINT caught from before `main` (see StopSignals.swift). A constructor runs on the
// main thread before the Swift runtime starts any thread; until a service group's signal source
// takes the signals over, a stop signal is only remembered here, for the group to receive again.
#include <signal.h>
#include <string.h>
#include "CStopSignals.h"

static volatile sig_atomic_t early_stop_signal = 0;

static void remember_stop_signal(int signal_number) {
    early_stop_signal = signal_number;
}

__attribute__((constructor))
static void apns_relay_catch_stop_signals(void) {
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = remember_stop_signal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
}

int apns_relay_take_early_stop_signal(void) {
    int signal_number = early_stop_signal;
    early_stop_signal = 0;
    return signal_number;
}

void apns_relay_default_stop_signals(void) {
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
}
