// apns-relay's heap: jemalloc (Debian's libjemalloc2), linked into the executable so that it replaces glibc's
// malloc for every library in the process (Swift's runtime, librdkafka, nghttp2, BoringSSL).
#ifndef C_JEMALLOC_H
#define C_JEMALLOC_H

#include <stddef.h>

/// jemalloc's options for this program, read by jemalloc at its first allocation (before `main`); the
/// `MALLOC_CONF` environment variable, when set, is applied after it and wins.
extern const char *const malloc_conf;

/// jemalloc's control interface: reads (or writes) an option or statistic by name; 0 on success.
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

#endif
