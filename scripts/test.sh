#!/usr/bin/env bash
# The whole test suite: Swift tests (Kafka on librdkafka's embedded mock cluster, and `apns-relay run`
# processes against a real broker process, noida-db; APNs against the in-process simulator, the domain,
# the CLI), then the packaging checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# noida-db for the broker-process tests (BrokerProcessTests), into .tools/: from PyPI the first time,
# from the kept wheel afterwards.
bash scripts/install-noida.sh >/dev/null
swift build --build-tests
# One test at a time: several tests start consumer groups on embedded clusters, and on a 2-core
# machine running them side by side only makes group joins slower.
swift test --skip-build --no-parallel

# The chart's dashboard and alerts against a real Prometheus (Debian's) scraping the built relay: every
# query and alert names series the relay exports (about 15 s).
bash scripts/check-monitoring.sh

# The short crash trials (`make chaos` runs ten): the built binary killed with SIGKILL under load, a
# broker down for 10 s, the simulator's standing faults; nothing lost, nothing applied twice.
.build/debug/relay-harness chaos --trials 2 --users 100 --events-per-trial 600 --broker-down-s 10

# The fuzzers themselves run in `make fuzz-smoke` / `make fuzz`, not here: their instrumented build is
# a second full build of the package (10-20 min on this 2-core machine), which would take CI past its
# 40-minute budget. Every committed corpus file (seeds and fixed crashes) was replayed by the Swift
# tests above.
