#!/usr/bin/env bash
# Heap allocations per notification of the relay at saturation, counted by heaptrack. See
# docs/BENCHMARKS.md ("Other reference points").
#
#   scripts/heap-count.sh [BINARY_DIR]      BINARY_DIR holds apns-relay and relay-harness (default: a release build)
#
# Runs `relay-harness bench --skip-h2load` twice, with SMALL and LARGE events (default 50,000 and 100,000;
# USERS users x 2 devices, default 10,000), the relay under heaptrack, and prints the difference of the two
# allocation counts per extra notification: start-up and shutdown cancel out. Unlike CPU time, which moves
# by ~10% between runs on a shared machine, the count repeats to within ~0.5 per notification (of ~40), so
# it shows a change of one allocation.
#
# The relay runs behind a wrapper script named apns-relay (relay-harness starts the apns-relay next to it),
# which does not pass the bench's SIGTERM on: once the relay's CPU stops rising (every result is in and it
# only ticks), this script stops the relay itself. Needs heaptrack (Debian: apt-get install heaptrack).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v heaptrack >/dev/null && command -v heaptrack_print >/dev/null || {
    echo "heap-count: needs heaptrack and heaptrack_print (Debian: apt-get install heaptrack)" >&2
    exit 2
}

binaries=${1:-}
if [ -z "$binaries" ]; then
    swift build -c release --product apns-relay
    swift build -c release --product relay-harness
    binaries=.build/release
fi
small=${SMALL:-50000}
large=${LARGE:-100000}
users=${USERS:-10000}
work=$(mktemp -d /tmp/heap-count.XXXXXX)
mkdir -p "$work/bin"
cp "$binaries/apns-relay" "$work/bin/apns-relay"
cp "$binaries/relay-harness" "$work/relay-harness"
cat >"$work/apns-relay" <<EOF
#!/usr/bin/env bash
if [ "\$1" = run ]; then exec heaptrack -o "$work/heap-\$HEAP_COUNT_RUN" "$work/bin/apns-relay" "\$@"; fi
exec "$work/bin/apns-relay" "\$@"
EOF
chmod +x "$work/apns-relay"

# Prints the number of allocations the relay made in one bench of $1 events.
count_allocations() {
    local events=$1 bench pid ticks last=-1 idle=0
    HEAP_COUNT_RUN=$events "$work/relay-harness" bench --skip-h2load --events "$events" --users "$users" \
        --work "$work/bench-$events" >"$work/bench-$events.txt" 2>&1 &
    bench=$!
    # The relay is idle once its CPU time (utime + stime, in clock ticks) grows by at most 5 ticks in 2 s,
    # three times in a row: its 100 ms ticks alone, under heaptrack. The pattern is anchored: heaptrack's own
    # shell has the same words further along its command line.
    while kill -0 "$bench" 2>/dev/null; do
        sleep 2
        pid=$(pgrep -f "^$work/bin/apns-relay run" | head -1 || true)
        [ -n "$pid" ] || continue
        ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo "$last")
        if ((last >= 0 && ticks - last <= 5)); then idle=$((idle + 1)); else idle=0; fi
        last=$ticks
        if ((idle >= 3)); then
            kill -TERM "$pid"
            break
        fi
    done
    wait "$bench" || { echo "heap-count: the bench of $events events failed; see $work/bench-$events.txt" >&2; exit 1; }
    # heaptrack writes its file as the relay exits.
    for _ in $(seq 1 30); do
        pgrep -f "^$work/bin/apns-relay run" >/dev/null || break
        sleep 1
    done
    heaptrack_print -f "$work/heap-$events".*zst 2>/dev/null | awk '/^calls to allocation functions:/ { print $5 }'
}

small_count=$(count_allocations "$small")
large_count=$(count_allocations "$large")
notifications=$(((large - small) * 2))
echo "allocations: $small_count with $small events, $large_count with $large events ($users users x 2 devices)"
awk -v a="$small_count" -v b="$large_count" -v n="$notifications" \
    'BEGIN { printf "allocations per notification: %.2f\n", (b - a) / n }'
echo "heaptrack files and bench output: $work"
