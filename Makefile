# apns-relay: `make run` shows the relay on an embedded Kafka and simulator; `make test` runs every check.
SWIFT ?= swift

.PHONY: deps build run test swift-test packaging-check monitoring-check image image-check bench-kafka bench-relay bench-mixed heap-count soak chaos fuzz fuzz-smoke

deps:
	@bash scripts/install-deps.sh

build: deps
	$(SWIFT) build --product apns-relay

run: build
	$(SWIFT) run --skip-build apns-relay demo

test: deps
	bash scripts/test.sh
	$(MAKE) packaging-check

# libFuzzer on the event decoder, the legacy binary error-response and feedback decoders, the APNs
# response parser and the configuration loader (docs/RELIABILITY.md); FUZZ_SECONDS per target.
# Builds into .build/fuzz. fuzz-smoke runs every target too (scripts/fuzz.sh finds them in Tests/Fuzz).
FUZZ_SECONDS ?= 60
fuzz:
	bash scripts/fuzz.sh $(FUZZ_SECONDS)

# The same, a few seconds per target.
fuzz-smoke:
	bash scripts/fuzz.sh 5

# Packaging checks (offline): hadolint, helm lint/template + kubernetes-validate, yamllint, chart tests,
# the chart's alert rules through promtool (Debian's prometheus: make deps installs it).
packaging-check:
	bash scripts/check-packaging.sh

# The chart's Grafana dashboard and alerts against a real Prometheus scraping a running relay (make test runs it).
monitoring-check: build
	bash scripts/check-monitoring.sh

# docker/Dockerfile built as written, with buildah, on base images assembled from Debian's packages
# (scripts/base-images.sh), tagged as the chart's default image; see docs/DEPLOY.md ("Built and run here").
image:
	bash scripts/image.sh

# The built image run as the chart runs it (UID 10001, read-only root, no capabilities, /tmp only):
# demo, check-config on the rendered chart, run until /readyz then SIGTERM; ldd, contents, size.
image-check: image
	bash scripts/image-check.sh

# Consume 1,000,000 messages through the Swift consumer and through a plain C loop; see docs/BENCHMARKS.md.
bench-kafka: deps
	$(SWIFT) build -c release --product kafka-bench
	.build/release/kafka-bench

# The relay end to end, each part its own process: 500,000 events for 100,000 users / 200,000 devices; see docs/BENCHMARKS.md.
bench-relay: deps
	$(SWIFT) build -c release --product apns-relay
	$(SWIFT) build -c release --product relay-harness
	.build/release/relay-harness bench $(BENCH_ARGS)

# Latency per class under mixed load (an alert beside a flood of background pushes, users beside a hot user), from
# produce to result; see docs/BENCHMARKS.md. MIXED_ARGS e.g. "--scenario flood".
bench-mixed: deps
	$(SWIFT) build -c release --product apns-relay
	$(SWIFT) build -c release --product relay-harness
	.build/release/relay-harness mixed $(MIXED_ARGS)

# Heap allocations per notification of the relay at saturation (heaptrack, two bench sizes); see docs/BENCHMARKS.md.
heap-count: deps
	bash scripts/heap-count.sh

# The soak: 5,000 events/s for 30 minutes, RSS and latency every 10 s, a plot in docs/soak.png; see docs/BENCHMARKS.md.
# SOAK_ARGS e.g. "--minutes 2 --rate 2000".
soak: deps
	bash scripts/soak.sh $(SOAK_ARGS)

# Crash trials: 10 x kill -9 under load with standing faults (GOAWAY, 503s, resets, dead tokens, a broker down 30 s, a GOAWAY storm,
# a 5xx spell); any `failed` result fails a trial; see docs/RELIABILITY.md.
chaos: deps
	$(SWIFT) build --product apns-relay
	$(SWIFT) build --product relay-harness
	.build/debug/relay-harness chaos $(CHAOS_ARGS)
