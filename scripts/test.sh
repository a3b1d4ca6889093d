#!/usr/bin/env bash
# The whole test suite: Swift tests (Kafka on librdkafka's embedded mock cluster, and `apns-relay run`
# processes against a real broker process, noida-db; APNs against the in-process simulator, the domain,
# the CLI), then the packaging checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# noida-db for the broker-process tests (BrokerProcessTests), into .tools/: from PyPI the first time,
# from the kept wheel afterwards.
bash scripts/install-noida.sh >/dev/null
# python-jsonschema for the schema tests (Tests/TestSupport/SchemaValidation.swift), into .tools/ likewise.
bash scripts/install-jsonschema.sh >/dev/null
swift build --build-tests

# Two shards side by side, each running one test at a time: the tests wait on timers, group joins,
# sockets and the processes they start most of the time (both shards together keep ~1.2 of the 2 cores
# busy), so together they take ~60% of one run. Within a shard one at a time: several tests start
# consumer groups on embedded clusters, and many of them side by side only make group joins slower.
# The test bundle is run directly (it is what `swift test` runs): two `swift test` would take turns
# on SwiftPM's lock of .build. The shards are one pattern and its complement: every test runs once.
# Only swift-testing runs this way: an XCTest case would be skipped without a word, so none may exist.
if grep -rlq --include='*.swift' '^import XCTest' Tests; then
  echo "scripts/test.sh runs swift-testing only; XCTest cases found in Tests/ would not run" >&2
  exit 1
fi
# Every room (a file in Sources/) has its tests where a newcomer looks: a file named after it, or a row of
# docs/ARCHITECTURE.md's "Where a room's tests are" naming them.
python3 scripts/check-test-rooms.py
bundle="$(swift build --show-bin-path)/apns-relayPackageTests.xctest"
cli_and_kafka='^(ApnsRelayCLITests|ApnsRelayProcessTests|KafkaTests)\.'
logs=.build/test-logs
mkdir -p "$logs"
NO_COLOR=1 "$bundle" --testing-library swift-testing --no-parallel --filter "$cli_and_kafka" >"$logs/cli-and-kafka.log" 2>&1 &
cli_and_kafka_pid=$!
NO_COLOR=1 "$bundle" --testing-library swift-testing --no-parallel --skip "$cli_and_kafka" >"$logs/other-targets.log" 2>&1 &
other_targets_pid=$!
trap 'kill "$cli_and_kafka_pid" "$other_targets_pid" 2>/dev/null || true' EXIT
failed=()
wait "$cli_and_kafka_pid" || failed+=(cli-and-kafka)
echo "== Swift tests of ApnsRelayCLITests, ApnsRelayProcessTests and KafkaTests ($logs/cli-and-kafka.log) =="
cat "$logs/cli-and-kafka.log"
wait "$other_targets_pid" || failed+=(other-targets)
echo "== Swift tests of the other targets ($logs/other-targets.log) =="
cat "$logs/other-targets.log"
trap - EXIT
if (( ${#failed[@]} > 0 )); then
  echo "== Swift tests failed (${failed[*]}) ==" >&2
  for shard in "${failed[@]}"; do grep -h '✘' "$logs/$shard.log" >&2 || true; done
  exit 1
fi

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
