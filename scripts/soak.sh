#!/usr/bin/env bash
# The soak: the relay at a steady rate for a long time (default 5,000 events/s for 30 minutes), its
# RSS and latency sampled every 10 s, then a plot. See docs/BENCHMARKS.md, "Soak".
#
#   scripts/soak.sh [relay-harness soak options]     e.g. scripts/soak.sh --minutes 2 --rate 2000
#
# Builds `apns-relay` and `relay-harness` in release, runs `relay-harness soak` (samples in
# WORK/soak.csv; WORK is --work, default .build/soak/<date>), then plots them with
# scripts/plot_soak.py into SOAK_PLOT (default docs/soak.png). matplotlib is installed from PyPI
# into the git-ignored .tools/plot-venv on the first run. Exits with the soak's status (1 when
# results are missing), after plotting what was sampled.
set -euo pipefail
cd "$(dirname "$0")/.."

work=""
arguments=("$@")
for ((index = 0; index < ${#arguments[@]}; index++)); do
    if [ "${arguments[$index]}" = --work ] && ((index + 1 < ${#arguments[@]})); then work=${arguments[$((index + 1))]}; fi
done
if [ -z "$work" ]; then
    work=.build/soak/$(date +%Y%m%d-%H%M%S)
    arguments+=(--work "$work")
fi
mkdir -p "$work"
plot=${SOAK_PLOT:-docs/soak.png}

swift build -c release --product apns-relay
swift build -c release --product relay-harness

status=0
.build/release/relay-harness soak "${arguments[@]}" 2>&1 | tee "$work/soak.log" || status=$?

venv=.tools/plot-venv
if ! "$venv/bin/python" -c "import matplotlib" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet matplotlib
fi
"$venv/bin/python" scripts/plot_soak.py "$work/soak.csv" "$plot"
exit $status
