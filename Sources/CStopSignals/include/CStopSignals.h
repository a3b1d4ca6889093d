#ifndef C_STOP_SIGNALS_H
#define C_STOP_SIGNALS_H

/// The stop signal (SIGTERM or SIGINT) that came since the start, or since the last call; 0 if none.
int apns_relay_take_early_stop_signal(void);

/// SIGTERM and SIGINT act as by default again.
void apns_relay_default_stop_signals(void);

#endif
