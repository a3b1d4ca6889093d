# apns-relay: `make run` shows the relay on an embedded Kafka and simulator; `make test` runs every check.
SWIFT ?= swift

.PHONY: deps build run test swift-test packaging-check bench-kafka fuzz fuzz-smoke

deps:
	@bash scripts/install-deps.sh

build: deps
	$(SWIFT) build --product apns-relay

run: build
	$(SWIFT) run --skip-build apns-relay demo

test: deps
	bash scripts/test.sh
	$(MAKE) packaging-check

# libFuzzer on the event decoder, the APNs response parser and the configuration loader
# (docs/RELIABILITY.md); FUZZ_SECONDS per target. Builds into .build/fuzz.
FUZZ_SECONDS ?= 60
fuzz:
	bash scripts/fuzz.sh $(FUZZ_SECONDS)

# The same, a few seconds per target.
fuzz-smoke:
	bash scripts/fuzz.sh 5

# Packaging checks (offline): hadolint, helm lint/template + kubernetes-validate, yamllint, chart tests.
packaging-check:
	bash scripts/check-packaging.sh

# Consume 1,000,000 messages through the Swift consumer and through a plain C loop; see docs/BENCHMARKS.md.
bench-kafka: deps
	$(SWIFT) build -c release --product kafka-bench
	.build/release/kafka-bench
