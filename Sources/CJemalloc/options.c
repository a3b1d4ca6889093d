#include "CJemalloc.h"

// Two arenas: the relay allocates mostly from its loop, two event loops and librdkafka's threads, and the default
// (four per core) raised the restore's peak RSS from ~260 to ~315 MiB without a CPU gain. Dirty pages go back to
// the kernel after 1 s, through jemalloc's own background thread, so RSS follows what the relay holds after a
// burst (what periodic malloc_trim calls did for glibc).
const char *const malloc_conf = "narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0,background_thread:true";
