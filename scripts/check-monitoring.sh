#!/usr/bin/env bash
# The chart's Grafana dashboard and PrometheusRule against a real Prometheus (Debian's) scraping a
# running relay (`apns-relay run` on an embedded Kafka, `apns-relay simulator` as APNs): every
# dashboard query and alert expression names series the relay exports (scripts/monitoring_check.py).
#
#   scripts/check-monitoring.sh [APNS_RELAY_BINARY]   (default .build/debug/apns-relay; build it first)
#
# Needs prometheus and kcat (scripts/install-deps.sh) and the packaging tools (helm, PyYAML; installed
# into .tools/ as scripts/check-packaging.sh does). Prints PASS/FAIL lines; exits 1 when a check failed.
set -uo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
BINARY="${1:-$TOOLS_ROOT/.build/debug/apns-relay}"
source "$SCRIPT_DIR/packaging-tools.sh"
use_tools

for tool in prometheus kcat; do
  command -v "$tool" >/dev/null || { echo "FAIL $tool not found: scripts/install-deps.sh installs it"; exit 1; }
done
[[ -x "$BINARY" ]] || { echo "FAIL no apns-relay binary at $BINARY: swift build --product apns-relay"; exit 1; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# Release apns-relay in namespace push, as scripts/check-packaging.sh renders it: the alerts select
# job="apns-relay", namespace="push".
helm template apns-relay "$TOOLS_ROOT/helm/apns-relay" --namespace push \
  -f "$TOOLS_ROOT/helm/apns-relay/ci/all-on-values.yaml" >"$WORK/chart.yaml" || { echo "FAIL helm template"; exit 1; }
"$VENV/bin/python" "$SCRIPT_DIR/monitoring_check.py" "$BINARY" "$WORK/chart.yaml" "$WORK/run"
